"""The checkout under test, served as if it were GitHub: git's `url.<base>.insteadOf`.

The bootstrap clones `https://github.com/<repository>.git`; with the environment of a
`ServedRepo`, git fetches that URL from a local bare repository instead, holding the files of
this checkout as they are on disk (tracked and new, not ignored) committed on one branch.
No network is used, and what is served is exactly the code under test.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_IDENTITY = ["-c", "user.name=CI", "-c", "user.email=ci@localhost", "-c", "commit.gpgsign=false"]


def git(*args, cwd: Path) -> str:
    out = subprocess.run(["git", *_IDENTITY, *args], cwd=cwd, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {out.stderr.strip()}")
    return out.stdout.strip()


class ServedRepo:
    """A bare repository at `base/<owner>/<name>.git` that git serves for GitHub's URL."""

    def __init__(self, base: Path, repository: str = "train-anywhere/train-anywhere",
                 branch: str = "main", root: Path = ROOT):
        self.base, self.branch = base, branch
        self.bare = base / f"{repository}.git"
        self.work = base / "_work"
        self.work.mkdir(parents=True)
        listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=root)
        for name in filter(None, listed.split("\0")):
            src = root / name
            if src.is_file():  # a tracked file deleted in the work tree is not served
                (self.work / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, self.work / name)
        git("init", "--quiet", "--initial-branch", branch, cwd=self.work)
        self.commit("the checkout under test")
        self.bare.parent.mkdir(parents=True, exist_ok=True)
        git("clone", "--quiet", "--bare", str(self.work), str(self.bare), cwd=base)

    @property
    def env(self) -> dict[str, str]:
        """Environment for git (and a kernel's git) that serves GitHub from `base`."""
        return {"GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": f"url.{self.base.as_uri()}/.insteadOf",
                "GIT_CONFIG_VALUE_0": "https://github.com/"}

    def commit(self, message: str, files: dict[str, str] | None = None) -> str:
        """Write `files` (path -> text), commit them on the branch, serve it; the commit id."""
        for name, text in (files or {}).items():
            (self.work / name).parent.mkdir(parents=True, exist_ok=True)
            (self.work / name).write_text(text)
        git("add", "-A", cwd=self.work)
        git("commit", "--quiet", "--allow-empty", "-m", message, cwd=self.work)
        if self.bare.exists():
            git("push", "--quiet", str(self.bare), f"HEAD:{self.branch}", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

    def head(self) -> str:
        return git("rev-parse", self.branch, cwd=self.bare)
