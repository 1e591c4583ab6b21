"""How each platform opens a notebook: the project's settings, links and badges.

`settings()` (pyproject.toml's repository, branch and Kaggle user) is the one setting behind
every link and clone. `badge_parts` makes every badge: the README's table, each notebook's
header and the docs site's platform tabs (docs/build.py).
"""

from __future__ import annotations

import tomllib
import urllib.parse
from pathlib import Path

import lib
from lib.runtime.platforms import PLATFORMS, Platform

ROOT = Path(__file__).resolve().parents[2]

COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
KAGGLE_BADGE = "https://kaggle.com/static/images/open-in-kaggle.svg"
# The other clouds' badges (lib/runtime/clouds.py). Studio Lab: the GitHub blob URL under
# /import/github/ (aws/studio-lab-examples: open-in-studio-lab/README.md); Paperspace:
# "Run on Gradient", github.com -> console.paperspace.com/github (docs.digitalocean.com/
# products/paperspace/notebooks/how-to/add-run-on-gradient/). Paid SageMaker has none: its
# README steps clone the repository in JupyterLab.
CLOUD_BADGES = {
    "studiolab": ("Open In SageMaker Studio Lab", "https://studiolab.sagemaker.aws/studiolab.svg",
                  "https://studiolab.sagemaker.aws/import/github/{repository}/blob/{branch}/{path}"),
    "paperspace": ("Run on Gradient", "https://assets.paperspace.io/img/gradient-badge.svg",
                   "https://console.paperspace.com/github/{repository}/blob/{branch}/{path}"),
    # Lightning: the URL-encoded blob URL as repo_url, with the Studio badge image Lightning's
    # own READMEs use; Modal: the raw blob URL after /notebooks/new/, with the badge image of
    # modal-projects/training-gym (tutorials/generate_tutorial.py).
    "lightning": ("Open In Studio",
                  "https://pl-bolts-doc-images.s3.us-east-2.amazonaws.com/app-2/studio-badge.svg",
                  "https://lightning.ai/new?repo_url={blob_quoted}"),
    "modal": ("Open in Modal", "https://modal-cdn.com/open-in-modal.svg",
              "https://modal.com/notebooks/new/{blob}"),
}

def settings(pyproject: Path = ROOT / "pyproject.toml") -> dict:
    """Repository, branch and Kaggle user: the one setting behind every link and clone."""
    conf = tomllib.loads(pyproject.read_text())["tool"]["train_anywhere"]
    return {"repository": conf["repository"], "branch": conf["branch"],
            "kaggle_user": conf.get("kaggle_user", conf["repository"].split("/")[0]),
            "version": lib.__version__}


def blob_url(cfg: dict, path: str) -> str:
    return f"https://github.com/{cfg['repository']}/blob/{cfg['branch']}/{path}"


def open_link(platform: Platform, cfg: dict, path: str) -> str | None:
    if platform.runtime == "colab":
        return f"https://colab.research.google.com/github/{cfg['repository']}/blob/{cfg['branch']}/{path}"
    if platform.runtime == "kaggle":
        return f"https://kaggle.com/kernels/welcome?src={blob_url(cfg, path)}"
    if platform.runtime in CLOUD_BADGES:
        blob = blob_url(cfg, path)
        return CLOUD_BADGES[platform.runtime][2].format(
            **cfg, path=path, blob=blob, blob_quoted=urllib.parse.quote(blob, safe=""))
    return None


def badge_parts(platform: Platform, cfg: dict, path: str) -> tuple[str, str, str] | None:
    """(verb, badge image URL, link that opens `path` there), or None where the platform has
    no open link (it is cloned or downloaded). Every badge is made from this: README, notebook
    headers and the site's platform tabs (docs/build.py, which serves a local copy of the
    image)."""
    link = open_link(platform, cfg, path)
    if link is None:
        return None
    if platform.runtime in CLOUD_BADGES:
        verb, image, _ = CLOUD_BADGES[platform.runtime]
        return verb, image, link
    if platform.runtime == "colab":
        return "Open in Colab", COLAB_BADGE, link
    return "Open in Kaggle", KAGGLE_BADGE, link


def badge(platform: Platform, cfg: dict, path: str) -> str:
    parts = badge_parts(platform, cfg, path)
    if parts is None:
        return f"[{platform.title}]({path})"
    verb, image, link = parts
    return f"[![{verb}]({image})]({link})"


# the badge table's columns: hosted ones first
BADGE_ORDER = ("colab", "kaggle", "studiolab", "sagemaker", "paperspace", "lightning", "modal",
               "local")


def badge_table(workloads: list[str], cfg: dict) -> str:
    platforms = sorted(PLATFORMS.values(), key=lambda p: BADGE_ORDER.index(p.runtime))
    titles = [f"{p.title} ({p.status})" if p.status else p.title for p in platforms]
    head = "| workload | " + " | ".join(titles) + " |"
    rows = [head, "|---" * (len(platforms) + 1) + "|"]
    for w in workloads:
        cells = [badge(p, cfg, f"notebooks/{p.name}/{w}.ipynb") for p in platforms]
        rows.append(f"| `{w}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)
