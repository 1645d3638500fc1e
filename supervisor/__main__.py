import sys

from supervisor.commands.cli import main

sys.exit(main())
