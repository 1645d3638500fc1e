"""Fixtures for the upload tests: moto's S3 server on loopback, a fresh bucket per test,
fault proxies in front of it, and an environment where boto3 only ever sees dummies."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fixtures.fault_proxy import FaultProxy
from tests.fixtures.moto_s3 import DUMMY_AWS, UNSET, MotoServer, s3_client

_buckets = itertools.count(1)


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)
    for name, value in DUMMY_AWS.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log").start()
    yield server
    server.stop()


@pytest.fixture
def s3(moto: MotoServer) -> Any:
    return s3_client(moto.url)


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"test-bucket-{os.getpid()}-{next(_buckets)}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def fault_proxy(moto: MotoServer) -> Iterator[Callable[..., FaultProxy]]:
    started: list[FaultProxy] = []

    def start(upstream: MotoServer | None = None) -> FaultProxy:
        proxy = FaultProxy((upstream or moto).port).start()
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()
