"""Progress reads well wherever the run is watched: a widget, a terminal bar, or plain lines."""

import sys
from types import SimpleNamespace

import pytest

from lib.base import progress


def test_epoch_line_is_a_formatted_row():
    record = {"epoch": 3, "lr": 1.0, "train_loss": 0.41234, "train_samples": 60000,
              "test_loss": 0.3012, "test_accuracy": 0.8712, "test_balanced_accuracy": 0.87,
              "device": "cpu", "seconds": 85.0, "samples_per_s": 705.4, "xla_compiles": 0,
              "xla_repeat_compiles": 0, "xla_fallback_ops": []}
    # accuracy in percent, as the results table and the plots show it (progress.PERCENT)
    row = ("epoch 3/14  train_loss 0.4123  test_loss 0.3012  test_acc 87.12%  test_bal_acc "
           "87.00%  705 samples/s  ETA 4.1 min")
    assert progress.epoch_line(record, 14, "4.1 min") == row
    # read back from metrics.jsonl (keys sorted), the same row; its ETA from its own pace
    assert progress.epoch_line(dict(sorted(record.items())), 14) == row.replace("4.1 min",
                                                                               "15.6 min")
    tiny = progress.epoch_line({"epoch": 1, "test_Fa": 0.0, "test_Fa_all": 3.0,
                                "test_loss": 2e-5}, 2, "0.0 min")
    assert tiny == "epoch 1/2  test_loss 2.00e-05  test_Fa 0  ETA 0.0 min"
    # a run on the offline sample says so beside its numbers
    noted = progress.epoch_line({"epoch": 1, "test_accuracy": 0.5, "samples_per_s": 9.0}, 2,
                                "0.0 min", note="synthetic sample")
    assert noted == "epoch 1/2  test_acc 50.00%  (synthetic sample)  9 samples/s  ETA 0.0 min"


@pytest.mark.parametrize("per_s, shown", [(705.4, "705"), (10.0, "10"), (9.44, "9.4"),
                                          (0.3, "0.3"), (0.034, "0.034"), (1.0, "1")])
def test_a_slow_epochs_rate_keeps_two_significant_digits(per_s, shown):
    """A real model's sample epoch on a CPU (0.3 samples/s) never reads `0 samples/s`."""
    row = progress.epoch_line({"epoch": 1, "samples_per_s": per_s}, 2, "1 h")
    assert row == f"epoch 1/2  {shown} samples/s  ETA 1 h"


class _Stream:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty


def _kernel(monkeypatch, present: bool):
    shell = SimpleNamespace(kernel=object()) if present else None
    monkeypatch.setitem(sys.modules, "IPython", SimpleNamespace(get_ipython=lambda: shell))


@pytest.mark.parametrize("kernel, widgets, tty, kind", [
    (True, True, False, "widget"),
    (True, False, False, "none"),  # tqdm's text bar would add an output at every refresh
    (False, True, True, "text"),
    (False, True, False, "none"),  # a pipe or a log file: one line per epoch
])
def test_the_bar_suits_where_the_run_is_shown(monkeypatch, kernel, widgets, tty, kind):
    _kernel(monkeypatch, kernel)
    monkeypatch.setattr(progress, "has_widgets", lambda: widgets)
    monkeypatch.setattr(sys, "stderr", _Stream(tty))
    assert progress.bar_kind() == kind
    if kind == "none":
        assert isinstance(progress.bar(10), progress.NoBar)


def test_lines_go_to_stdout_without_a_bar(monkeypatch, capsys):
    _kernel(monkeypatch, False)
    progress.write("epoch 1/2  train_loss 1")
    assert capsys.readouterr().out == "epoch 1/2  train_loss 1\n"
