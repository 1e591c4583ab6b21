"""`python -m lib` is `train-anywhere`: see lib/cli/main.py."""

from lib.cli.main import main

raise SystemExit(main())
