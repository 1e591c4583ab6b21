"""The real `kaggle` client, authenticated, at the endpoint KAGGLE_API_ENVIRONMENT names.

The client reads credentials as `kaggle` itself does (KAGGLE_API_TOKEN, ~/.kaggle/...,
KAGGLE_USERNAME + KAGGLE_KEY); on Colab or Kaggle those names are also read from the
platform's secret store (lib.runtime.secrets) into this process's environment, never into a
file. KAGGLE_API_ENVIRONMENT selects kagglesdk's endpoint (TEST: http://localhost:7777, which
the tests serve with a stand-in); kaggle 2.2's KaggleApi passes only its own --local/--staging
flags to kagglesdk, so `_Api` hands it that choice. `kernels output` pages through all files
from kaggle 2.2.2 on (kaggle-cli #1046; earlier clients fetched the first page only), so older
clients are refused. Used by the sweep's kaggle backend and by `train-anywhere carry`.
"""

from __future__ import annotations

import contextlib
import io
import re

from lib.cli.params import UsageError
from lib.runtime import secrets

CREDENTIALS = ("KAGGLE_API_TOKEN", "KAGGLE_USERNAME", "KAGGLE_KEY")
MIN_CLIENT = (2, 2, 2)  # the first kaggle client whose `kernels output` pages (#1046)


class KaggleFailed(RuntimeError):
    """The service refused or could not be reached: one line, grid state kept."""


def client():
    """An authenticated KaggleApi (the real client); UsageError if there are no credentials."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # `import kaggle` tries to log in
            from kaggle.api.kaggle_api_extended import KaggleApi
        from kagglesdk import KaggleClient
        from kagglesdk.kaggle_env import KaggleEnv, get_env
    except ImportError:
        raise UsageError("the kaggle backend needs the kaggle client: pip install "
                         "'train-anywhere[sweep]' (or pip install kaggle six).") from None
    check_client_version()

    class _Api(KaggleApi):
        def build_kaggle_client(self):
            env = get_env()
            if env == KaggleEnv.PROD or any(a in self.args for a in ("--local", "--staging",
                                                                     "--admin")):
                return super().build_kaggle_client()
            return KaggleClient(env=env, verbose="--verbose" in self.args,
                                username=self.config_values.get(self.CONFIG_NAME_USER),
                                password=self.config_values.get(self.CONFIG_NAME_KEY),
                                api_token=self.config_values.get(self.CONFIG_NAME_TOKEN),
                                response_processor=self.get_response_processor())

    secrets.export(CREDENTIALS)  # a token kept in Colab's or Kaggle's Secrets
    api = _Api()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            api.authenticate()
    except SystemExit:
        raise UsageError("no Kaggle credentials: create a token at kaggle.com/settings/api and "
                         f"put it in {secrets.where('KAGGLE_API_TOKEN')}, or run `kaggle auth "
                         "login`; then run the same command again.") from None
    return api


def check_client_version(version: str | None = None) -> None:
    """Refuse a kaggle client whose `kernels output` fetches only the first page of files."""
    import importlib.metadata

    version = version or importlib.metadata.version("kaggle")
    parts = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
    if parts < MIN_CLIENT:
        raise UsageError(f"kaggle client {version} downloads only the first page of a kernel's "
                         "output files; the kaggle backend needs kaggle>=2.2.2: pip install -U "
                         "'kaggle>=2.2.2'.")
