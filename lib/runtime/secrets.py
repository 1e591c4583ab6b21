"""A secret (a W&B or Kaggle token), read the way the platform the notebook runs on keeps it.

`secret(name)` looks in the environment first (Modal's and Lightning's secrets, SageMaker,
Paperspace, a terminal or a sweep set variables: what is set there is the user's own choice),
then in the platform's own store:

- Colab: the Secrets panel (the key icon), `google.colab.userdata.get(name)`, which raises
  `SecretNotFoundError` for a name that is not there and `NotebookAccessError` when this
  notebook was not given access (googlecolab/colabtools google/colab/userdata.py). Its request
  waits for the browser with no timeout, so it is not made where no browser can answer
  (TA_DRIVE=off: a VM run by `colab exec` or papermill). `os.environ` holds none of these, the
  usual surprise (huggingface/huggingface_hub#3774).
- Kaggle: Add-ons -> Secrets, `kaggle_secrets.UserSecretsClient().get_secret(label)`, which
  needs the token Kaggle sets in KAGGLE_USER_SECRETS_TOKEN once a secret is attached, and
  raises BackendError for a label that is not attached (Kaggle/docker-python
  patches/kaggle_secrets.py).

A value is never printed, logged or written by this module: callers hand it to the client
that needs it (an environment variable of this process) and say only where it came from.
"""

from __future__ import annotations

import os

from lib.runtime.platforms import DRIVE_ENV, detect_runtime

# Where a user sets a secret on each runtime, for the one line that says how to fix a missing
# one (the guide "Tracking and secrets" says the same, per platform).
WHERE = {
    "colab": "Colab's Secrets panel (the key icon on the left: add {name}, turn on Notebook "
             "access)",
    "kaggle": "Kaggle's Add-ons -> Secrets (add {name} and tick it for this notebook)",
    # Modal and Lightning serve their secrets as environment variables (modal.com/docs/guide/
    # secrets; lightning.ai/docs/platform/security/security-features/secrets).
    "modal": "a Modal Secret holding {name}, attached to the notebook (it becomes an "
             "environment variable)",
    "lightning": "a Lightning user or teamspace secret {name} (Settings -> Secrets; it "
                 "becomes an environment variable)",
    "sagemaker": "an environment variable {name} set by a lifecycle configuration",
}
# Elsewhere: a variable the kernel inherits, set before it starts (a notebook cell would keep
# the value in the notebook).
ENVIRONMENT = ("an environment variable {name}, set before the kernel starts (export it "
               "before `jupyter lab`, or in ~/.bashrc; not in a notebook cell, which would "
               "save it)")


def where(name: str, runtime: str | None = None) -> str:
    """Where `name` is set on `runtime` (default: this one), in words for a fix."""
    runtime = runtime or detect_runtime()
    return WHERE.get(runtime, ENVIRONMENT).format(name=name)


def _colab(name: str) -> str | None:
    if os.environ.get(DRIVE_ENV) == "off":  # no browser here to answer the request
        return None
    from google.colab import userdata

    try:
        return userdata.get(name)
    except (userdata.SecretNotFoundError, userdata.NotebookAccessError):
        return None


def _kaggle(name: str) -> str | None:
    if not os.environ.get("KAGGLE_USER_SECRETS_TOKEN"):  # no secret attached to the notebook
        return None
    from kaggle_secrets import BackendError, UserSecretsClient

    try:
        return UserSecretsClient().get_secret(name)
    except (BackendError, ConnectionError):  # not attached, or the service unreachable
        return None


STORES = {"colab": _colab, "kaggle": _kaggle}


def secret(name: str, runtime: str | None = None) -> str | None:
    """The value of secret `name`: the environment's, else the platform store's; None when
    neither has it (or the store cannot be reached)."""
    if os.environ.get(name):
        return os.environ[name]
    store = STORES.get(runtime or detect_runtime())
    try:
        value = store(name) if store else None
    except ImportError:  # a stand-in runtime without the platform's package
        return None
    return value or None


def export(names, runtime: str | None = None) -> list[str]:
    """Put each secret of `names` found in the platform's store into this process's
    environment, where the clients read them (never a file); the names exported."""
    done = []
    for name in names:
        if not os.environ.get(name) and (value := secret(name, runtime)):
            os.environ[name] = value
            done.append(name)
    return done
