"""`python -m gpuallocd_jupyter`: the same as the `gpuallocd-jupyter` command."""

import sys

from gpuallocd_jupyter.cli import main

sys.exit(main())
