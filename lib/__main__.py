"""`python -m lib` is `train-anywhere`: see lib/cli.py."""

from lib.cli import main

raise SystemExit(main())
