"""`make test`'s own measurement (tests/suite.py): phases timed in order, one beside another,
a failure stops what follows and says so in the table, and the disk a phase writes is counted.

Nothing here depends on how fast this machine is: where two things must meet in time, each
waits for the other's mark (a file), with a timeout that only a broken suite.py reaches (then
the test fails, after WAIT_S at most)."""

import contextlib
import re

from tests import suite

WAIT_S = 30


def wait_for(mark: str) -> str:
    """A recipe line's shell loop: wait until file `mark` exists; exit 7 after WAIT_S."""
    return (f"i=0; while [ ! -f {mark} ]; do i=$$((i+1)); [ $$i -lt {WAIT_S * 100} ] || exit 7; "
            "sleep 0.01; done")


MAKEFILE = f"""\
ok:
\t@echo ok-ran
fail:
\t@exit 3
write:
\t@head -c 40000000 /dev/zero > big.tmp && mv big.tmp big.bin && {wait_for("sampled")} && \\
\t  rm big.bin
later:
\t@touch later-ran
main-side:
\t@touch main-started && {wait_for("side-started")} && touch later-ran
side-main:
\t@touch side-started && {wait_for("main-started")} && echo ok-ran
main-two:
\t@touch main-started && {wait_for("side-started")} && {wait_for("side2-started")}
side2-main:
\t@touch side2-started && {wait_for("main-started")}
side-short:
\t@touch side-done
main-long:
\t@{wait_for("side-done")} && sleep 0.5
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


def test_a_phase_beside_another(tmp_path):
    """The two run at once: each waits until the other has started (one after the other, the
    first would time out and fail), and their recorded intervals intersect."""
    (tmp_path / "Makefile").write_text(MAKEFILE)
    main, side = suite.Phase("tests", "main-side"), suite.Phase("downloads", "side-main")
    ok, text = suite.measure([(main, side)], root=tmp_path)
    assert side.rc == 0 and main.rc == 0, text
    assert ok and side.beside == "tests"
    assert side.started < main.ended and main.started < side.ended  # the intervals overlap
    assert (tmp_path / "later-ran").exists()
    assert "ok-ran" in (tmp_path / ".suite" / "side-main.log").read_text()  # its output, kept
    assert "| downloads | side-main |" in text and "beside tests" in text


def test_two_phases_beside_one(tmp_path):
    """Both side phases run while the main one does: it waits until each has started (a side
    started only after the main, or after the other side, would time out and fail)."""
    (tmp_path / "Makefile").write_text(MAKEFILE)
    main = suite.Phase("tests", "main-two")
    sides = suite.Phase("downloads", "side-main"), suite.Phase("slurm", "side2-main")
    ok, text = suite.measure([(main, *sides)], root=tmp_path)
    assert ok and main.rc == 0 and all(s.rc == 0 for s in sides), text
    for side in sides:
        assert side.beside == "tests" and side.started < main.ended and main.started < side.ended
    assert "| downloads | side-main |" in text and "| slurm | side2-main |" in text


def test_a_phase_beside_another_is_timed_to_its_own_end(tmp_path):
    """The side ends first (the main waits for its mark, then half a second more): its seconds
    are its own, not the main's."""
    (tmp_path / "Makefile").write_text(MAKEFILE)
    main, side = suite.Phase("tests", "main-long"), suite.Phase("slurm", "side-short")
    ok, _ = suite.measure([(main, side)], root=tmp_path)
    assert ok and side.ended < main.ended and side.seconds < main.seconds - 0.4


def test_a_phase_beside_several_in_turn_and_a_failure_stops_the_turns(tmp_path):
    """The side phase runs through both mains, in order: it waits for the second main's start
    mark, which that main writes only after the first ended; a failed main stops the next."""
    (tmp_path / "Makefile").write_text(MAKEFILE)
    first, second = suite.Phase("first", "ok"), suite.Phase("tests", "main-side")
    side = suite.Phase("slurm", "side-main")
    ok, text = suite.measure([((first, second), side)], root=tmp_path)
    assert ok and first.rc == second.rc == side.rc == 0, text
    assert first.ended <= second.started < side.ended  # the side outlived the first main
    assert "beside first" in text and "| tests | main-side |" in text
    again = tmp_path / "again"
    again.mkdir()
    (again / "Makefile").write_text(MAKEFILE)
    broken, never = suite.Phase("broken", "fail"), suite.Phase("never", "later")
    ok, text = suite.measure([((broken, never), suite.Phase("side", "ok"))], root=again)
    assert not ok and not (again / "later-ran").exists()
    assert "| never | later | 0 | not run |" in text


