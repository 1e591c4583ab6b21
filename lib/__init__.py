"""Train Anywhere: the library every rendered notebook imports."""

# The one place the version is written: pyproject.toml reads it, and build_notebooks.py
# renders it into every bootstrap cell, which refuses a library of another version.
__version__ = "0.2.0"
