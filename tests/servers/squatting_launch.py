"""A launch command for tests: first starts a *foreign* simulated server on our port (its own
session, so not in our process group; its pid goes to $SQUATTER_PID_FILE), waits until it
answers, then execs the real simulated server on the same port, which cannot bind it.

This is the race the port check before launch cannot close: another program takes the port
between our check and our server's bind, and answers the health probe in its place.
"""

import os
import subprocess
import sys
import time
import urllib.request


def main() -> None:
    args = sys.argv[1:]
    port = args[args.index("--port") + 1]
    squatter = subprocess.Popen(
        [sys.executable, "-m", "supervisor.sim", "--model-path", "someone/else", "--host",
         "127.0.0.1", "--port", port], start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.environ["SQUATTER_PID_FILE"], "w") as f:
        f.write(str(squatter.pid))
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health_generate", timeout=5):
                break
        except OSError:
            time.sleep(0.05)
    os.execv(sys.executable, [sys.executable, "-m", "supervisor.sim", *args])


if __name__ == "__main__":
    main()
