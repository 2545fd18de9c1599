"""``python -m privfed`` runs the command line."""

import sys

from privfed.cli.main import main

sys.exit(main())
