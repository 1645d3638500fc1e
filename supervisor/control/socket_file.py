"""The control socket's file: where it lives, who may connect, and never stealing a live one.

Permissions follow docker.sock: the socket is 0660, owned by the daemon's user and a group
operators join (`control.group`); a directory the daemon creates for it is 0750. The mode is
set before listen(): until then a connect is refused, so no one ever reaches a socket with
the wrong mode.

A socket file left by a daemon that died is stale (connecting is refused) and is replaced;
one where a daemon answers is live, and this daemon refuses to start rather than take the
path from under it.
"""

from __future__ import annotations

import errno
import grp
import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

SOCKET_NAME = "control.sock"
# sun_path holds 108 bytes with the NUL; longer paths are reached through /proc/self/fd.
_SUN_PATH_MAX = 107


class SocketFileError(RuntimeError):
    """The socket cannot be set up; the message says which path and why."""


def default_socket_path(configured: str, state_path: Path) -> Path:
    """`control.socket` when set; under systemd $RUNTIME_DIRECTORY/control.sock; otherwise
    beside the state DB (so a job run by hand, the demo and the tests each have their own)."""
    if configured:
        return Path(configured).expanduser()
    runtime = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    if runtime:
        return Path(runtime) / SOCKET_NAME
    return state_path.parent / SOCKET_NAME


def resolve_group(group: str) -> int | None:
    """A group name or number; None for the daemon's own group."""
    if not group:
        return None
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise SocketFileError(f"control.group: no group named {group!r}") from None


@dataclass
class BoundSocket:
    """A listening Unix socket at `path`; close() removes the file if it is still ours."""
    sock: socket.socket
    path: Path
    inode: int
    _dir_fd: int | None = None

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            try:
                # Only our own file: a second daemon may have replaced it after we died.
                if os.stat(self.path).st_ino == self.inode:
                    os.unlink(self.path)
            except OSError:
                pass
            if self._dir_fd is not None:
                os.close(self._dir_fd)
                self._dir_fd = None


def peer_pid(sock: socket.socket) -> int | None:
    """The pid at the other end of a connected Unix socket (SO_PEERCRED)."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", raw)[0] or None
    except OSError:
        return None


def reachable_path(path: Path) -> tuple[str, int | None]:
    """A path bind()/connect() accept even when `path` is longer than sun_path allows:
    through an O_PATH descriptor of its directory. Returns (path, fd to close or None)."""
    text = str(path)
    if len(os.fsencode(text)) <= _SUN_PATH_MAX:
        return text, None
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{path.name}", fd


def probe(path: Path, timeout_s: float = 2.0) -> int | None:
    """None if nothing answers at `path` (absent or stale); else the pid that answers
    (0 when the kernel would not say)."""
    target, fd = reachable_path(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout_s)
        try:
            s.connect(target)
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        except TimeoutError:
            # A full backlog: someone listens but is too busy to accept. Live all the same.
            return 0
        return peer_pid(s) or 0
    finally:
        s.close()
        if fd is not None:
            os.close(fd)


def bind(path: Path, group: int | None, mode: int = 0o660, backlog: int = 128) -> BoundSocket:
    """Listen at `path`, replacing a stale socket file, refusing a live one."""
    parent = path.parent
    if not parent.exists():
        try:
            parent.mkdir(mode=0o750, parents=True)
            os.chmod(parent, 0o750)     # mkdir's mode is filtered by the umask
            if group is not None:
                os.chown(parent, -1, group)
        except OSError as exc:
            raise SocketFileError(f"control.socket: cannot create {parent}: "
                                  f"{exc.strerror}") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise SocketFileError(f"control.socket: {path}: {exc.strerror}") from None
    if st is not None:
        if not stat.S_ISSOCK(st.st_mode):
            raise SocketFileError(f"control.socket: {path} exists and is not a socket; "
                                  f"refusing to remove it")
        pid = probe(path)
        if pid is not None:
            who = f" (pid {pid})" if pid else ""
            raise SocketFileError(f"control.socket: another daemon{who} answers on {path}; "
                                  f"stop it or give this job its own control.socket")
        os.unlink(path)                  # stale: its daemon is gone
    target, dir_fd = reachable_path(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound = False
    try:
        sock.bind(target)
        bound = True
        os.chmod(path, mode)
        if group is not None:
            os.chown(path, -1, group)
        sock.listen(backlog)
        sock.setblocking(False)
        inode = os.stat(path).st_ino
    except OSError as exc:
        sock.close()
        if bound:
            path.unlink(missing_ok=True)
        if dir_fd is not None:
            os.close(dir_fd)
        if exc.errno == errno.EADDRINUSE:
            raise SocketFileError(f"control.socket: {path} was taken while starting "
                                  f"(another daemon starting at the same time?)") from None
        raise SocketFileError(f"control.socket: {path}: {exc.strerror}") from None
    return BoundSocket(sock, path, inode, dir_fd)
