"""``python -m pytest_gputopo.cli``: the ``gputopo`` command."""

import sys

from . import main

sys.exit(main())
