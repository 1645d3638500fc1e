"""An in-memory sink for tests: the S3 sink's twin, with scripted failures.

`failures` is consumed one per put: an exception instance is raised *instead of* storing
(the put never happened), None lets the put through. `gate`, when set, makes each put wait
for it (bounded), so a test can hold uploads in flight and look at the uploader meanwhile.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from supervisor.uploads.sink import Receipt, ShardBlob, Sink


class FakeSink(Sink):
    def __init__(self, failures: list[BaseException | None] | None = None,
                 removes_local: bool = True, gate_timeout_s: float = 30.0) -> None:
        self.objects: dict[str, bytes] = {}
        self.puts: list[str] = []
        self.failures: deque[BaseException | None] = deque(failures or [])
        self.removes_local = removes_local
        self.gate: threading.Event | None = None
        self.gate_timeout_s = gate_timeout_s
        self.on_put: Callable[[ShardBlob], None] | None = None
        self.prepared: set[str] | None = None
        self._lock = threading.Lock()
        self.active = 0
        self.max_active = 0

    def describe(self) -> str:
        return "fake://sink/"

    def prepare(self, own_keys: set[str]) -> None:
        self.prepared = set(own_keys)

    def put(self, blob: ShardBlob) -> Receipt:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.puts.append(blob.key)
            failure = self.failures.popleft() if self.failures else None
        try:
            if self.gate is not None and not self.gate.wait(self.gate_timeout_s):
                raise TimeoutError("test gate never opened")
            if self.on_put is not None:
                self.on_put(blob)
            if failure is not None:
                raise failure
            with self._lock:
                self.objects[blob.key] = blob.data
            return Receipt(etag=blob.md5, checksum=f"sha256:{blob.sha256}", verified_by="etag")
        finally:
            with self._lock:
                self.active -= 1

    def check(self, key: str, size: int, sha256: str, etag: str | None,
              read_back: bool = False) -> str | None:
        import hashlib
        with self._lock:
            data = self.objects.get(key)
        if data is None:
            return "missing at the destination"
        if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
            return f"holds {len(data)} bytes with another digest (the DB says {size} bytes)"
        return None

    def list_keys(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(k for k in self.objects if k.startswith(prefix))

    def read(self, key: str) -> bytes:
        with self._lock:
            return self.objects[key]