def test_the_disk_peak_is_the_largest_rise_seen_on_each_file_system(tmp_path):
    """A file system's use rises by 3 GB, then falls below the start: the peak is 3 GB."""
    used = iter([10e9, 13e9, 9e9])  # at the start, while a phase ran, at the end

    class Usage:
        def __init__(self, _):
            self.used = next(used)

    disk = suite.DiskPeak([tmp_path], every=3600, usage=Usage)
    disk.during("lanes")
    disk.sample()
    assert disk.peak == 3e9 and disk.peaks == {"": 3e9, "lanes": 0}


def test_the_table_gives_each_step_its_own_peak_disk(tmp_path):
    """A step that writes a file and removes it shows that rise on its row, the step before it
    none, the whole suite's line the largest (a stand-in file system where the 40 MB file
    weighs 4 GB, so that it shows at the table's 0.1 GB). The file is removed only after a
    sample has seen it (the sampler marks `sampled`), however slowly either runs."""
    (tmp_path / "Makefile").write_text(MAKEFILE)

    class Usage:
        def __init__(self, _):
            size = 0
            for path in tmp_path.glob("*.bin"):
                with contextlib.suppress(FileNotFoundError):  # gone since the listing
                    size += path.stat().st_size
            if size:
                (tmp_path / "sampled").touch()
            self.used = 1e9 + 100 * size

    steps = [(suite.Phase("quiet", "ok"),), (suite.Phase("writer", "write"),)]
    ok, text = suite.measure(steps, root=tmp_path, usage=Usage, every=0.01)
    assert ok, text
    # CPU busy: blank for a step shorter than one clock tick of /proc/stat (`busy`; seen in CI)
    assert re.search(r"\| quiet \| ok \| \d+ \| 0 \| (\d+%)? \| 0.0 GB \|", text), text
    assert re.search(r"\| writer \| write \| \d+ \| 0 \| (\d+%)? \| 4.0 GB \|", text), text
    assert "| **4.0 GB** |" in text, text


def test_make_bench_keeps_the_suites_figures(tmp_path):
    """`make bench` rewrites BENCHMARKS.md from its own runs; the suite's before/after table,
    which no benchmark there measures, is carried over whole."""
    from bench.__main__ import kept_sections

    old = tmp_path / "BENCHMARKS.md"
    old.write_text("# Benchmarks\n\n## Loop\n\nold loop table\n\n## The suite, before and "
                   "after\n\n| phase | s |\n|---|---|\n| main | 1 |\n\n## GPU\n\nnone\n")
    kept = "\n".join(kept_sections(old))
    assert "## The suite, before and after" in kept and "| main | 1 |" in kept
    assert "old loop table" not in kept and "## GPU" not in kept
    assert kept_sections(tmp_path / "missing.md") == []


def test_each_phase_shows_how_busy_the_cpus_were_while_it_ran(tmp_path):
    """Readings of /proc/stat's cpu line (busy, total ticks) at the suite's start, each phase's
    start and end, and the suite's end: a phase's share is its own ticks, not the suite's."""
    (tmp_path / "Makefile").write_text(MAKEFILE)
    readings = iter([(0, 0), (100, 1000), (850, 2000), (900, 2100), (1150, 3100),
                     (1200, 3200)])
    steps = [(suite.Phase("busy", "ok"),), (suite.Phase("waiting", "ok"),)]
    ok, text = suite.measure(steps, root=tmp_path, cpu=lambda: next(readings))
    assert ok, text
    assert re.search(r"\| busy \| ok \| \d+ \| 0 \| 75% \|", text), text
    assert re.search(r"\| waiting \| ok \| \d+ \| 0 \| 25% \|", text), text
    assert "| **38%** |" in text, text  # 1200 of 3200


def test_cpu_times_reads_the_cpu_line_idle_and_iowait_not_busy(tmp_path):
    stat = tmp_path / "stat"  # proc(5): user nice system idle iowait irq softirq steal guest..
    stat.write_text("cpu  10 2 8 70 5 1 1 3 4 0\ncpu0 5 1 4 35 2 0 0 1 2 0\n")
    assert suite.cpu_times(stat) == (25, 100)
    assert suite.cpu_times(tmp_path / "none") is None
    real = suite.cpu_times()
    assert real is None or 0 <= real[0] <= real[1]
