"""`python -m pytest_npuperf.cli`: the `npuperf` command."""

import sys

from . import main

sys.exit(main())
