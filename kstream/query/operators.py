"""What a query needs to know of a stateful operator: its kind, stage and partitions,
how its keys are parsed from text and which partitioner spreads them over the stage's
tasks (the job's own, so a key is asked of the task that holds it).

From a plan (a worker: the exact key serde and window spec) or from a checkpoint's
plan description (``kstream query --checkpoint``: serdes known by name only).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

from kstream.api.spec import Node, TopicInput
from kstream.api.stream import KeyBySpec, WindowOpSpec
from kstream.api.windows import Hopping, Tumbling
from kstream.plan.model import InputKind, JobPlan
from kstream.plan.operators import operator_ids
from kstream.serde import AvroSerde, Serde, SerdeError, serde_by_name

SOURCE_PARTITIONERS = ("murmur2", "crc32")
"""How the producers of a source topic spread keys: ``murmur2`` (the Java client's
default, Kafka Streams', librdkafka's ``murmur2_random``) or ``crc32`` (librdkafka's
default ``consistent_random``; kstream's own repartition topics always use it)."""


class QueryError(ValueError):
    """A query that cannot be answered as asked (unknown operator, malformed key...):
    the message says what to change. HTTP 400/404."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (signed 32-bit result), the Java producer's hash."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    n = len(data)
    h = (0x9747B28C ^ n) & mask
    for i in range(0, n - n % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = n - n % 4
    rest = n % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_of(key: bytes | None, partitions: int, partitioner: str) -> int:
    """The partition a producer using ``partitioner`` writes ``key`` to (``crc32``: as
    kstream's ``key_by``; ``murmur2``: as Kafka's default partitioner)."""
    if key is None:
        return 0
    if partitioner == "murmur2":
        return (murmur2(key) & 0x7FFFFFFF) % partitions
    return zlib.crc32(key) % partitions


@dataclass(frozen=True)
class OperatorInfo:
    """One stateful operator as queries see it. ``partitioner`` None: unknown (the
    key is looked for in every task of the stage); ``windows``: (size, advance,
    offset) of fixed windows, else None."""

    id: str
    kind: str
    stage: str
    partitions: int
    key_serde: str
    serde: Serde | None
    partitioner: str | None
    windows: tuple[int, int, int] | None = None

    def parse_key(self, text: str) -> Any:
        """The state key component a query's ``key`` text names, as the operator's key
        serde decodes it (``json``: JSON text, or the text itself when it is not JSON)."""
        name = self.key_serde
        if name == "bytes":
            return text.encode()
        if name == "str":
            return text
        try:
            return json.loads(text)
        except ValueError:
            if name == "json":
                return text
            raise QueryError(f"key {text!r}: give the key as JSON (key serde {name})") from None

    def task_of(self, key: Any, partitioner: str | None = None) -> str | None:
        """The task holding ``key`` (None: unknown, ask every task)."""
        how = partitioner or self.partitioner
        if how is None or self.serde is None:
            return None
        try:
            data = None if key is None else self.serde.serialize(key)
        except (SerdeError, TypeError, ValueError) as e:
            raise QueryError(f"key {key!r} does not suit key serde {self.key_serde}: {e}") from e
        return f"{self.stage}-{partition_of(data, self.partitions, how)}"

    def tasks(self) -> list[str]:
        return [f"{self.stage}-{p}" for p in range(self.partitions)]


def _key_node_serde(node: Node, plan: JobPlan) -> Serde | None:
    internal = {t.key_by_node: t for t in plan.internal_topics}
    while True:
        if isinstance(node.spec, KeyBySpec):
            return internal[node.id].key_serde
        if isinstance(node.spec, TopicInput):
            return node.spec.key_serde
        if not node.parents:
            return None
        node = node.parents[0][0]


def _serde_name(serde: Serde | None) -> str:
    if serde is None:
        return "json"
    return "avro" if isinstance(serde, AvroSerde) else serde.name


def of_plan(plan: JobPlan, source_partitioner: str = "murmur2") -> dict[str, OperatorInfo]:
    """Every stateful operator of ``plan`` by its stable id."""
    by_id = {n.id: n for n in plan.topology.nodes}
    stage_of = {nid: s for s in plan.stages for nid in s.node_ids}
    out: dict[str, OperatorInfo] = {}
    for nid, sid in operator_ids(plan).items():
        node, stage = by_id[nid], stage_of[nid]
        kinds = {i.kind for t in plan.tasks if t.stage == stage.name for i in t.inputs}
        serde = _key_node_serde(node, plan)
        windows = None
        spec = node.spec
        if isinstance(spec, WindowOpSpec) and isinstance(spec.spec, Tumbling | Hopping):
            w = spec.spec
            advance = w.advance_ms if isinstance(w, Hopping) else w.size_ms
            windows = (w.size_ms, advance, w.offset_ms)
        out[sid] = OperatorInfo(
            sid,
            node.kind,
            stage.name,
            stage.partitions,
            _serde_name(serde),
            serde or serde_by_name("json"),
            "crc32" if InputKind.INTERNAL in kinds else source_partitioner,
            windows,
        )
    return out


def of_description(description: dict[str, Any]) -> dict[str, OperatorInfo]:
    """Every stateful operator a checkpoint's plan description names (its key serde by
    name; no partitioner: a stored query looks in every task of the stage)."""
    stages = description.get("stages") or {}
    out: dict[str, OperatorInfo] = {}
    for sid, d in (description.get("operators") or {}).items():
        name = str(d.get("key serde", "json"))
        name = "avro" if name.startswith("avro") else name
        stage = str(d.get("stage", ""))
        out[sid] = OperatorInfo(
            sid, str(d.get("kind", "")), stage, int(stages.get(stage, 1)), name, None, None
        )
    return out
