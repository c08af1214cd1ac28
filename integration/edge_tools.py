"""Helpers for the Kafka-edge integration tests: read a whole topic with its headers.

Every wait has a deadline and fails with what was observed.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from kstream.kafka.clients import KafkaException, TopicPartition, make_consumer, watermark_offsets


@dataclass(frozen=True)
class Read:
    """One record read back: where, what, and its headers."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int | None = None


def read_all(
    bootstrap: str, topic: str, *, read_committed: bool = True, timeout: float = 30.0
) -> list[Read]:
    """Every record of ``topic`` up to the end offsets, by partition then offset.

    With ``read_committed`` only committed transactional records come back, and
    every transaction written before the call is decided before this returns.
    """
    c = make_consumer(
        bootstrap, f"edge-reader-{uuid.uuid4().hex[:8]}", read_committed=read_committed
    )
    try:
        md = c.list_topics(topic, timeout=timeout)
        parts = sorted(md.topics[topic].partitions)
        # End = high watermark seen by a read_uncommitted reader: a read_committed
        # reader's own end (the LSO) lags a just-committed transaction until the
        # coordinator has written its markers; reading to the high watermark waits
        # for every transaction to be decided.
        hw = make_consumer(bootstrap, f"edge-hw-{uuid.uuid4().hex[:8]}", read_committed=False)
        try:
            # (retried while a killed leader's partitions move: NOT_LEADER_FOR_PARTITION)
            ends = {p: watermark_offsets(hw, topic, p, timeout)[1] for p in parts}
        finally:
            hw.close()
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Read] = []
        deadline = time.monotonic() + timeout
        msg: Any
        while True:
            positions = {
                x.partition: x.offset for x in c.position([TopicPartition(topic, p) for p in parts])
            }
            if all(ends[p] == 0 or positions[p] >= ends[p] for p in parts):
                break
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{topic}: positions {positions} did not reach ends {ends} in {timeout}s; "
                    f"read {len(out)} records"
                )
            for msg in c.consume(500, 0.2):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                out.append(
                    Read(
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        list(msg.headers() or []),
                        msg.timestamp()[1],
                    )
                )
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        c.close()


def markers(bootstrap: str, app: str) -> list[dict[str, Any]]:
    """Committed commit markers of ``app``, in log order."""
    return [
        json.loads(r.value) for r in read_all(bootstrap, f"{app}.commits") if r.value is not None
    ]
