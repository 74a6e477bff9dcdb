"""``python -m cutedsl_backend``: the command line (:mod:`cutedsl_backend.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
