"""`make test`'s own measurement (tests/suite.py): phases timed in order, one beside another,
a failure stops what follows and says so in the table, and the disk a phase writes is counted."""

import re

from tests import suite

MAKEFILE = """\
ok:
\t@echo ok-ran
fail:
\t@exit 3
write:
\t@head -c 40000000 /dev/zero > big.bin && sleep 1.5 && rm big.bin
later:
\t@touch later-ran
"""


def test_phases_are_timed_and_a_failure_stops_the_rest(tmp_path, capfd):
    (tmp_path / "Makefile").write_text(MAKEFILE)
    steps = [(suite.Phase("first", "ok"),), (suite.Phase("broken", "fail"),),
             (suite.Phase("never", "later"),)]
    ok, text = suite.measure(steps, root=tmp_path)
    assert not ok
    assert not (tmp_path / "later-ran").exists()
    assert re.search(r"\| first \| ok \| \d+ \| 0 \|", text), text
    assert re.search(r"\| broken \| fail \| \d+ \| 2 \|", text), text  # make's status
    assert "| never | later | 0 | not run |" in text
    assert (tmp_path / ".suite" / "summary.md").read_text().strip() == text
    assert "ok-ran" in capfd.readouterr().out


def test_a_phase_beside_another_and_the_disk_it_wrote(tmp_path):
    (tmp_path / "Makefile").write_text(MAKEFILE)
    main, side = suite.Phase("tests", "write"), suite.Phase("downloads", "ok")
    ok, text = suite.measure([(main, side)], root=tmp_path)
    assert ok and side.beside == "tests" and side.rc == 0
    assert "ok-ran" in (tmp_path / ".suite" / "ok.log").read_text()
    assert "beside tests" in text
    peak = float(text.split("peak disk used: **")[1].split(" GB")[0])
    assert peak >= 0.03  # the 40 MB file, gone by the end, was seen while it lived
