"""What `train-anywhere plan` and `sweep --plan` must say rather than do silently, and bad
input in one line (issue 59, findings 6 and 7). Each plan here is at the project's H100
figure (Mamba-Spike: 52 min an epoch) on machines of a --quotas file; no training."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from lib.cli.params import UsageError
from lib.cli.plan import quotas
from tests.test_plan import cli

START = "2026-12-01T09:00"


def plan_on(tmp_path, toml: str, *args):
    mine = tmp_path / "mine.toml"
    mine.write_text(toml)
    return cli("mamba_spike", "--quotas", str(mine), "--measured", str(tmp_path / "none"),
               "--no-kaggle-client", "--start", START, "--out", str(tmp_path / "p"), *args)


def test_a_paid_platform_that_becomes_the_plan_is_said(tmp_path):
    rc, out, err = plan_on(
        tmp_path, '[platforms.lab]\naccelerator = "H100"\n[pools.lab]\nhours = 1.0\n'
        'period = "day"\n[platforms.modal]\naccelerator = "H100"\n',
        "-p", "EPOCHS", "20", "--platforms", "lab,modal", "--horizon", "2d", "--json")
    assert rc == 0, err
    plan = json.loads(out)
    assert "modal" in plan["platforms"]
    assert ("NOTE: the free platforms cannot finish within --horizon 2d: this plan uses modal, "
            "which bill by the hour") in " ".join(plan["notes"])


def test_an_epoch_longer_than_any_session_is_said_as_such(tmp_path):
    rc, _, err = plan_on(tmp_path, '[platforms.lab]\naccelerator = "H100"\n'
                                   'session_hours = 0.5\n', "-p", "EPOCHS", "2",
                         "--platforms", "lab")
    assert rc == 2 and err.count("\n") == 1, err
    assert "an epoch takes longer than any session on lab (the shortest epoch 0.87 h" in err
    assert "resumes mid-epoch from its checkpoints (CHECKPOINT_MINUTES)" in err


def test_a_quota_that_changes_nothing_and_a_pool_that_does_not_exist_are_said(tmp_path):
    rc, out, err = plan_on(tmp_path, '[platforms.lab]\naccelerator = "H100"\n', "-p", "EPOCHS",
                           "2", "--platforms", "lab,colab_t4", "--quota", "colab_t4=3h/day",
                           "--json")
    assert rc == 0, err
    assert ("NOTE: --quota colab_t4=3h/day changes nothing: colab_t4 has no speed for this "
            "work") in json.loads(out)["notes"][0]
    rc, _, err = plan_on(tmp_path, '[platforms.lab]\naccelerator = "H100"\npool = "kagle_gpu"\n',
                         "-p", "EPOCHS", "2", "--platforms", "lab")
    assert rc == 2 and err.count("\n") == 1, err
    assert "platform lab names pool 'kagle_gpu' (did you mean kaggle_gpu?), which no " \
           "[pools.NAME] defines" in err


def test_sweep_plan_says_split_cells_and_a_backend_that_cannot_start_stops_no_other(
        tmp_path, monkeypatch, capsys):
    import lib.cli.sweep as sweep
    from lib.cli.plan.follow import follow

    plan = {"workload": "fashion_mnist", "origin": "fashion_mnist --grid SEED=1,2",
            "request": {"params": [], "grid": ["SEED=1,2"]},
            "limits": {"colab_t4": {"backend": "colab"}, "local": {"backend": "local"}},
            "sessions": [{"cell": "seed=1", "platform": "colab_t4", "epochs": 3},
                         {"cell": "seed=1", "platform": "local", "epochs": 1},
                         {"cell": "seed=2", "platform": "local", "epochs": 4}]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    ran = []

    def fake(args, only):
        if args.on == "colab":
            raise UsageError("the colab backend needs the `colab` tool; install it.")
        ran.append((args.on, sorted(only)))
        return 0

    monkeypatch.setattr(sweep, "sweep_command", fake)
    rc = follow(SimpleNamespace(plan=str(path), workload=None, grid=None, param=None,
                                out=str(tmp_path / "s")))
    said = capsys.readouterr()
    assert rc == 2 and ran == [("local", ["seed=2"])]
    assert "plan: the 1 cell(s) on colab did not start: the colab backend needs" in said.err
    assert ("plan: 1 cell(s) planned across platforms (seed=1) run whole on their majority "
            "platform, so they finish later than planned") in said.out


@pytest.mark.parametrize("item, source", [
    ("lab=3h", "--quota lab=3h (a week: no period given)"),
    ("lab=3h/day", "--quota lab=3h/day"),
])
def test_a_quota_without_a_period_says_the_week_it_assumes(tmp_path, item, source):
    rc, out, err = plan_on(tmp_path, '[platforms.lab]\naccelerator = "H100"\n', "-p", "EPOCHS",
                           "2", "--platforms", "lab", "--quota", item, "--json")
    assert rc == 0, err
    assert json.loads(out)["limits"]["lab"]["source"].endswith(f"quota: {source}")


@pytest.mark.parametrize("value", ["ten", "2.5", "True", "-3", "0"])
def test_epochs_that_are_no_count_of_epochs_are_one_line(value, tmp_path):
    rc, _, err = cli("fashion_mnist", "-p", "EPOCHS", value, "--no-kaggle-client", "--out",
                     str(tmp_path))
    assert rc == 2 and err.count("\n") == 1, err
    assert "is not a number of epochs; expected a whole number above 0" in err


def test_short_sessions_show_their_hours_and_the_kaggle_note_is_whole(tmp_path):
    from lib.cli.plan import hours

    assert [hours(h) for h in (0.000195, 0.0426, 0.1, 2.0, 0.0)] == [
        "0.000195", "0.0426", "0.10", "2.00", "0.00"]
    mine = tmp_path / "h100.toml"
    mine.write_text('[platforms.lab]\naccelerator = "H100"\n')
    rc, out, err = cli("fashion_mnist", "-p", "EPOCHS", "2", "--quotas", str(mine),
                       "--platforms", "lab", "--measured", str(tmp_path), "--no-kaggle-client",
                       "--start", START, "--out", str(tmp_path / "p"))
    assert rc == 0, err
    assert "| 0.00 |" not in out and "| 0.000" in out  # 2 x 0.70 s
    long = "no kaggle.json in ~/.config/kaggle: " + "x" * 100
    said = quotas.kaggle_left(quotas.load(), None, ask=lambda: (_ for _ in ()).throw(
        OSError(long)))
    assert said[0].endswith(f"could not tell: {long})")
