#!/usr/bin/env python3
"""Build the documentation site into docs/_build/html (open its index.html; it works offline).

1. Run each workload's `local` notebook once with papermill, on the CPU, SMOKE on the offline
   sample (SAMPLE_DATA, EPOCHS 2), into docs/_build/executed/ (run folders and sample data under
   docs/_build/runs/, made afresh for each notebook and removed once it ran).
2. Stage docs/ into docs/_build/src with the generated pages: the gallery (a card per workload,
   its thumbnail the executed notebook's own first figure), one page per workload (that
   notebook as executed, under a banner saying so, below a platform switcher whose tabs come
   from lib/runtime/platforms.py and lib/notebooks/badges.py), one page per platform,
   BENCHMARKS.
3. sphinx-build -W (warnings are errors).

    python docs/build.py            # everything (`make docs`)
    python docs/build.py --reuse    # keep docs/_build/executed: pages and Sphinx only
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform as host
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


import nbformat  # noqa: E402

from lib import workloads as contract  # noqa: E402
from lib.notebooks import badges, render  # noqa: E402
from lib.runtime import platforms as plat  # noqa: E402

DOCS = ROOT / "docs"
BUILD = DOCS / "_build"
EXECUTED, RUNS, SRC, HTML = BUILD / "executed", BUILD / "runs", BUILD / "src", BUILD / "html"
SITE_PLATFORM = "local"  # the notebook the site executes (on the CPU here)
SMOKE_PARAMETERS = {"SMOKE": True, "SAMPLE_DATA": True, "EPOCHS": 2}
SYNC_GROUP = "platform"  # sphinx-design keeps the chosen tab of this group from page to page
# Each badge's colours (background, text) for the site's own copy of it: the site loads no
# image from another host, so the badge image is drawn here; its words and link come from
# lib.notebooks.badges.badge_parts, like every other badge.
BADGE_COLOURS = {"colab": ("#f9ab00", "#1f1f1f"), "kaggle": ("#20beff", "#0b1f2a"),
                 "studiolab": ("#ff9900", "#1f1f1f"), "paperspace": ("#1f1f1f", "#ffffff"),
                 "lightning": ("#792ee5", "#ffffff"), "modal": ("#7fee64", "#1f1f1f")}


def log(msg: str) -> None:
    print(f"docs: {msg}", flush=True)


# ---- 1. run the notebooks ---------------------------------------------------------------

def _execute(workload: str, executed: Path, runs: Path) -> tuple[str, float]:
    """notebooks/local/<workload>.ipynb -> executed/<workload>.ipynb; returns its seconds."""
    import papermill

    start = time.monotonic()
    notebook = ROOT / "notebooks" / SITE_PLATFORM / f"{workload}.ipynb"
    # relative to the project (as a user writes them) when the build is inside it
    where = runs / workload
    where = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    params = {**SMOKE_PARAMETERS, "OUT_DIR": str(where / "runs"), "DATA_DIR": str(where / "data")}
    papermill.execute_notebook(str(notebook), str(executed / f"{workload}.ipynb"),
                               parameters=params, cwd=str(notebook.parent),
                               progress_bar=False, kernel_name="python3")
    # The page shows the executed notebook (its figures are in it); the run folder and sample
    # data behind it (ResNet-18 checkpoints: 0.8 GB for the four) are not kept.
    shutil.rmtree(runs / workload, ignore_errors=True)
    return workload, time.monotonic() - start


def execute_all(workloads: list[str], jobs: int) -> None:
    shutil.rmtree(RUNS, ignore_errors=True)  # a fresh run each build: nothing resumes
    shutil.rmtree(EXECUTED, ignore_errors=True)
    EXECUTED.mkdir(parents=True)
    # The kernels inherit this: the CPU (what the banner says), one thread per kernel.
    os.environ.update(TA_DEVICE="cpu", OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        n = len(workloads)
        for workload, seconds in pool.map(_execute, workloads, [EXECUTED] * n, [RUNS] * n):
            log(f"executed {workload} in {seconds:.0f} s")


# ---- 2. the pages -----------------------------------------------------------------------

def build_facts() -> dict:
    """What the banner says: the commit, the date, the CPU."""
    def git(*args):
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip()

    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " with local changes"
    cpu = host.processor() or host.machine()
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(line.split(":", 1)[1].strip() for line in
                   Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    return {"commit": commit, "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": f"{cpu}, {os.cpu_count()} cores", **badges.settings()}


def badge_svg(verb: str, background: str, colour: str) -> str:
    width = 14 + 7 * len(verb)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20" role="img" '
            f'aria-label="{verb}"><title>{verb}</title><rect width="{width}" height="20" rx="3" '
            f'fill="{background}"/><text x="{width / 2}" y="14" fill="{colour}" '
            'font-family="Verdana,DejaVu Sans,sans-serif" font-size="11" text-anchor="middle">'
            f"{verb}</text></svg>\n")


def first_sentence(text: str) -> str:
    """The first sentence of a notebook's introduction (not cut at "et al." or "e.g.")."""
    para = " ".join(text.strip().split("\n\n")[0].split())
    match = re.search(r"(?<!\bal)(?<!e\.g)(?<!i\.e)[.?!](\s|$)", para)
    return para[: match.end()].strip() if match else para


