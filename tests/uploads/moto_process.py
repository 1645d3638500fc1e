"""moto's standalone S3 server as a real child process on loopback, and the environment
every S3 client in these tests runs under (dummy credentials, no proxies, no ~/.aws)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support import free_port

DUMMY_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
             "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
             # Never a real profile, credentials file or instance role: only the dummies.
             "AWS_CONFIG_FILE": "/nonexistent/aws-config",
             "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
             "AWS_EC2_METADATA_DISABLED": "true",
             # Loopback only: no proxy may see (or swallow) a request.
             "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
UNSET = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
         "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
         "AWS_CA_BUNDLE")


def s3_env(base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    for name in UNSET:
        env.pop(name, None)
    env.update(DUMMY_AWS)
    return env


@dataclass
class MotoServer:
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> MotoServer:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=s3_env())
        log.close()
        deadline = time.monotonic() + timeout_s
        with httpx.Client(trust_env=False) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"moto server exited with {self.proc.returncode}: "
                                       + self.log_path.read_text(errors="replace")[-2000:])
                try:
                    if client.get(self.url + "/", timeout=1.0).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        raise RuntimeError(f"moto server not answering on {self.url} within {timeout_s} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            self.proc.wait(timeout=10)


def s3_client(endpoint_url: str) -> Any:
    """A test-side client (reads what the daemon wrote), built with explicit dummies."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, aws_access_key_id="testing",
        aws_secret_access_key="testing", region_name="us-east-1",
        config=Config(proxies={}, request_checksum_calculation="when_required",
                      response_checksum_validation="when_required",
                      retries={"mode": "standard", "total_max_attempts": 2}))


def objects(client: Any, bucket: str, prefix: str = "") -> dict[str, dict]:
    """Every object under the prefix: key → its listing entry (bounded by the bucket)."""
    out: dict[str, dict] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = obj
    return out
