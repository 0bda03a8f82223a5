"""``python -m kafkaguard.cli``, as before the command line became a package."""

import sys

from kafkaguard.cli import main

sys.exit(main())
