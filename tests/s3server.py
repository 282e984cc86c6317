"""A real S3-compatible server for the tests: moto in server mode on a free port, in a thread of
the test process (its state is the process's, so a stopped server restarted on the same port
still holds every object: an outage, not a loss). Worker processes reach it over HTTP like any
bucket, through the environment `s3_storage` (tests/conftest.py) sets."""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

import boto3
from botocore.config import Config
from moto.server import ThreadedMotoServer

# Test credentials (moto accepts any); the secret is distinctive so a test can look for it.
ACCESS_KEY = "AKIACANONTESTKEY0001"
SECRET_KEY = "canon-secret-never-in-logs-7f3a9c"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class S3Server:
    def __init__(self, ip_address: str = "127.0.0.1") -> None:
        self.ip_address = ip_address
        self.port = free_port()
        self.server: ThreadedMotoServer | None = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                server = ThreadedMotoServer(
                    ip_address=self.ip_address, port=self.port, verbose=False
                )
                server.start()
                break
            except OSError:  # the port not released yet after a stop
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.server = server

    def stop(self) -> None:
        """An outage: connections are refused until `start`."""
        if self.server is not None:
            self.server.stop()
            self.server = None

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )

    def new_bucket(self) -> str:
        name = f"canon-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def environment(self, bucket: str, prefix: str = "canon") -> dict[str, str]:
        """What a Canon process needs to use `bucket` (its settings come from these)."""
        return {
            "CANON_STORAGE_URL": f"s3://{bucket}/{prefix}",
            "CANON_S3_ADDRESSING_STYLE": "path",
            "CANON_S3_CONNECT_TIMEOUT_SECONDS": "1",
            "CANON_S3_READ_TIMEOUT_SECONDS": "5",
            "CANON_S3_MAX_ATTEMPTS": "2",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
        }