def platform_facts(p: plat.Platform, workload: str | None = None) -> list[tuple[str, str]]:
    """What differs on `p`, read from its profile, lib.runtime.device and its storage roles."""
    from lib.runtime.device import Probe, choose_precision

    def precision(kind, **probe):
        prec = choose_precision(kind, Probe(**probe))
        return prec.name + (" autocast + GradScaler" if prec.scaler else
                            " autocast" if prec.name != "fp32" else "")

    if p.accelerator == "cuda":
        prec = (f"{precision('cuda', capability=(7, 5))} below sm_80 (a T4, a P100); "
                f"{precision('cuda', capability=(8, 0))} from sm_80 (A100, L4, H100)")
    elif p.accelerator == "mps":
        prec = (f"{precision('mps', torch_version='2.8.0')} with torch >= 2.8 on MPS, else "
                f"{precision('mps', torch_version='2.7.0')}; CUDA's rules on a CUDA machine")
    else:
        prec = precision(p.accelerator)
    procs = f", one process per device ({p.devices})" if p.devices > 1 else ""
    facts = [("device", f"{p.accelerator}: {p.gpu}{procs}")]
    facts.append(("precision", prec))
    if workload:
        cfg = contract.get(workload).config
        batch = cfg.default_batch(p.name)
        per = f"{batch} per device, {batch * p.devices} in all" if p.devices > 1 else str(batch)
        facts.append(("default batch", per))
    for label, roles, data, out in storage_variants(p, workload or "<workload>"):
        where = f" ({label})" if label else ""
        data, out = (f"`{d}`" if d.is_absolute() else f"`./{d}` (in the project)"
                     for d in (data, out))
        facts.append((f"data{where}", data))
        facts.append((f"results{where}", f"{out}: {roles.keeps or 'kept on this disk'}"))
    limit = plat.session_limit_hours(p, p.runtime, environ={})
    facts.append(("session limit", f"{limit:g} h: training saves and stops before it"
                  if limit else "none"))
    return facts


