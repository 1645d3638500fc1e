"""Full screens: the main view, a server's log, the help."""
