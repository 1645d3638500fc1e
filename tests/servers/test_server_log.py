from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from supervisor.servers.server_log import ServerLog


def test_rotation_keeps_a_few_files_and_the_tail(tmp_path: Path) -> None:
    log = ServerLog(tmp_path / "logs" / "gpu0.log", max_bytes=1000, backups=2, tail_lines=5)
    for i in range(100):
        log.write_line(f"line {i:03d} " + "x" * 40)
    log.close()
    names = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert names == ["gpu0.log", "gpu0.log.1", "gpu0.log.2"]
    assert all(p.stat().st_size <= 1100 for p in (tmp_path / "logs").iterdir())
    assert (tmp_path / "logs" / "gpu0.log").read_text().splitlines()[-1].startswith("line 099")
    assert [line[:8] for line in log.tail(3)] == ["line 097", "line 098", "line 099"]
    assert log.line_count == 100 and len(log.tail(50)) == 5


def test_lines_since_a_mark(tmp_path: Path) -> None:
    log = ServerLog(tmp_path / "a.log", tail_lines=10)
    log.write_line("old life: CUDA out of memory")
    mark = log.line_count
    assert log.lines_since(mark) == []
    log.write_line("new life")
    assert log.lines_since(mark) == ["new life"]
    log.close()


def test_a_server_writes_the_file_and_the_follower_reads_it(tmp_path: Path) -> None:
    """The child's stdout is the log file itself (no pipe that dies with the daemon); the
    follower reads what it wrote, CRs and bad bytes included, and a last line without a
    newline once the server is gone."""
    log = ServerLog(tmp_path / "p.log")
    log.skip_to_end()
    log.write_header("gpu0 start #1")
    fd = log.open_for_server()
    code = "import os; os.write(1, b'one\\r\\ntwo\\n\\xffbad\\nno newline')"
    subprocess.run([sys.executable, "-c", code], stdout=fd, check=True, timeout=60)
    os.close(fd)
    log.follow()
    deadline = time.monotonic() + 10
    while log.line_count < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.tail(10)[1:] == ["one", "two", "\ufffdbad"]     # the last line is not done yet
    log.catch_up(final=True)
    assert log.tail(10)[1:] == ["one", "two", "\ufffdbad", "no newline"]
    assert log.tail(10)[0].startswith("===== ") and log.tail(10)[0].endswith("gpu0 start #1")
    log.close()


def test_rotation_keeps_the_servers_descriptor(tmp_path: Path) -> None:
    """Copy-then-truncate: a server that keeps writing through its old descriptor after a
    rotation lands in the live file, and the follower reads on from its top."""
    log = ServerLog(tmp_path / "r.log", max_bytes=200, backups=1)
    fd = log.open_for_server()
    os.write(fd, b"a" * 250 + b"\n")
    log.catch_up()
    assert (tmp_path / "r.log.1").stat().st_size == 251
    os.write(fd, b"after rotation\n")
    os.close(fd)
    log.catch_up()
    assert (tmp_path / "r.log").read_bytes() == b"after rotation\n"
    assert log.tail(1) == ["after rotation"]


def test_an_adopting_daemon_reads_back_the_recent_log(tmp_path: Path) -> None:
    """A server adopted from an earlier daemon: its last lines fill the recent log, and
    lines_since(the mark) holds only what comes after adoption."""
    path = tmp_path / "gpu0.log"
    path.write_text("".join(f"old {i}\n" for i in range(50)))
    log = ServerLog(path, tail_lines=10)
    log.skip_to_end(backfill=True)
    mark = log.line_count
    assert log.tail(2) == ["old 48", "old 49"]
    with open(path, "a") as f:
        f.write("new\n")
    log.catch_up()
    assert log.lines_since(mark) == ["new"]


def test_rotation_under_a_fast_writer_keeps_the_files_and_the_tail_in_step(tmp_path: Path
                                                                           ) -> None:
    """A server writing as fast as it can while the follower rotates: what the files hold
    is in order and once, and the follower's tail saw every line of it. Before, what was
    written while a rotation copied the file reached the copy but never the tail (the
    follower went on from the top of the truncated file). A write that lands between the
    read that found the file's end and the truncation is still lost to both."""
    n = 300_000
    log = ServerLog(tmp_path / "w.log", max_bytes=16 * 1024, backups=10_000, tail_lines=10)
    log.skip_to_end()
    fd = log.open_for_server()
    try:
        writer = subprocess.Popen(
            [sys.executable, "-c", f"import os\nfor i in range({n}): "
             "os.write(1, b'line %07d\\n' % i)"], stdout=fd)
    finally:
        os.close(fd)
    deadline = time.monotonic() + 120
    while writer.poll() is None and time.monotonic() < deadline:
        log.catch_up()             # as the follower thread does, back to back
    assert writer.wait(10) == 0
    log.catch_up(final=True)
    rotated = sorted(tmp_path.glob("w.log.*"), key=lambda p: -int(p.suffix[1:]))
    numbers = [int(line.split()[1]) for p in [*rotated, tmp_path / "w.log"]
               for line in p.read_text().splitlines()]
    assert rotated and numbers[-1] == n - 1
    assert numbers == sorted(set(numbers))
    assert log.line_count == len(numbers), (log.line_count, len(numbers), len(rotated))
