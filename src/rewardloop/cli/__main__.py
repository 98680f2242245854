"""`python -m rewardloop.cli ...`: the `rewardloop` command without its console script."""

import sys

from rewardloop.cli.main import main

sys.exit(main())
