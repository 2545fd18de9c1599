"""``python -m privfed`` runs the command line."""

import sys

from privfed.cli import main

sys.exit(main())
