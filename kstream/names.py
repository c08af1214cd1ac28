"""Every Kafka name kstream derives from an app id: topics, groups, transactional ids.

Fencing depends on the transactional ids being fixed: a restarted coordinator or sink
task must produce with the same id as its predecessor (docs/design.md §5, §7).
"""

from __future__ import annotations

import os
import re
import socket
import uuid


def group_id(app_id: str) -> str:
    """The consumer group of the app's workers."""
    return app_id


def control_topic(app_id: str) -> str:
    """The single-partition control topic of ``app_id`` (docs/design.md §5)."""
    return f"{app_id}.control"


def control_reader_group(app_id: str) -> str:
    """The group id of control-topic readers (assign() only: never joins or commits)."""
    return f"{app_id}.control-reader"


def status_reader_group(app_id: str) -> str:
    """The group id of `kstream status`'s reader (offset look-ups only: never joins)."""
    return f"{app_id}.status"


def coordinator_transactional_id(app_id: str) -> str:
    """The fixed transactional id of ``app_id``'s coordinator."""
    return f"{app_id}.coordinator"


def commits_topic(app_id: str) -> str:
    """The compacted topic of the exactly-once sinks' commit markers."""
    return f"{app_id}.commits"


def sink_transactional_id(app_id: str, task: str) -> str:
    """The fixed transactional id of sink task ``task``."""
    return f"{app_id}.sink.{task}"


def worker_sink_transactional_id(app_id: str) -> str:
    """The transactional id of this worker process's exactly-once sinks: its own, never
    reused (``host:pid`` and a random suffix: a container's pid 1 comes back), fenced by
    its group membership rather than by the id (kstream.kafka.worker_transactions)."""
    return f"{app_id}.sink.worker.{worker_client_id()}.{uuid.uuid4().hex[:12]}"


def marker_reader_group(app_id: str, task: str) -> str:
    """The group id of sink task ``task``'s marker reader (assign() only)."""
    return f"{sink_transactional_id(app_id, task)}.marker-reader"


def dlq_topic(app_id: str) -> str:
    """The dead-letter topic of ``app_id``."""
    return f"{app_id}.dlq"


def repartition_topic(app_id: str, stage: str, index: int = 0) -> str:
    """The internal topic of ``stage``'s ``index``-th key_by: ``<app>.<stage>.repartition[<i>]``."""
    return f"{app_id}.{stage}.repartition{index or ''}"


def is_repartition_topic(app_id: str, topic: str) -> bool:
    """Whether ``topic`` is one of ``app_id``'s internal repartition topics."""
    head, _, tail = topic.rpartition(".")
    return head.startswith(f"{app_id}.") and tail.startswith("repartition")


def election_topic(app_id: str) -> str:
    """The one-partition topic whose owner in :func:`election_group` hosts the coordinator."""
    return f"{app_id}.coordinator-election"


def election_group(app_id: str) -> str:
    """The consumer group of the coordinator candidates (workers with ``--coordinator auto``)."""
    return f"{app_id}.coordinator"


def worker_client_id() -> str:
    """The ``client.id`` of a worker's group consumer: ``host:pid``. The group names
    the member ``<client.id>-<uuid>``, so the broker's logs, the control topic and
    `kstream status` name the same process."""
    return f"{socket.gethostname()}:{os.getpid()}"


_MEMBER_SUFFIX = re.compile(r"-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def member_client_id(member: str) -> str:
    """The client id in a group member id (``<client.id>-<uuid>``); the member itself
    when it has no such suffix (a label, or a member id of another form)."""
    m = _MEMBER_SUFFIX.search(member)
    return member[: m.start()] if m else member
