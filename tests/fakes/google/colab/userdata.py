"""Fake `google.colab.userdata`: Colab's Secrets panel as the JSON file TA_FAKE_COLAB_SECRETS
names, {"NAME": "value"} or {"NAME": {"value": "...", "access": false}} for a secret this
notebook was not given access to. Raises as colabtools' google/colab/userdata.py does; each
request is logged (the name, never the value) to calls.jsonl in TA_FAKE_COLAB_LOG."""

import json
import os
from pathlib import Path


class NotebookAccessError(Exception):
    def __init__(self, key):
        super().__init__(f"Notebook does not have access to secret {key}")


class SecretNotFoundError(Exception):
    def __init__(self, key):
        super().__init__(f"Secret {key} does not exist.")


def get(key):
    if os.environ.get("TA_FAKE_COLAB_LOG"):
        with open(Path(os.environ["TA_FAKE_COLAB_LOG"]) / "calls.jsonl", "a") as f:
            f.write(json.dumps({"call": "userdata.get", "key": key}) + "\n")
    path = os.environ.get("TA_FAKE_COLAB_SECRETS")
    stored = json.loads(Path(path).read_text()) if path else {}
    if key not in stored:
        raise SecretNotFoundError(key)
    entry = stored[key] if isinstance(stored[key], dict) else {"value": stored[key]}
    if not entry.get("access", True):
        raise NotebookAccessError(key)
    return entry["value"]
