"""The daemon's main loop and what it is built from: opening the state, the status snapshot,
what systemd is told, and when the job ends. Imports nothing here: importing one part of the
job (the progress line, the lock) must not pull in the main loop and everything under it."""
