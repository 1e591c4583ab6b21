"""A test double of Colab's `google.colab` package (no real one can be installed: the
`google-colab` wheel on PyPI is an old snapshot that breaks environments).

Only what the project calls: `drive.mount`, `drive.flush_and_unmount` and `userdata.get` (the
Secrets panel, read from TA_FAKE_COLAB_SECRETS). Each call is
appended to `calls.jsonl` in the folder named by TA_FAKE_COLAB_LOG (default: the mount
point's parent), so a test can assert on them after papermill ran a notebook.
"""
