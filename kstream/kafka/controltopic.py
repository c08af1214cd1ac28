"""The control topic ``<app>.control`` itself: its spec (one partition, compacted),
creating it, asking whether it exists. Readers and writers are in
:mod:`kstream.kafka.control`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kstream.config import Replication
from kstream.kafka.clients import (
    TopicSpec,
    ensure_topics,
    make_admin,
    partition_counts,
)
from kstream.names import control_topic

SEGMENT_MS = 60_000
"""The control topic's segment time: records older than about this are compacted."""

NO_AUTO_CREATE = {"allow.auto.create.topics": False}
"""Every control client's setting: reading or writing ``<app>.control`` never creates it
(a broker's auto-creation would give it the delete policy and the broker's partition
count, which the topic check then refuses); it is created by
:func:`ensure_control_topic` or the job's topic setup, before any client opens it."""


def control_topic_spec(app_id: str, segment_ms: int = SEGMENT_MS) -> TopicSpec:
    """``<app>.control``: exactly one partition (every reader sees one total order),
    **compacted** with the keys of :func:`kstream.protocol.messages.record_key`,
    ``segment_ms`` segments and an eager cleaner, so a starting process reads the newest
    record per key plus the records of about the last segment — bounded by the job's
    recent activity, not its age (heartbeats add a record per worker per second).
    What a start needs beyond that is in the checkpoint store."""
    return TopicSpec(
        control_topic(app_id),
        1,
        exact_partitions=True,
        config={
            "cleanup.policy": "compact",
            "segment.ms": str(segment_ms),
            "min.cleanable.dirty.ratio": "0.01",
        },
    )


def ensure_control_topic(
    bootstrap: str,
    app_id: str,
    extra: Mapping[str, Any] | None = None,
    replication: Replication | None = None,
) -> None:
    """Create ``<app>.control`` (:func:`control_topic_spec`) if it does not exist."""
    ensure_topics(
        make_admin(bootstrap, extra), [control_topic_spec(app_id)], replication=replication
    )


def control_topic_exists(
    bootstrap: str, app_id: str, extra: Mapping[str, Any] | None = None
) -> bool:
    """Whether ``<app>.control`` exists (a client that only talks to a running job checks
    this first: opening a missing control topic never creates it)."""
    topic = control_topic(app_id)
    return topic in partition_counts(make_admin(bootstrap, extra), [topic])
