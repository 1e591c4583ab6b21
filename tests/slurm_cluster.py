"""A real single-node Slurm on this machine, for the Slurm sweep tests.

    python -m tests.slurm_cluster run -- python -m pytest -m slurm tests/test_sweep_slurm.py

installs Debian's `slurm-wlm` and `munge` when they are missing (as root, with apt-get),
starts `munged`, `slurmctld` and `slurmd` with a generated `slurm.conf` and every file
(key, sockets, state, spool, logs) in a temporary folder, runs the command with `SLURM_CONF`
pointing at that cluster, and stops the daemons it started whatever happened. Nothing under
/etc is read or changed. Where no cluster can be had (not root, no apt-get, a daemon that
will not start) it says so in one line and runs the command with `TA_SLURM=local`: the tests
then run the same sweeps on submitit's local executor and say so.

The cluster is the smallest that behaves like a university one: one node with every CPU of
this machine and two `gpu` GRES (no devices: enough for the scheduler to place `--gres`),
partitions `debug` (default) and `gpu`, accounting off (no slurmdbd, so `sacct` fails, as on
many small clusters), requeue allowed. Two settings make it quicker than a university one:
a requeued job waits `cred_expire` (10 s here, 120 s by default) before it may start again,
and the scheduler looks at the queue every 2 s (60 s by default). Slurm's defaults otherwise;
the keys are those of slurm.conf(5) and gres.conf(5) for Slurm 22.05 (https://slurm.schedmd.com/slurm.conf.html).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
GPUS = 2

SLURM_CONF = """\
ClusterName=ta
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={dir}/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
GresTypes=gpu
KillWait=5
SchedulerParameters=sched_interval=2,bf_interval=2
MinJobAge=300
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} Gres=gpu:{gpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes={host} MaxTime=INFINITE State=UP
"""
# Slurm drops a file-less GPU ("Removing file-less GPU"): empty files stand for the devices.
GRES_CONF = "NodeName={host} Name=gpu File={dir}/dev/gpu[0-{last}]\n"


class NoCluster(RuntimeError):
    """No Slurm can be started here; the message is one line saying why."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def possible() -> bool:
    """Root on a Debian-like system: where `make test` must have a real cluster."""
    return os.geteuid() == 0 and bool(shutil.which("apt-get"))


def ensure_installed() -> None:
    """apt-get install slurm-wlm and munge when a daemon is missing (root and Debian only)."""
    if all(shutil.which(d, path=f"/usr/sbin:{os.environ.get('PATH', '')}") for d in DAEMONS):
        return
    if not possible():
        raise NoCluster("slurm-wlm and munge are not installed and this is not root on Debian "
                        "(apt-get install -y slurm-wlm munge would install them)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                 "slurm-wlm", "munge"],
                ["apt-get", "clean"]):  # the downloaded .debs: not needed once installed
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
            raise NoCluster(f"{' '.join(cmd)} failed: {tail[0] if tail else proc.returncode}")


class Cluster:
    """munged + slurmctld + slurmd in `folder`, started in the foreground as our children."""

    def __init__(self, folder: Path) -> None:
        self.dir = Path(folder)
        self.host = socket.gethostname().split(".")[0]
        self.procs: list[subprocess.Popen] = []
        self.conf = self.dir / "slurm.conf"

    @property
    def env(self) -> dict:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _daemon(self, *cmd: str) -> None:
        with open(self.dir / f"{Path(cmd[0]).name}.out", "ab") as log:  # the child keeps it
            self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                               env=self.env, start_new_session=True))

    def start(self, timeout: float = 60) -> None:
        if os.geteuid() != 0:
            raise NoCluster("the single-node Slurm runs its daemons as root; this is not root")
        for sub in ("state", "spool", "munge", "dev"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        for n in range(GPUS):
            (self.dir / "dev" / f"gpu{n}").touch()
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        fields = {"host": self.host, "dir": self.dir, "cpus": os.cpu_count() or 1,
                  "gpus": GPUS, "last": GPUS - 1, "ctld_port": _free_port(),
                  "slurmd_port": _free_port()}
        self.conf.write_text(SLURM_CONF.format(**fields))
        (self.dir / "gres.conf").write_text(GRES_CONF.format(**fields))
        sbin = "/usr/sbin"
        self._daemon(f"{sbin}/munged", "-F", "--force", f"--key-file={key}",
                     f"--socket={self.dir}/munge.socket", f"--pid-file={self.dir}/munged.pid",
                     f"--log-file={self.dir}/munged.log", f"--seed-file={self.dir}/munge/seed")
        self._wait(lambda: (self.dir / "munge.socket").exists(), timeout, "munged")
        self._daemon(f"{sbin}/slurmctld", "-D", "-i", "-f", str(self.conf))
        self._wait(lambda: self._ok(["scontrol", "ping"], "UP"), timeout, "slurmctld")
        self._daemon(f"{sbin}/slurmd", "-D", "-f", str(self.conf), "-N", self.host)
        self._wait(lambda: self._ok(["sinfo", "-h", "-o", "%t", "-p", "debug"], "idle"),
                   timeout, "slurmd")

    def _queue(self) -> str:
        proc = subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=self.env)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def _ok(self, cmd: list[str], want: str) -> bool:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=self.env)
        return proc.returncode == 0 and want in proc.stdout

    def _wait(self, ready, timeout: float, name: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                break
            if ready():
                return
            time.sleep(0.5)
        log = self.dir / f"{name}.log"
        last = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        raise NoCluster(f"{name} did not come up in {timeout:.0f}s"
                        + (f": {last[0]}" if last else ""))

    def stop(self) -> None:
        """Cancel what is left, stop the daemons we started (SIGTERM, then SIGKILL), then
        any job step they left behind (slurmstepd outlives slurmd): every process whose
        environment names this cluster's slurm.conf."""
        if self.procs:
            subprocess.run(["scancel", "--full", "-u", "root"], env=self.env,
                           capture_output=True, timeout=30)
            end = time.monotonic() + 20
            while time.monotonic() < end and self._queue():
                time.sleep(1)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        for pid in self.leftovers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def leftovers(self) -> list[int]:
        mark = f"SLURM_CONF={self.conf}".encode()
        found = []
        for env in Path("/proc").glob("[0-9]*/environ"):
            try:
                if mark in env.read_bytes().split(b"\0") and int(env.parent.name) != os.getpid():
                    found.append(int(env.parent.name))
            except (OSError, ValueError):
                continue
        return found


def _call(command: list[str], env: dict) -> int:
    """Run `command`; if we are stopped meanwhile, stop it too (it would wait on a dead
    cluster)."""
    child = subprocess.Popen(command, env=env)
    try:
        return child.wait()
    finally:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()


def run(command: list[str]) -> int:
    """Run `command` against a fresh cluster (stopped afterwards), or on TA_SLURM=local."""
    # SIGTERM (a CI job cancelled) unwinds like Ctrl-C, so `finally` stops the daemons.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    folder = Path(tempfile.mkdtemp(prefix="ta-slurm-"))
    cluster = Cluster(folder)
    try:
        try:
            ensure_installed()
            cluster.start()
        except NoCluster as exc:
            cluster.stop()
            if possible():  # root on Debian (CI): a cluster that will not start is a failure
                print(f"slurm tests: the single-node Slurm did not start: {exc} (logs in "
                      f"{folder} are removed; run the command again to see them)", flush=True)
                return 1
            print(f"slurm tests: no single-node Slurm here ({exc}); the Slurm sweep tests run "
                  "on submitit's local executor instead", flush=True)
            return _call(command, {**os.environ, "TA_SLURM": "local", "TA_SLURM_WHY": str(exc)})
        print(f"slurm tests: a single-node Slurm is up (node {cluster.host}, SLURM_CONF="
              f"{cluster.conf})", flush=True)
        return _call(command, {**cluster.env, "TA_SLURM": "cluster"})
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3 or argv[0] != "run" or argv[1] != "--":
        print("usage: python -m tests.slurm_cluster run -- COMMAND...", file=sys.stderr)
        return 2
    return run(argv[2:])


if __name__ == "__main__":
    raise SystemExit(main())
