from __future__ import annotations

import os
from pathlib import Path

from supervisor.servers.server_log import ServerLog


def test_rotation_keeps_a_few_files_and_the_tail(tmp_path: Path) -> None:
    log = ServerLog(tmp_path / "logs" / "gpu0.log", max_bytes=1000, backups=2, tail_lines=5)
    for i in range(100):
        log.write_line(f"line {i:03d} " + "x" * 40)
    log.close()
    names = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert names == ["gpu0.log", "gpu0.log.1", "gpu0.log.2"]
    assert all(p.stat().st_size <= 1000 for p in (tmp_path / "logs").iterdir())
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


def test_pump_copies_a_pipe_until_eof(tmp_path: Path) -> None:
    log = ServerLog(tmp_path / "p.log")
    r, w = os.pipe()
    with os.fdopen(r, "rb") as reader:
        t = log.pump(reader, "header")
        os.write(w, b"one\r\ntwo\n\xffbad\nno newline")
        os.close(w)
        t.join(10)
    assert not t.is_alive()
    assert log.tail(10)[1:] == ["one", "two", "\ufffdbad", "no newline"]
    assert log.tail(10)[0].startswith("===== ") and log.tail(10)[0].endswith("header")
    log.close()
