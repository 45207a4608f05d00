"""``python -m rocketstore.cli``: the ``rocketstore`` command without the console script."""

import sys

from rocketstore.cli.main import main

sys.exit(main())
