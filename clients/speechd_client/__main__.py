"""`python -m speechd_client`: the `speechd-client` command."""

from ._cli import main

raise SystemExit(main())
