"""One module per CLI command; each exposes `command` (a click.Command). Parsing only: the work is elsewhere."""
