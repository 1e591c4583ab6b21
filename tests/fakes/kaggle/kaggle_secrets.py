"""Fake `kaggle_secrets` (Kaggle's image adds the real one: Kaggle/docker-python
patches/kaggle_secrets.py): Add-ons -> Secrets as the JSON file TA_FAKE_KAGGLE_SECRETS names.
As the real client, it needs KAGGLE_USER_SECRETS_TOKEN (set once a secret is attached) and
raises BackendError for a label that is not attached; each request is logged (the label, never
the value) to calls.jsonl in TA_FAKE_KAGGLE_LOG. Its own folder, so that a Kaggle session's
path holds no fake `google.colab`."""

import json
import os
from pathlib import Path


class CredentialError(Exception):
    pass


class BackendError(Exception):
    pass


class UserSecretsClient:
    def __init__(self):
        if os.getenv("KAGGLE_USER_SECRETS_TOKEN") is None:
            raise CredentialError("A JWT Token is required to use the UserSecretsClient, but "
                                  "none found in environment variable KAGGLE_USER_SECRETS_TOKEN")

    def get_secret(self, label):
        if os.environ.get("TA_FAKE_KAGGLE_LOG"):
            with open(Path(os.environ["TA_FAKE_KAGGLE_LOG"]) / "calls.jsonl", "a") as f:
                f.write(json.dumps({"call": "get_secret", "label": label}) + "\n")
        path = os.environ.get("TA_FAKE_KAGGLE_SECRETS")
        stored = json.loads(Path(path).read_text()) if path else {}
        if label not in stored:
            raise BackendError(f"Unexpected response from the service. Response: "
                               f"{{'wasSuccessful': False, 'errors': ['{label} not attached']}}.")
        return stored[label]
