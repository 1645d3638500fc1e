"""The control socket's client side: the httpx client `status`, `ctl` and dflash-tui share,
the `status`/`ctl` commands and their text. Imports the contract and httpx, never the daemon.
Imports nothing here."""
