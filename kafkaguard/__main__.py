import sys

from kafkaguard.cli import main

sys.exit(main())
