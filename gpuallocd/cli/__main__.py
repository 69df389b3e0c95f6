"""`python -m gpuallocd.cli`: the same as `gpuallocctl`."""

from gpuallocd.cli import main

main()
