"""`python -m gpuallocd.cli`: the same as `gpuallocctl`."""

from gpuallocd.cli.app import main

main()
