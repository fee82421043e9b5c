"""``python -m dmlkit`` runs the command-line tool."""

import sys

from dmlkit.cli import main

sys.exit(main())
