"""`python -m safemon` is the `safemon` command."""

from safemon.cli import main

raise SystemExit(main())
