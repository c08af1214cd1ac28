"""Unit-test a topology without Kafka: ``run_topology`` feeds it records and returns
what its sinks wrote, decoded.

The records go through the same ``Task`` code a worker runs: the topology is planned
as ``kstream run`` would plan it, each task runs on in-memory state, repartition
topics are in-memory partitions, and every input ends after its records, as in a
bounded run (``kstream run --bounded``): windows whose end the watermark passed fire
as it passes, the rest at the end. No broker, no checkpoints, no processing-time
clock (it stays at 0). A record the source cannot decode goes to ``dead_letters``
with the reason, as it would go to the job's dead-letter topic.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kstream.api import Topology
from kstream.api.spec import TopicInput
from kstream.api.stream import SinkSpec
from kstream.elements.records import DeadLetter, SourceRecord
from kstream.plan import plan_job
from kstream.runtime.local import run_bounded
from kstream.serde import Serde

__all__ = ["Raw", "TopologyRun", "run_topology"]


@dataclass(frozen=True)
class Raw:
    """Bytes fed as they are, not through the source's serde (a malformed record)."""

    data: bytes


Output = tuple[Any, Any, int]
"""A sink record: (key, value) decoded with the sink's serdes, and its timestamp (ms)."""


@dataclass(frozen=True)
class TopologyRun:
    """What one ``run_topology`` produced."""

    outputs: dict[str, list[Output]]
    """Per sink topic, its records in the order the tasks wrote them (tasks in
    partition order): the order within a key is the order a consumer reads."""
    dead_letters: list[DeadLetter]
    """Input records the job sent to its dead-letter topic, each with ``reason``."""
    metrics: dict[str, int]
    """The tasks' counters summed (``late_dropped``, ``late_side_output``, ...)."""

    def output(self, topic: str) -> list[Output]:
        """The records written to ``topic``; KeyError naming the sink topics if the
        topology has no sink ``topic`` (a sink that wrote nothing gives [])."""
        if topic not in self.outputs:
            raise KeyError(f"no sink topic {topic!r}; the topology writes {sorted(self.outputs)}")
        return self.outputs[topic]

    def values(self, topic: str) -> list[Any]:
        """The values written to ``topic``, in order."""
        return [v for _, v, _ in self.output(topic)]


def run_topology(
    topology: Topology,
    inputs: Mapping[str, Iterable[tuple[Any, ...]]],
    *,
    partitions: Mapping[str, int] | None = None,
    app_id: str | None = None,
) -> TopologyRun:
    """Run ``topology`` over ``inputs`` to the end; see the module docstring.

    ``inputs[topic]`` holds ``(key, value, timestamp_ms)`` or ``(key, value,
    timestamp_ms, partition)``, encoded with the source's serdes unless given as
    ``Raw``. Without a partition, a record with a key goes to the key's CRC-32 modulo
    the topic's partition count, one without in turn to each partition.
    ``partitions[topic]`` is a source topic's partition count (default 1).
    ValueError naming the source topics if ``inputs`` names another topic.
    """
    counts = dict(partitions or {})
    serdes = _source_serdes(topology)
    unknown = (set(inputs) | set(counts)) - set(serdes)
    if unknown:
        raise ValueError(
            f"{sorted(unknown)}: not a source topic of topology {topology.name!r} "
            f"(it reads {sorted(serdes)})"
        )
    for topic in serdes:
        counts.setdefault(topic, 1)
    plan = plan_job(topology, app_id or topology.name, counts)
    fed = {
        topic: _partitioned(topic, records, serdes[topic], counts[topic])
        for topic, records in inputs.items()
    }
    result = run_bounded(plan, fed)
    sinks = _sink_serdes(topology)
    outputs: dict[str, list[Output]] = {topic: [] for topic in sinks}
    for topic, records in result.sinks.items():
        key_serde, value_serde = sinks[topic]
        outputs[topic] = [
            (_decode(key_serde, k), _decode(value_serde, v), ts) for k, v, ts in records
        ]
    metrics: Counter[str] = Counter()
    for task_metrics in result.metrics.values():
        metrics.update(task_metrics)
    return TopologyRun(outputs, result.dead_letters, dict(metrics))


def _source_serdes(topology: Topology) -> dict[str, tuple[Serde, Serde]]:
    """Source (and table) topic -> its key and value serdes (the first reader's)."""
    out: dict[str, tuple[Serde, Serde]] = {}
    for n in topology.nodes:
        if isinstance(n.spec, TopicInput):
            out.setdefault(n.spec.topic, (n.spec.key_serde, n.spec.value_serde))
    return out


def _sink_serdes(topology: Topology) -> dict[str, tuple[Serde, Serde]]:
    out: dict[str, tuple[Serde, Serde]] = {}
    for n in topology.nodes:
        if isinstance(n.spec, SinkSpec):
            out.setdefault(n.spec.topic, (n.spec.key_serde, n.spec.value_serde))
    return out


def _partitioned(
    topic: str, records: Iterable[tuple[Any, ...]], serdes: tuple[Serde, Serde], count: int
) -> list[list[SourceRecord]]:
    key_serde, value_serde = serdes
    parts: list[list[SourceRecord]] = [[] for _ in range(count)]
    turn = 0
    for i, record in enumerate(records):
        if len(record) not in (3, 4):
            raise ValueError(
                f"{topic}: record {i} is {record!r}; give (key, value, timestamp_ms) "
                "or (key, value, timestamp_ms, partition)"
            )
        key, value, ts = _encode(key_serde, record[0]), _encode(value_serde, record[1]), record[2]
        if type(ts) is not int or ts < 0:
            raise ValueError(
                f"{topic}: record {i} has timestamp {ts!r}; give int milliseconds >= 0"
            )
        if len(record) == 4:
            p = record[3]
            if not 0 <= p < count:
                raise ValueError(
                    f"{topic}: record {i} names partition {p}; the topic has {count} "
                    f"(set partitions={{{topic!r}: n}})"
                )
        elif key is not None:
            p = zlib.crc32(key) % count
        else:
            p, turn = turn, (turn + 1) % count
        parts[p].append((key, value, ts, len(parts[p])))
    return parts


def _encode(serde: Serde, value: Any) -> bytes | None:
    if isinstance(value, Raw):
        return value.data
    return None if value is None else serde.serialize(value)


def _decode(serde: Serde, data: bytes | None) -> Any:
    return None if data is None else serde.deserialize(data)
