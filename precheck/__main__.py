import sys

from precheck.cli import main

sys.exit(main())
