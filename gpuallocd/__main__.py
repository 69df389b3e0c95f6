"""`python -m gpuallocd`: the daemon."""

from gpuallocd.daemon import main

main()
