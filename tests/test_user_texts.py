"""What a user reads before anything runs says what is true now: counts of platforms are the
platforms that exist, `list` and `params` print whole columns and comments, and the device
line names folders, not words. No kernel starts here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from lib.cli import main as cli
from lib.cli import params
from lib.runtime.platforms import PLATFORMS

ROOT = Path(__file__).resolve().parent.parent
NUMBERS = {w: i for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
     "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen"])}
# "six platform notebooks", "all 9 platforms", "to six notebooks", "notebooks for nine
# platforms": a count of every platform.
COUNT = re.compile(r"\b(?:(?P<a>\w+) platform notebooks|all (?P<b>\w+) platforms|to (?P<c>\w+) "
                   r"notebooks|for (?:all |each of the )?(?P<d>\w+) platforms)\b", re.IGNORECASE)


def user_texts() -> dict[str, str]:
    """README, the guides, the scaffold and its templates, the package description, and what
    `train-anywhere new` prints."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
             ROOT / "lib" / "cli" / "new.py",
             *sorted((ROOT / "lib" / "cli" / "templates").glob("*")),
             ROOT / "lib" / "cli" / "main.py", *sorted((ROOT / "notebooks_src").glob("*.py"))]
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in paths}
    texts["pyproject description"] = tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["description"]
    return texts


def counts(text: str) -> list[int]:
    found = []
    for match in COUNT.finditer(text):
        word = next(g for g in match.groups() if g).lower()
        if word.isdigit() or word in NUMBERS:
            found.append(int(word) if word.isdigit() else NUMBERS[word])
    return found


def test_the_count_finder_finds_the_stale_phrasings():
    assert counts("renders six platform notebooks, for all 4 platforms, from a script to "
                  "six notebooks") == [6, 4, 6]
    assert counts("a notebook per platform; its two platforms") == []


def test_every_count_of_platforms_is_the_platforms_that_exist():
    texts = user_texts()
    assert len(texts) > 8
    wrong = {name: found for name, text in texts.items()
             if (found := [n for n in counts(text) if n != len(PLATFORMS)])}
    assert not wrong, f"{len(PLATFORMS)} platforms exist; stale counts: {wrong}"


def test_the_package_description_names_no_platform_subset():
    description = user_texts()["pyproject description"]
    assert "Apple MPS" not in description and "P100" not in description


def test_the_guide_puts_data_on_scratch_not_on_drive_or_the_kaggle_output():
    guide = (ROOT / "docs" / "your-own-experiment.md").read_text()
    data = guide.split("the data lives in `DATA_DIR`")[1].split(". Run folders")[0]
    assert "scratch" in data and "Drive" not in data and "/kaggle/working" not in data


def test_new_says_how_many_notebooks_it_renders(tmp_path, monkeypatch, capsys):
    from lib.cli import new as scaffold

    monkeypatch.setattr(scaffold, "new", lambda name: [])
    assert cli.main(["new", "my_experiment"]) == 0
    out = capsys.readouterr().out
    assert f"a notebook for each of the {len(PLATFORMS)} platforms" in out


def test_list_keeps_its_columns_whatever_the_platform_names(monkeypatch, capsys):
    from dataclasses import replace

    long = replace(PLATFORMS["colab_t4"], name="a_platform_with_a_long_name")
    monkeypatch.setattr(cli, "platforms", lambda: {**PLATFORMS, long.name: long})
    assert cli.main(["list"]) == 0
    rows = capsys.readouterr().out.split("platforms:\n")[1].splitlines()[:-1]
    starts = {row.index(p.title) for row, p in zip(rows, [*PLATFORMS.values(), long],
                                                   strict=True)}
    assert len(starts) == 1, rows  # every title starts in one column


@pytest.mark.parametrize("workload", params.workloads())
def test_params_prints_every_comment_whole(workload, capsys):
    """No comment ends mid-phrase (the RESUME one stopped after `"require"`)."""
    assert cli.main(["params", workload]) == 0
    for line in capsys.readouterr().out.splitlines()[1:]:
        assert line.count('"') % 2 == 0, line
    resume = next(p for p in params.parameters(workload) if p.name == "RESUME")
    assert all(f'"{choice}":' in resume.comment for choice in ("auto", "new", "require"))


def test_the_device_line_names_folders_not_words(tmp_path):
    from lib.runtime.clock import Clock
    from lib.runtime.platforms import storage
    from lib.session import where_line

    line = where_line(Path("data"), Path("runs/x"), storage("local"), Clock(0.0, None))
    assert line.startswith(f"data in {Path('data').absolute()}; results in "
                           f"{Path('runs/x').absolute()}")
