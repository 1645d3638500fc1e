"""What dflash-tui needs of the control client: `DaemonClient`, the typed calls that
supervisor/client/control_calls.py derives from the control API's table.

The app is built by `make_app(daemon)`: in use `daemon` is the real `AsyncControlClient`
over the Unix socket; tests hand it a fake with fixed contract data that answers the same
generic `call`. Nothing here or in the app knows how the daemon stores, measures or uploads
anything: only the status contract.
"""

from __future__ import annotations

from supervisor.client.control_calls import ControlCalls
from supervisor.client.control_client import AsyncControlClient

# Every call may raise ControlError: ControlUnreachable (no daemon), ControlRefused (the
# daemon said no, with its reason) or ControlProtocolError (an answer that does not fit).
DaemonClient = ControlCalls


def connect(socket: str | None) -> DaemonClient:
    """The real client; it connects lazily, so a daemon that is not up yet is not an error."""
    return AsyncControlClient(socket)
