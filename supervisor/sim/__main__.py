import sys

from .server import main

sys.exit(main(sys.argv[1:]))
