import sys

from precheck.commands.cli import main

sys.exit(main())