def storage_variants(p: plat.Platform, workload: str):
    """(label, roles, data dir, run folder) for each storage `p`'s runtime can have (Colab:
    with and without Drive), with every test override removed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TA_")}
    variants = []
    with mock.patch.dict(os.environ, env, clear=True):
        for mounted in (True, False):
            with mock.patch.object(plat, "drive_mounted", return_value=mounted):
                roles = plat.storage(p.runtime)
                data, out = plat.default_dirs(workload, p.runtime)
            if not any(v[1] == roles for v in variants):
                variants.append((mounted, roles, data, out))
    if len(variants) == 1:
        return [("", *variants[0][1:])]
    return [("Drive mounted" if m else "no Drive", *rest) for m, *rest in variants]


def badge_markdown(p: plat.Platform, workload: str, cfg: dict, depth: str) -> str:
    path = f"notebooks/{p.name}/{workload}.ipynb"
    parts = badges.badge_parts(p, cfg, path)
    if parts is None:
        return (f"No open badge: this notebook is opened from a clone of the repository "
                f"([how]({depth}platforms/{p.name}.md)).")
    verb, _, link = parts
    return f"[![{verb}]({depth}_static/badges/{p.runtime}.svg)]({link})"


def short_title(p: plat.Platform) -> str:
    return p.title.split(" (")[0]


def platform_tabs(workload: str, cfg: dict) -> str:
    """The switcher: one synced tab per platform with its badge, what differs and its .ipynb."""
    lines = ["::::{tab-set}", f":sync-group: {SYNC_GROUP}", ""]
    for p in ordered_platforms():
        lines += [f":::{{tab-item}} {short_title(p)}", f":sync: {p.name}", "",
                  badge_markdown(p, workload, cfg, "../"), "",
                  f"| {workload} | on {short_title(p)} |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in platform_facts(p, workload)]
        lines += ["", f"{{download}}`Download {workload}.ipynb for {short_title(p)} "
                  f"<../notebooks/{p.name}/{workload}.ipynb>` · "
                  f"[about {short_title(p)}](../platforms/{p.name}.md)", ":::", ""]
    return "\n".join([*lines, "::::", ""])


def banner(facts: dict) -> str:
    params = ", ".join(f"`{k} = {v}`" for k, v in SMOKE_PARAMETERS.items())
    return (":::{admonition} Executed in this build: a synthetic sample, not a result\n"
            ":class: executed-banner\n\n"
            f"Below is the `{SITE_PLATFORM}` notebook as papermill ran it for this site, at "
            f"commit `{facts['commit']}` on {facts['date']}, on the CPU ({facts['cpu']}), "
            f"with {params}: a few batches of a synthetic sample in the dataset's real format. "
            "Its numbers show that the pipeline runs, not how well the method works.\n:::\n")


def ordered_platforms() -> list[plat.Platform]:
    order = badges.BADGE_ORDER
    return sorted(plat.PLATFORMS.values(),
                  key=lambda p: order.index(p.runtime) if p.runtime in order else len(order))


def workload_page(workload: str, facts: dict) -> tuple[nbformat.NotebookNode, dict]:
    """The executed notebook as a page, and what the gallery needs (title, line, thumbnail)."""
    nb = nbformat.read(EXECUTED / f"{workload}.ipynb", as_version=4)
    nb.metadata.pop("widgets", None)  # widget state: myst-nb would load its JS from a CDN
    nb.cells = [c for c in nb.cells if not (c.cell_type == "markdown" and "**Generated**" in
                                             c.source)]  # the local notebook's own header
    intro = next(c for c in nb.cells if c.cell_type == "markdown")
    title, _, rest = intro.source.partition("\n")
    intro.source = "\n\n".join([title, platform_tabs(workload, facts), banner(facts), rest])
    heading, figures = title.lstrip("# ").strip(), []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found = re.search(r"^#+ (.+)$", cell.source, re.MULTILINE)
            heading = found.group(1).strip() if found else heading
            continue
        if "# @title Bootstrap" in cell.source:
            cell.metadata.setdefault("tags", []).append("hide-input")
        # A progress bar is an ipywidget (its JavaScript would come from a CDN) whose text form
        # froze at 0%; the epoch rows printed beside it say the same, so it is left out.
        cell.outputs = [o for o in cell.get("outputs", []) if
                        "application/vnd.jupyter.widget-view+json" not in o.get("data", {})]
        for out in cell.outputs:
            data = out.get("data", {})
            if "image/png" in data:
                figures.append((data["image/png"], heading))
                cell.metadata["mystnb"] = {"image": {
                    "alt": f"{heading}: a figure this build's run drew (synthetic sample)"}}
    return nb, {"title": title.lstrip("# ").strip(), "line": first_sentence(rest),
                "thumb": thumbnail(figures)}


def thumbnail(figures: list[tuple[str, str]]) -> tuple[bytes, str] | None:
    """The notebook's first figure (PNG bytes, its section): each notebook draws what it
    trains on first (garments, event frames, infrared targets, CIFAR images)."""
    import base64

    return (base64.b64decode(figures[0][0]), figures[0][1]) if figures else None


def gallery(cards: dict[str, dict]) -> str:
    lines = ["# Gallery", "",
             "Every workload's notebook as this build executed it: on the CPU, a few batches "
             "of a synthetic sample (not a result). Open one to see its outputs, and pick "
             "your platform above the notebook for its badge, what differs there and its "
             "`.ipynb`.", "", "::::{grid} 1 2 2 2", ":gutter: 3", ""]
    for w, card in cards.items():
        lines += [f":::{{grid-item-card}} {card['title']}", f":link: workloads/{w}",
                  ":link-type: doc", ":class-card: workload-card"]
        if card["thumb"]:
            lines += [f":img-top: workloads/{w}-thumb.png",
                      f":img-alt: {card['thumb'][1]}: a figure from the executed notebook"]
        lines += ["", card["line"], "", f"`{w}`", ":::", ""]
    return "\n".join([*lines, "::::", "", "```{toctree}", ":hidden:", "",
                      *(f"workloads/{w}" for w in cards), "```", ""])


def platform_page(p: plat.Platform, cfg: dict) -> str:
    notes = DOCS / "platform-notes" / f"{p.runtime}.md"
    lines = [f"# {p.title}", "",
             f"`{p.name}`: {p.gpu}" + (f" ({p.status})" if p.status else "") + ".", "",
             "## What differs here", "", "| | |", "|---|---|"]
    lines[-2:] = [f"| | on {short_title(p)} |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in platform_facts(p)]
    lines += ["", "The default batch depends on the workload: each workload's page lists it "
              "under this platform's tab."]
    if notes.exists():
        lines += ["", notes.read_text().strip()]
    lines += ["", "## The notebooks", ""]
    for w in contract.names():
        has_badge = badges.badge_parts(p, cfg, "x") is not None
        opened = f"{badge_markdown(p, w, cfg, '../')} " if has_badge else ""
        lines.append(f"- `{w}`: {opened}"
                     f"{{download}}`{w}.ipynb <../notebooks/{p.name}/{w}.ipynb>`")
    return "\n".join([*lines, ""])


def platforms_index(cfg: dict) -> str:
    lines = ["# Platforms", "",
             "Each platform has its notebook under `notebooks/<platform>/`; all of them run "
             "the same source and the same library. The table comes from "
             "`lib/runtime/platforms.py`.",
             "", "| platform | device | session limit |", "|---|---|---|"]
    for p in ordered_platforms():
        limit = plat.session_limit_hours(p, p.runtime, environ={})
        lines.append(f"| [{p.title}]({p.name}.md) | {p.accelerator}: {p.gpu} | "
                     f"{f'{limit:g} h' if limit else 'none'} |")
    lines += ["", (DOCS / "platform-notes" / "index.md").read_text().strip(), "",
              "```{toctree}", ":hidden:", "", *(p.name for p in ordered_platforms()), "```", ""]
    return "\n".join(lines)


def benchmarks_page() -> str:
    """BENCHMARKS.md as recorded (never re-run here), after a figure of its compile ratios."""
    text = (ROOT / "BENCHMARKS.md").read_text()
    section = text.partition("\n## torch.compile vs eager")[2].partition("\n## ")[0]
    # | workload | model, batch | eager steps/s | compiled steps/s | compiled / eager | per round |
    rows = re.findall(r"^\| (\w+) \| ([^|]+) \| [\d.]+ \| [\d.]+ \| ([\d.]+) \| ([\d. ]+) \|",
                      section, re.MULTILINE)
    intro, _, rest = text.partition("\n")
    figure = ""
    if rows:
        compile_figure(rows, SRC / "benchmarks-compile.png")
        figure = ("\n\n```{figure} benchmarks-compile.png\n:alt: torch.compile speed-up over "
                  "eager per workload on the CPU, as recorded in BENCHMARKS.md\n\n"
                  "torch.compile over eager on the CPU, as recorded in the section \"torch."
                  "compile vs eager\" below (median, and each paired round). Above 1: compiled "
                  "steps are faster.\n```\n")
    return f"{intro}{figure}\n{rest}"


def compile_figure(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [model.strip().replace(", ", "\n", 1) for _, model, _, _ in rows]
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.55 * len(rows)), dpi=110)
    for i, (_, _, median, rounds) in enumerate(rows):
        ax.barh(i, float(median), color="#4c72b0")
        ax.plot([float(r) for r in rounds.split()], [i] * len(rounds.split()), "k|", ms=12)
    ax.axvline(1.0, color="#444", lw=1, ls="--")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("compiled / eager steps per second (bar: median; ticks: rounds)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plan_picture(out: Path) -> None:
    """The plan guide's picture, made by `train-anywhere plan` itself (guides/plan.md)."""
    from lib.cli.main import main as cli
    from lib.cli.plan.picture import caption

    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        rc = cli(["plan", "mamba_spike", "--grid", "SEED=1,2,3", "-p", "EPOCHS", "20",
                  "--quotas", str(DOCS / "guides" / "plan-example.toml"), "--platforms",
                  "lab_h100", "--start", "2026-12-07T09:00", "--no-kaggle-client",
                  "--measured", str(BUILD / "no-runs"), "--out", str(out)])
    if rc:
        raise SystemExit(f"train-anywhere plan failed ({rc}) for the plan guide's picture")
    guide = out.parent / "plan.md"  # the guide's numbers, from the plan the picture shows
    guide.write_text(render.replace_between(
        guide.read_text(), PLAN_NUMBERS, caption(json.loads((out / "plan.json").read_text()),
                                                 "lab_h100"), "plan guide's numbers"))


