"""The control socket: the status contract, its HTTP server on a Unix socket, and the
client that `status`, `ctl` and dflash-tui share. Imports nothing here, so a client importing
the contract never pulls in the daemon."""
