"""One module per `safemon` sub-command; each exposes `register(subparsers)`."""