PLAN_NUMBERS = ("<!-- plan-numbers:start -->", "<!-- plan-numbers:end -->")


def stage(facts: dict) -> None:
    shutil.rmtree(SRC, ignore_errors=True)
    shutil.copytree(DOCS, SRC, ignore=shutil.ignore_patterns(
        "_build", "node_modules", "build.py", "package*.json", "__pycache__"))
    (SRC / "site_info.py").write_text(f"SITE = {json.dumps(facts, indent=1)}\n")
    shutil.copytree(ROOT / "notebooks", SRC / "notebooks",
                    ignore=shutil.ignore_patterns("kernels", ".ipynb_checkpoints"))
    shutil.copytree(ROOT / "bench" / "figures", SRC / "bench" / "figures")
    images = SRC / "_static" / "badges"
    images.mkdir(parents=True, exist_ok=True)
    for p in plat.PLATFORMS.values():
        parts = badges.badge_parts(p, facts, f"notebooks/{p.name}/x.ipynb")
        if parts:
            colours = BADGE_COLOURS.get(p.runtime, ("#444444", "#ffffff"))
            (images / f"{p.runtime}.svg").write_text(badge_svg(parts[0], *colours))
    cards = {}
    (SRC / "workloads").mkdir()
    for w in contract.names():
        nb, cards[w] = workload_page(w, facts)
        nbformat.write(nb, SRC / "workloads" / f"{w}.ipynb")
        if cards[w]["thumb"]:
            (SRC / "workloads" / f"{w}-thumb.png").write_bytes(cards[w]["thumb"][0])
    (SRC / "gallery.md").write_text(gallery(cards))
    (SRC / "platforms").mkdir()
    (SRC / "platforms" / "index.md").write_text(platforms_index(facts))
    for p in plat.PLATFORMS.values():
        (SRC / "platforms" / f"{p.name}.md").write_text(platform_page(p, facts))
    (SRC / "benchmarks.md").write_text(benchmarks_page())
    plan_picture(SRC / "guides" / "plan-example")
    versions = SRC / "guides" / "locked-versions.md"  # the hosted images' table, as README's
    versions.write_text(render.replace_between(
        versions.read_text(), render.IMAGES,
        render.images_table(ROOT / "images.toml"), "table of hosted images"))


