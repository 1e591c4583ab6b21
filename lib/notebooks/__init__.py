"""How notebooks/ is made from notebooks_src/ (the command is `build_notebooks.py`).

badges     the project's settings, and the links and badges each platform opens a notebook by
render     one notebook per platform from a workload's source; the README's tables
edits      what a build wrote into a notebook; whether a user edited or ran it since
to_source  a notebook's edited cells carried back into its source (`--carry-back`)

Nothing of a notebook's run imports these: the bootstrap clones lib/ whole, and only
`build_notebooks.py` (which `make demo` runs first) and the docs build load them.
"""
