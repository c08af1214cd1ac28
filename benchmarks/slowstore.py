"""A checkpoint store with a slow network in front of it, for benchmarks: a real S3
server (S3Proxy, ``kstream.dev.s3proxy``) on loopback whose replies are limited to a
given rate by the kernel (``tc``: an HTB class for the loopback packets sent from its
port; every other loopback packet goes to a class far above what loopback carries).

What it stands for: an object store at the other end of a real network, where a task's
download is seconds, not the milliseconds of a local directory. Needs root (``tc``).

    with slow_s3(workdir, mbit=40) as store:
        store.url("app"), store.options  # --store URL and --store-option pairs
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kstream.dev.s3proxy import DEFAULT_BUCKET, S3Proxy

DEVICE = "lo"
LIMITED = "1:20"  # the HTB class the store's replies go to
FREE = "1:10"  # every other packet: a class far above what loopback carries
FREE_RATE = "100gbit"


def shaping_commands(port: int, mbit: float) -> list[list[str]]:
    """``tc`` commands sending loopback packets from ``port`` through an HTB class of
    ``mbit`` Mbit/s; every other packet goes to an unlimited class (this kernel has HTB
    and u32, not netem or prio)."""
    dev = ["dev", DEVICE]
    return [
        ["tc", "qdisc", "add", *dev, "root", "handle", "1:", "htb", "default", "10"],
        ["tc", "class", "add", *dev, "parent", "1:", "classid", FREE, "htb",
         "rate", FREE_RATE],
        ["tc", "class", "add", *dev, "parent", "1:", "classid", LIMITED, "htb",
         "rate", f"{mbit}mbit", "ceil", f"{mbit}mbit"],
        ["tc", "filter", "add", *dev, "parent", "1:", "protocol", "ip", "prio", "1",
         "u32", "match", "ip", "sport", str(port), "0xffff", "flowid", LIMITED],
    ]  # fmt: skip


UNSHAPE = ["tc", "qdisc", "del", "dev", DEVICE, "root"]


@dataclass(frozen=True)
class SlowStore:
    options: dict[str, str]  # --store-option pairs (and open_store's options)

    def url(self, prefix: str) -> str:
        return f"s3://{DEFAULT_BUCKET}/{prefix}"


@contextlib.contextmanager
def slow_s3(workdir: Path, mbit: float) -> Iterator[SlowStore]:
    """S3Proxy under ``workdir/s3`` whose replies are limited to ``mbit`` Mbit/s; the
    shaping is removed and the server stopped when the block ends."""
    current = subprocess.run(
        ["tc", "qdisc", "show", "dev", DEVICE], capture_output=True, text=True, check=True
    ).stdout
    if "noqueue" not in current.split("\n")[0]:
        raise RuntimeError(f"{DEVICE} already has a queueing discipline, not ours: {current}")
    with S3Proxy(workdir / "s3") as s3:
        try:
            for cmd in shaping_commands(s3.port, mbit):
                subprocess.run(cmd, check=True, capture_output=True, text=True)
            yield SlowStore(
                options={
                    "endpoint": s3.endpoint,
                    "access_key_id": s3.access_key,
                    "secret_access_key": s3.secret_key,
                    "region": "us-east-1",
                }
            )
        finally:
            subprocess.run(UNSHAPE, capture_output=True, text=True, check=False)