# ---- 3. Sphinx --------------------------------------------------------------------------

def sphinx() -> None:
    shutil.rmtree(HTML, ignore_errors=True)
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(BUILD / "doctrees"), str(SRC), str(HTML)]
    if subprocess.run(cmd).returncode:
        raise SystemExit("docs: sphinx-build -W failed (warnings above are errors): fix them "
                         "and run `make docs` again")
    for path in [HTML, *HTML.rglob("*")]:  # readable by anyone (a web server's user)
        path.chmod(0o755 if path.is_dir() else 0o644)


def use_build_folder(build: Path) -> None:
    """Build under `build` instead of docs/_build (the tests build in a temporary folder)."""
    global BUILD, EXECUTED, RUNS, SRC, HTML
    BUILD = build.resolve()
    EXECUTED, RUNS, SRC, HTML = (BUILD / n for n in ("executed", "runs", "src", "html"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reuse", action="store_true",
                        help="keep the notebooks executed by the last build")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS", "2")))
    parser.add_argument("--build", type=Path, default=BUILD,
                        help="the build folder (default docs/_build; the site is its html/)")
    args = parser.parse_args(argv)
    use_build_folder(args.build)
    start = time.monotonic()
    workloads = contract.names()
    if not (args.reuse and all((EXECUTED / f"{w}.ipynb").exists() for w in workloads)):
        execute_all(workloads, args.jobs)
    stage(build_facts())
    sphinx()
    log(f"built {HTML}/index.html in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
