"""`python -m tests.api._launch ARGS`: the `speechd` command, with stand-ins installed for
the packages this branch does not have yet (see `_shims`)."""

import sys

from tests.api import _shims

_shims.install()

from speechd.cli import main  # noqa: E402

sys.exit(main())
