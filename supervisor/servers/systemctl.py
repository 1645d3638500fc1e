"""`systemctl` as the daemon's user calls it: one place for the command line, the timeout and
the one-line error (with a hint where polkit refused)."""

from __future__ import annotations

import subprocess

SYSTEMCTL_TIMEOUT_S = 60.0


class LaunchError(OSError):
    """A unit that could not be started or stopped: one line naming the unit and systemd's
    own reason (polkit's refusal, a missing template)."""


def systemctl(*args: str, timeout_s: float = SYSTEMCTL_TIMEOUT_S,
              check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        out = subprocess.run(["systemctl", "--no-pager", "--no-ask-password", *args],
                             capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"systemctl {' '.join(args)}: {exc}") from None
    if check and out.returncode != 0:
        why = (out.stderr.strip() or out.stdout.strip()).splitlines()
        hint = ""
        if any("authentication required" in line.lower() or "access denied" in line.lower()
               for line in why):
            hint = (" (is systemd/50-dflash-supervisor.rules installed in "
                    "/etc/polkit-1/rules.d, and polkitd running?)")
        raise LaunchError(f"systemctl {' '.join(args)}: {why[0] if why else 'failed'}{hint}")
    return out


def show(unit: str, *props: str) -> dict[str, str]:
    out = systemctl("show", unit, *(f"--property={p}" for p in props))
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
