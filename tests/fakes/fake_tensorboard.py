"""The Colab stand-in's `tensorboard` command, which `%tensorboard` starts (tensorboard/manager.py
`start`: the `tensorboard` on PATH). Colab's image has TensorBoard's on PATH; the stand-in's
kernel runs from a venv that is not on PATH, so `%tensorboard` said "Could not find
`tensorboard`" where Colab shows the board.

It does what the magic waits for and nothing more: it writes the info file a real server writes
once it listens (tensorboard/program.py calls manager.write_info_file; the magic polls for one
whose cache key is its own, then frames that port), with TensorBoard's own code, so the format
is the installed TensorBoard's. It serves nothing (the frame is only drawn in a browser), and
ends with the kernel that started it, removing its info file (a real one lives as long as the
VM; here the next test's kernel must not find it). As a real one (tensorboard/program.py
`_install_signal_handler`: SIGTERM runs its atexit, which removes the file), a SIGTERM ends it
cleanly: jupyter_client sends one to the kernel's process group when a shutdown is slow.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from tensorboard import manager, version

DEFAULT_PORT = 6006  # TensorBoard's, when no --port is given and it is free


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="tensorboard")
    parser.add_argument("--logdir", default="")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    known, _ = parser.parse_known_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # before the file, as a real one
    manager.write_info_file(manager.TensorBoardInfo(
        version=version.VERSION, start_time=int(time.time()), pid=os.getpid(), port=known.port,
        path_prefix="", logdir=known.logdir, db="",
        cache_key=manager.cache_key(working_directory=os.getcwd(), arguments=argv,
                                    configure_kwargs={})))
    parent = os.getppid()
    try:
        while os.getppid() == parent:  # reparented: the kernel ended
            time.sleep(1)
    finally:
        manager.remove_info_file()


if __name__ == "__main__":
    main(sys.argv[1:])
