"""`python -m keybus` = the `keybus` command."""

from keybus.cli.main import main

main()
