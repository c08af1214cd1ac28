"""The S3-compatible server integration tests use: kstream's own S3Proxy launcher.

``S3Server`` wraps one running :class:`kstream.dev.s3proxy.S3Proxy` and gives
tests what they need: the store options that reach it (explicit, so no test
depends on the environment), a fresh ``s3://`` URL per test, and stop/start on
the same port with the same data (a store outage).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from kstream.dev.s3proxy import DEFAULT_BUCKET, S3Proxy


class S3Server:
    """A running S3Proxy for tests; see the module docstring."""

    def __init__(self, data_dir: Path, host: str = "127.0.0.1") -> None:
        self.proxy = S3Proxy(data_dir, host=host)

    def start(self) -> S3Server:
        self.proxy.start()
        return self

    def stop(self) -> None:
        self.proxy.stop()

    def restart(self) -> None:
        """Start again on the same port with the same buckets (after :meth:`stop`)."""
        self.proxy.start()

    @property
    def endpoint(self) -> str:
        return self.proxy.endpoint

    @property
    def bucket_dir(self) -> Path:
        return self.proxy.bucket_dir(DEFAULT_BUCKET)

    def options(self, **extra: str) -> dict[str, str]:
        """Store options reaching this server (``--store-option`` pairs as a dict)."""
        return {
            "endpoint": self.endpoint,
            "access_key_id": self.proxy.access_key,
            "secret_access_key": self.proxy.secret_key,
            "region": "us-east-1",
            **extra,
        }

    def cli_options(self, **extra: str) -> list[str]:
        """The same as ``--store-option key=value`` arguments."""
        out: list[str] = []
        for k, v in self.options(**extra).items():
            out += ["--store-option", f"{k}={v}"]
        return out

    def fresh_url(self, name: str = "t") -> str:
        """An ``s3://`` URL under a prefix no other test uses."""
        return f"s3://{DEFAULT_BUCKET}/{name}-{uuid.uuid4().hex[:8]}"
