"""Sphinx configuration of the documentation site (`make docs`; docs/build.py stages the
sources into docs/_build/src and runs sphinx-build -W there).

myst-nb renders the notebooks papermill executed in this build as they are: it never runs a
notebook itself (`nb_execution_mode = "off"`). Everything the pages load is served from the
site itself (no CDN, no web font), so it opens offline.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_info import SITE  # noqa: E402  (written by docs/build.py: repository, commit)

project = "Train Anywhere"
author = "Train Anywhere contributors"
copyright = "Train Anywhere contributors"
release = SITE["version"]

extensions = ["myst_nb", "sphinx_design"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # render papermill's outputs; never execute here
nb_merge_streams = True
nb_render_markdown_format = "myst"  # a results table a cell displays as Markdown is a table
exclude_patterns = ["_build", "notebooks/**", "platform-notes/**", "node_modules/**",
                    "**.ipynb_checkpoints"]
suppress_warnings = ["myst.header"]  # BENCHMARKS.md's own heading levels, included as written

html_theme = "pydata_sphinx_theme"
html_title = "Train Anywhere"
html_static_path = ["_static"]
html_css_files = ["site.css"]
html_favicon = "_static/favicon.svg"
html_last_updated_fmt = None
html_show_sourcelink = False
html_copy_source = False
html_theme_options = {
    "github_url": f"https://github.com/{SITE['repository']}",
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "footer_start": ["copyright"],
    "footer_end": ["theme-version"],
    # the notebooks' code and outputs get the width the right-hand column would take
    "secondary_sidebar_items": {
        **{page: ["page-toc"] for page in ("index", "gallery", "benchmarks",
                                           "your-own-experiment", "guides/*", "platforms/*")},
        "workloads/*": [],
    },
    "use_edit_page_button": False,
}
html_context = {"default_mode": "auto"}
