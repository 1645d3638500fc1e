"""A launch command for tests: the simulated server, except while the file named by the
GATE_FILE environment variable exists, when it dies at once like a server that cannot load.

    python gated_launch.py <SGLang flags...>
"""

import os
import sys


def main() -> None:
    gate = os.environ.get("GATE_FILE")
    if gate and os.path.exists(gate):
        print(f"cannot start: {gate} exists", file=sys.stderr)
        sys.exit(1)
    os.execv(sys.executable, [sys.executable, "-m", "supervisor.sim", *sys.argv[1:]])


if __name__ == "__main__":
    main()
