"""A stand-in for google-colab-cli's `colab`, put on PATH by the tests.

It records every call (JSON lines in $COLAB_FAKE_LOG), refuses any option that the real
CLI's `--help` (snapshots in colab_help/, from google-colab-cli 0.7.5) does not list, and
plays a VM per session in $COLAB_FAKE_VMS/<session>/ whose /content is a local folder:
`exec -f X.ipynb` runs the notebook through papermill and writes X_output.ipynb as the real
CLI does; `exec -f X.py` runs the script; `download` and `upload` copy; `stop` deletes the VM.
$COLAB_FAKE_LIMITS (a JSON list, one value per `new`, in order) is the session limit each VM's
notebooks run under (TA_SESSION_HOURS): a stand-in for a training longer than a VM lives.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HELP = Path(__file__).resolve().parent / "colab_help"
ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("new", "exec", "download", "upload", "stop")


def options(command: str) -> set[str]:
    """The option names the real `colab COMMAND --help` lists."""
    text = (HELP / f"{command}.txt").read_text()
    return {name for pair in re.findall(r"│ (--[a-z][a-z-]*)\s+(-[a-z])?", text)
            for name in pair if name}


def parse(command: str, argv: list[str]) -> tuple[dict, list[str]]:
    known = options(command)
    flags, positional, i = {}, [], 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-"):
            if arg not in known:
                print(f"No such option: {arg} (colab {command})", file=sys.stderr)
                raise SystemExit(2)
            if arg == "--high-mem":
                flags[arg] = True
                i += 1
                continue
            flags[arg] = argv[i + 1]
            i += 2
        else:
            positional.append(arg)
            i += 1
    return flags, positional


def vm(flags: dict) -> Path:
    name = flags.get("-s") or flags.get("--session")
    return Path(os.environ["COLAB_FAKE_VMS"]) / name


def remote(path: str, content: Path) -> Path:
    return content / Path(path).relative_to("/content")


def main(argv: list[str]) -> int:
    with open(os.environ["COLAB_FAKE_LOG"], "a") as f:
        f.write(json.dumps(argv) + "\n")
    if not argv or argv[0] not in COMMANDS:
        print(f"stand-in: unsupported command {argv[:1]}", file=sys.stderr)
        return 2
    command, (flags, pos) = argv[0], parse(argv[0], argv[1:])
    if os.environ.get("COLAB_FAKE_NO_AUTH") and command == "new":
        print("[colab] Error: no credentials found; run `gcloud auth application-default "
              "login`", file=sys.stderr)
        return 1
    home = vm(flags)
    content = home / "content"
    if command == "new":
        if home.exists():
            print(f"[colab] session {home.name} exists", file=sys.stderr)
            return 1
        content.mkdir(parents=True)
        (home / "gpu").write_text(flags.get("--gpu", "CPU"))
        limits = json.loads(os.environ.get("COLAB_FAKE_LIMITS", "[]"))
        used = Path(os.environ["COLAB_FAKE_LOG"]).with_suffix(".vms-started")
        n = int(used.read_text()) if used.exists() else 0
        used.write_text(str(n + 1))
        if n < len(limits) and limits[n]:
            (home / "limit").write_text(repr(limits[n]))
        print(f"[colab] Created session {home.name}")
        return 0
    if not home.exists():
        print(f"[colab] Error: no session {home.name}", file=sys.stderr)
        return 1
    if command == "stop":
        shutil.rmtree(home)
        return 0
    if command == "download":
        shutil.copy(remote(pos[0], content), pos[1])
        return 0
    if command == "upload":
        shutil.copy(pos[0], remote(pos[1], content))
        return 0
    file = flags.get("-f") or flags.get("--file")
    text = Path(file).read_text().replace("/content", str(content))
    run = home / Path(file).name
    run.write_text(text)
    env = {**os.environ, **json.loads(os.environ.get("COLAB_FAKE_ENV", "{}"))}
    if (home / "limit").exists():
        env["TA_SESSION_HOURS"] = (home / "limit").read_text()
    if file.endswith(".ipynb"):
        output = os.path.splitext(file)[0] + "_output.ipynb"
        subprocess.run([sys.executable, "-m", "papermill", str(run), output, "--cwd", str(ROOT),
                        "-k", "python3"], env=env, capture_output=True)
        print(f"[colab] Saving notebook with outputs to '{output}'...")
        return 0  # as the real CLI: the errors are in the outputs
    return subprocess.run([sys.executable, str(run)], cwd=content, env=env).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
