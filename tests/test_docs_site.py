"""The documentation site as a person sees it.

Built once per session the way `make docs` builds it (docs/build.py: papermill runs each
workload's local notebook on the CPU, SMOKE on the sample; then sphinx-build -W) into a
temporary folder; read as files (outputs of this run, links, badges), then opened in Debian's
chromium driven by Playwright on a loopback server: every workload page and the gallery in
light and dark mode, the platform tabs, search, and axe-core's WCAG 2 A/AA rules. Screenshots
go to docs/_build/screenshots/ (open them to see what a visitor sees).
"""

from __future__ import annotations

import base64
import fcntl
import functools
import http.server
import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest

from lib import workloads as contract
from lib.notebooks import badges
from lib.runtime.platforms import PLATFORMS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SHOTS = DOCS / "_build" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
AXE = DOCS / "node_modules" / "axe-core" / "axe.min.js"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync"]
WORKLOADS = contract.names()
CFG = badges.settings()
SEARCH_WORD = "Adadelta"  # in the Fashion-MNIST notebook's introduction and code
pytestmark = pytest.mark.notebook  # the build runs every workload's notebook


@pytest.fixture(scope="module")
def site(tmp_path_factory, worker_id):
    """The built site (its build folder), built once however many workers share the session."""
    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent  # this session's, not older ones
    build = shared / "docs-site"
    with open(shared / "docs-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (build / "BUILT").exists():
            done = subprocess.run([sys.executable, str(DOCS / "build.py"), "--build", str(build)],
                                  cwd=ROOT, capture_output=True, text=True)
            assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
            (build / "BUILT").write_text(done.stdout)
    return build


def html(site: Path, page: str) -> str:
    return (site / "html" / page).read_text()


def outputs(page_html: str) -> list[str]:
    """The HTML of each cell's output area (the input areas hold the notebook's code)."""
    return [chunk.split('<div class="cell docutils container">')[0]
            for chunk in page_html.split('<div class="cell_output docutils container">')[1:]]


def test_each_workload_page_shows_this_builds_run(site):
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
    for w in WORKLOADS:
        page = html(site, f"workloads/{w}.html")
        shown = outputs(page)
        assert any("<img" in o for o in shown), f"{w}: no figure among its outputs"
        assert any(re.search(r"epoch 1/2 .*train_loss", o) for o in shown), f"{w}: no epoch row"
        for o in shown:
            assert "Traceback" not in o and "output stderr" not in o, (w, o[:600])
        assert "synthetic sample, not a result" in page and head in page, f"{w}: banner"
        # the figures, the gallery's thumbnail included, are this build's executed notebook's
        executed = nbformat.read(site / "executed" / f"{w}.ipynb", as_version=4)
        figures = [base64.b64decode(o["data"]["image/png"]) for c in executed.cells
                   for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
        images = {p.name: p.read_bytes() for p in (site / "html" / "_images").glob("*.png")}
        assert figures and all(f in images.values() for f in figures), w
        assert images[f"{w}-thumb.png"] in figures, f"{w}: its thumbnail is not its own figure"
        assert executed.metadata["papermill"]["parameters"]["SMOKE"] is True
    # the run folders behind the pages (checkpoints, sample data) are not kept
    assert not any((site / "runs").glob("*/*")), sorted((site / "runs").glob("*/*"))


def test_internal_links_resolve(site):
    root, broken = site / "html", []
    for page in root.rglob("*.html"):
        if page.is_relative_to(root / "_static"):  # the theme's templates, not pages
            continue
        text = page.read_text()
        for ref in re.findall(r'(?:href|src)="([^"]+)"', text):
            url = urlparse(ref)
            if url.scheme or ref.startswith(("mailto:", "//")):
                continue
            target = (page.parent / unquote(url.path)).resolve() if url.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(root)} -> {ref}")
            elif url.fragment and target.suffix == ".html" and \
                    f'id="{url.fragment}"' not in target.read_text():
                broken.append(f"{page.relative_to(root)} -> {ref} (no such anchor)")
    assert not broken, broken[:20]


# An open link: a service's URL around a GitHub blob path of a rendered notebook (Colab's
# /github/OWNER/NAME/blob/..., Kaggle's ?src=https://github.com/OWNER/NAME/blob/..., ...).
OPEN_LINK = re.compile(r"https://[\w.-]+/[^\s\"')\]]*?([\w.-]+/[\w.-]+)/blob/([\w./-]+?)/"
                       r"notebooks/(\w+)/(\w+)\.ipynb")


def check_badge(link: str, platform: str | None = None, workload: str | None = None) -> None:
    """`link` opens an existing notebook, from the configured repository and branch, on the
    service of the platform it names (and on `platform` / for `workload` where the context
    says which)."""
    found = OPEN_LINK.match(link)
    assert found, link
    repository, branch, p, w = found.groups()
    assert (repository, branch) == (CFG["repository"], CFG["branch"]), link
    assert (ROOT / "notebooks" / p / f"{w}.ipynb").exists(), link
    service = badges.open_link(PLATFORMS[p], CFG, "x")
    assert service and urlparse(link).hostname == urlparse(service).hostname, (link, p)
    assert platform in (None, p) and workload in (None, w), (link, platform, workload)


def test_every_badge_names_an_existing_notebook_for_its_platform_and_workload(site):
    # Lightning's link carries the GitHub URL URL-encoded (repo_url=https%3A%2F%2F...)
    readme = OPEN_LINK.finditer(unquote((ROOT / "README.md").read_text()))
    readme_links = [m.group(0) for m in readme]
    assert len(readme_links) >= len(WORKLOADS) * 5
    for link in readme_links:
        check_badge(link)
    for nb in (ROOT / "notebooks").glob("*/*.ipynb"):
        header = json.loads(nb.read_text())["cells"][0]["source"]
        header = "".join(header) if isinstance(header, list) else header
        for found in OPEN_LINK.finditer(unquote(header)):
            check_badge(found.group(0), nb.parent.name, nb.stem)
    for w in WORKLOADS:
        page = html(site, f"workloads/{w}.html")
        tabs = page.split('class="sd-tab-label"')[1:]
        assert [re.search(r'data-sync-id="(\w+)"', t).group(1) for t in tabs] == [
            p.name for p in sorted(PLATFORMS.values(), key=lambda p: badges.BADGE_ORDER.index(
                p.runtime) if p.runtime in badges.BADGE_ORDER else 99)]
        for tab in tabs:
            p = re.search(r'data-sync-id="(\w+)"', tab).group(1)
            links = [m.group(0) for m in OPEN_LINK.finditer(unquote(tab.replace("&amp;", "&")))]
            has_badge = badges.badge_parts(PLATFORMS[p], CFG, "x") is not None
            assert len(links) == has_badge, (w, p, links)
            for link in links:
                check_badge(link, p, w)
            assert f"{w}.ipynb" in tab and "_downloads" in tab, (w, p)  # its download link


# ---- in the browser ----------------------------------------------------------------------

def _need_browser_deps() -> None:
    """Debian's chromium and axe-core: installed by `make docs-deps` when missing."""
    if Path(CHROMIUM).exists() and AXE.exists():
        return
    subprocess.run(["make", "docs-deps"], cwd=ROOT, capture_output=True, text=True)
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (or `make docs-deps` as "
                    "root), then run the tests again", pytrace=False)
    if not AXE.exists():
        pytest.fail(f"{AXE.relative_to(ROOT)} is missing: `make docs-deps` (cd docs && npm ci)",
                    pytrace=False)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(_Quiet, directory=str(site / "html"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    _need_browser_deps()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield chromium
        chromium.close()


class Visit:
    """A page opened as a visitor opens it, with what went wrong on the way."""

    def __init__(self, context, url: str):
        self.problems: list[str] = []
        self.page = context.new_page()
        self.page.route("**/*", self._only_loopback)
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(
            f"console error: {m.text}"))
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.goto(url, wait_until="networkidle")

    def _only_loopback(self, route):
        url = urlparse(route.request.url)
        if url.scheme in ("data", "blob") or url.hostname == "127.0.0.1":
            return route.continue_()
        self.problems.append(f"request left loopback: {route.request.url}")
        return route.abort()

    def broken_images(self) -> list[str]:
        self.page.evaluate("document.querySelectorAll('img').forEach(i => i.loading = 'eager')")
        self.page.wait_for_function("[...document.images].every(i => i.complete)")
        return self.page.evaluate(
            "[...document.images].filter(i => !i.naturalWidth).map(i => i.src)")

    def axe(self) -> list[str]:
        self.page.add_script_tag(path=str(AXE))
        found = self.page.evaluate("""async () => (await axe.run(document, {runOnly: {type: 'tag',
            values: ['wcag2a', 'wcag2aa']}})).violations.map(v => v.id + ': ' + v.help + ' at '
            + v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(', '))""")
        return [f"axe: {v}" for v in found]


def test_gallery_and_workload_pages_in_light_and_dark(site, served, browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    problems = []
    for mode in ("light", "dark"):
        context = browser.new_context(color_scheme=mode, viewport={"width": 1280, "height": 900})
        for page in ["gallery.html", *(f"workloads/{w}.html" for w in WORKLOADS),
                     "guides/plan.html"]:
            visit = Visit(context, served + page)
            theme = visit.page.evaluate("document.documentElement.dataset.theme")
            found = visit.problems + [f"image not loaded: {s}" for s in visit.broken_images()]
            found += visit.axe() + ([f"theme {theme!r}"] if theme != mode else [])
            if page == "gallery.html":
                cards = visit.page.locator(".workload-card")
                assert cards.count() == len(WORKLOADS)
                for w in WORKLOADS:
                    card = visit.page.locator(f".workload-card:has(a[href='workloads/{w}.html'])")
                    assert card.locator("img.sd-card-img-top").evaluate("i => i.naturalWidth") > 0
            if page == "guides/plan.html":  # the plan's picture, drawn by the build
                picture = visit.page.locator("img[src$='_images/plan.png']")
                assert picture.count() == 1 and picture.evaluate("i => i.naturalWidth") > 0
            name = page.replace("/", "-").removesuffix(".html")
            visit.page.screenshot(path=str(SHOTS / f"{name}-{mode}.png"), full_page=True)
            problems += [f"{page} ({mode}): {p}" for p in found]
            visit.page.close()
        context.close()
    assert not problems, "\n".join(problems)


def test_the_chosen_platform_shows_its_badge_and_is_kept_on_the_next_page(served, browser):
    context = browser.new_context()
    first, second = WORKLOADS[0], WORKLOADS[-1]
    visit = Visit(context, served + f"workloads/{first}.html")
    visit.page.click("label.sd-tab-label[data-sync-id='kaggle_t4x2']")
    badge = visit.page.locator("a:visible:has(img[alt='Open in Kaggle'])").first
    check_badge(badge.get_attribute("href"), "kaggle_t4x2", first)
    assert badge.locator("img").evaluate("i => i.naturalWidth") > 0
    visit.page.goto(served + f"workloads/{second}.html", wait_until="networkidle")
    chosen = visit.page.locator("input[name^='sd-tab-set']:checked + label").first
    assert chosen.get_attribute("data-sync-id") == "kaggle_t4x2"
    badge = visit.page.locator("a:visible:has(img[alt='Open in Kaggle'])").first
    check_badge(badge.get_attribute("href"), "kaggle_t4x2", second)
    assert not visit.problems, visit.problems
    context.close()


def test_search_finds_a_word_from_a_notebook(served, browser):
    context = browser.new_context()
    visit = Visit(context, served + f"search.html?q={SEARCH_WORD}")
    visit.page.wait_for_selector("#search-results ul.search li a", timeout=30_000)
    hits = visit.page.eval_on_selector_all("#search-results ul.search li a",
                                           "links => links.map(a => a.getAttribute('href'))")
    assert any("workloads/fashion_mnist" in h for h in hits), hits
    assert not visit.problems, visit.problems
    context.close()
