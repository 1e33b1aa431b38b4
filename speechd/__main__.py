"""`python -m speechd`: the same as the `speechd` command."""

import sys

from speechd.cli import main

sys.exit(main())
