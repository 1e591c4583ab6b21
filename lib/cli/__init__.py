"""The `train-anywhere` command line: `main` (run, report, and the verbs' parsers), `params`
(a notebook's parameters cell), `execute` (a notebook through papermill), `carry`, `new`
(+ `templates/`), `demo`, `kaggle_api` and `sweep/`. Never loads the session, the loop or
the device modules: notebooks train in their own kernels.
"""
