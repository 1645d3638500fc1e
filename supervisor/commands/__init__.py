"""The command-line verbs of `dflash-supervisor`: one module each, its `main(argv)` run by
cli.py's table. The daemon's own code never imports them."""
