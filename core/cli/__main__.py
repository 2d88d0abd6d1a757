"""`python -m tension.core.cli`: the same as the `tension-run` command."""

import sys

from tension.core.cli import main

sys.exit(main())
