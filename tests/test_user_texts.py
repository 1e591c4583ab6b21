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
     "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
     "nineteen", "twenty"])}
# A number of platforms in any phrasing: a number (digits or a word), up to three words, then
# "platforms" ("runs on 9 platforms", "nine platforms", "all 9 hosted platforms", "for each of
# the 9 platforms"), or "platform" when it qualifies ("six platform notebooks", "a 9-platform
# matrix"); a possessive before the number qualifies it too ("Kaggle's three platforms"). Also
# the older "to six notebooks" (one notebook per platform).
COUNT = re.compile(
    r"(?:\b(?P<owner>\w+)'s\s+)?(?<![\w.,-])(?P<n>\d+|" + "|".join(NUMBERS) + r")\b"
    r"(?P<gap>(?:[ \t\n-]+[\w/+]+){0,3}?)(?P<sep>[ \t\n-]+)(?P<noun>platforms?)\b"
    r"(?P<notebooks>\s+notebooks?\b)?"
    r"|\bto (?P<to>\d+|" + "|".join(NUMBERS) + r") notebooks\b", re.IGNORECASE)
# A word between the number and "platforms" that makes the number count something else
# ("two GPUs on all platforms", "one notebook per platform").
NOT_A_COUNT = {"on", "of", "in", "for", "per", "across", "to", "from", "with", "at", "by",
               "each", "every", "than", "notebook", "notebooks"}


def subset(word: str) -> set[str] | None:
    """The platforms a qualifier names ("TPU", "Kaggle", "hosted"), or None for a word that
    names none (it qualifies nothing: "all", "supported")."""
    forms = {word.lower(), word.lower().removesuffix("s")}  # "GPUs", "TPUs"
    if forms & {"gpu", "cuda"}:
        return {n for n, p in PLATFORMS.items() if p.accelerator == "cuda"}
    if forms & {"tpu", "xla"}:
        return {n for n, p in PLATFORMS.items() if p.accelerator == "xla"}
    if forms & {"hosted", "cloud"}:
        return {n for n, p in PLATFORMS.items() if p.runtime != "local"}
    named = {n for n, p in PLATFORMS.items() if forms & {p.runtime, p.title.split()[0].lower()}}
    return named or None


def counts(text: str) -> list[tuple[int, int, str]]:
    """Each count of platforms in `text`: (the number said, the number that exist of what it
    counts, the phrase). What it counts: every platform, or those its qualifiers name (several
    joined by "and"/"or": all they name; else the platforms every qualifier names)."""
    found = []
    for match in COUNT.finditer(text):
        word = (match["n"] or match["to"]).lower()
        number = int(word) if word.isdigit() else NUMBERS[word]
        phrase = " ".join(match.group(0).split())
        if match["to"]:
            found.append((number, len(PLATFORMS), phrase))
            continue
        words = re.split(r"[\s-]+", match["gap"].strip(" \t\n-")) if match["gap"].strip() else []
        if any(w.lower() in NOT_A_COUNT for w in words):
            continue
        if match["noun"].lower() == "platform" and not (
                match["notebooks"] or (not words and "-" in match["sep"])):
            continue  # "one platform", "2 x T4 platform": not a count of platforms
        named = [s for w in [match["owner"] or "", *words] if w and (s := subset(w)) is not None]
        if not named:
            counted = set(PLATFORMS)
        elif any(w.lower() in ("and", "or") for w in words):
            counted = set().union(*named)
        else:
            counted = set.intersection(*named)
        found.append((number, len(counted), phrase))
    return found


def stale(texts: dict[str, str]) -> dict[str, list[str]]:
    """Per text, each count of platforms that is not the number that exist."""
    return {name: wrong for name, text in texts.items()
            if (wrong := [f"{phrase!r} (there are {real})" for said, real, phrase in counts(text)
                          if said != real])}


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


def test_the_count_finder_reads_a_number_of_platforms_in_any_phrasing():
    n = len(PLATFORMS)
    said = [(number, real) for number, real, _ in counts(
        "renders six platform notebooks, for all 4 platforms, from a script to six notebooks; "
        "it runs on 9 platforms, on nine platforms, on 9 hosted platforms, on a 9-platform "
        "matrix, for each of the 12 platforms; Kaggle's three platforms and its 2 TPU platforms")]
    assert said == [(6, n), (4, n), (6, n), (9, n), (9, n), (9, n - 1), (9, n), (12, n),
                    (3, 3), (2, 2)]
    # counts of something else, or of one platform
    assert counts("a notebook per platform; one platform; two GPUs on all platforms; torch "
                  "2.8 platforms aside; 3 notebooks for each platform; version 1.2, "
                  "platforms") == []


@pytest.mark.parametrize("planted", [
    "It runs on 9 platforms.", "Nine platforms, one notebook each.",
    "Train on any of the 9 hosted platforms.", "A 12-platform matrix.",
    "Renders ten platform notebooks.", "Colab's three platforms.",
])
def test_a_stale_count_planted_in_a_copy_of_the_readme_is_caught(planted):
    texts = user_texts()
    assert stale(texts) == {}
    texts["README.md"] += f"\n{planted}\n"
    found = stale(texts)
    assert list(found) == ["README.md"] and len(found["README.md"]) == 1, found


def test_every_count_of_platforms_is_the_platforms_that_exist():
    texts = user_texts()
    assert len(texts) > 8
    assert not stale(texts), f"{len(PLATFORMS)} platforms exist; stale counts: {stale(texts)}"


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
