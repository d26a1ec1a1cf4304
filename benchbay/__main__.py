import sys

from benchbay.cli import main

sys.exit(main())
