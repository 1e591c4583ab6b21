"""The loopback Kaggle stand-in itself (tests/fakes/kaggle_server.py): two of them, in two
processes as in two xdist workers, serve the client at once (the fixed port they once bound
made one wait for the other, a worker idle for minutes), and each serves only the address the
client names."""

import os
import subprocess
import sys

import requests

from tests.fakes.kaggle_server import ADDRESS, PROXY, FakeKaggle
from tests.notebook_run import ROOT

# One process: a stand-in that, once serving, waits for the other's before it answers the real
# client's `quota_view` (the hours its own stand-in was given).
CHILD = """
import sys, time
from pathlib import Path
from lib.cli.kaggle_api import client
from tests.fakes.kaggle_server import FakeKaggle

barrier, name, hours = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
with FakeKaggle(barrier.parent / name) as server:
    server.accelerator_quota = {"gpuQuota": {"timeUsed": "0s",
                                             "totalTimeAllowed": f"{hours * 3600}s"}}
    (barrier / name).touch()
    deadline = time.monotonic() + 60
    while len(list(barrier.iterdir())) < 2:
        if time.monotonic() > deadline:
            sys.exit(f"{name}: the other stand-in was not serving within 60 s")
        time.sleep(0.05)
    print(client().quota_view().gpu_quota.total_time_allowed.total_seconds() / 3600)
"""


def test_two_stand_ins_in_two_processes_serve_the_client_at_once(tmp_path):
    barrier = tmp_path / "up"
    barrier.mkdir()
    config = tmp_path / "kaggle-config"
    config.mkdir()
    env = {**os.environ, "KAGGLE_API_ENVIRONMENT": "TEST", "KAGGLE_CONFIG_DIR": str(config),
           "HOME": str(tmp_path), "KAGGLE_USERNAME": "tester", "KAGGLE_KEY": "placeholder"}
    procs = {hours: subprocess.Popen([sys.executable, "-c", CHILD, str(barrier), f"s{hours}",
                                      str(hours)], cwd=ROOT, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for hours in (30, 20)}
    for hours, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert float(out) == hours  # each client reached its own stand-in


def test_a_request_for_any_other_address_is_refused(tmp_path):
    before = {k: os.environ.get(k) for k in PROXY}
    with FakeKaggle(tmp_path) as server:
        assert os.environ["HTTP_PROXY"] == server.proxy
        other = requests.post("http://example.com/api/v1/kernels.KernelsApiService/SaveKernel",
                              json={}, timeout=10)
        ours = requests.post(f"http://{ADDRESS}/api/v1/kernels.KernelsApiService/Nothing",
                             json={}, auth=("tester", "placeholder"), timeout=10)
    assert other.status_code == 502 and "serves http://localhost:7777 only" in other.reason
    assert ours.status_code == 404 and "no endpoint" in ours.json()["message"]
    assert {k: os.environ.get(k) for k in PROXY} == before  # the process's own, once it stops
