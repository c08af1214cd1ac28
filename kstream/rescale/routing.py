"""Which new task a stored record key belongs to: the partitioner that routes the
operator's records, over the new partition count.

A stage reading a source topic is partitioned by the topic's producers (Kafka's
murmur2 by default, :data:`kstream.query.operators.SOURCE_PARTITIONERS`); a stage
reading a repartition topic by kstream's ``key_by`` (crc32). Either hashes the
*serialized* key, so a stored key is serialized again with the operator's key serde —
exact for kstream's own repartition topics, and for source topics whenever their
producers serialize keys as that serde does (``bytes``, ``str``; JSON without
whitespace).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kstream.plan.model import JobPlan
from kstream.query.operators import SOURCE_PARTITIONERS, of_plan, partition_of
from kstream.rescale.layout import RescaleError
from kstream.serde import SerdeError, serde_by_name

__all__ = ["OperatorRoute", "routes_of_description", "routes_of_plan"]


@dataclass(frozen=True)
class OperatorRoute:
    """One stateful operator as rescaling sees it: its kind, stage, the serializer of its
    keys (None: unknown, refused when its stage is rescaled) and its stage's
    partitioner (``crc32``/``murmur2``; None: unknown)."""

    id: str
    kind: str
    stage: str
    key_serde: str
    serialize: Callable[[Any], bytes | None] | None
    partitioner: str | None

    def partition(self, key: Any, partitions: int) -> int:
        """The partition (task index) of record key ``key`` among ``partitions``."""
        if self.serialize is None or self.partitioner is None:
            raise RescaleError(
                f"operator {self.id!r}: its keys' serde ({self.key_serde}) or partitioner is "
                f"not known here, so its keys cannot be routed (rescale with the topology: "
                f"start the job with --from-savepoint)"
            )
        try:
            data = None if key is None else self.serialize(key)
        except (SerdeError, TypeError, ValueError) as e:
            raise RescaleError(
                f"operator {self.id!r}: stored key {key!r} does not suit its key serde "
                f"{self.key_serde} ({e}); its state cannot be routed to the new tasks "
                f"(did the key serde change?)"
            ) from e
        return partition_of(data, partitions, self.partitioner)


def routes_of_description(
    description: Mapping[str, Any], partitioners: Mapping[str, str]
) -> dict[str, OperatorRoute]:
    """Every stateful operator of a checkpoint's plan description, its key serde known by
    name (``bytes``, ``str``, ``json``; Avro keys need the topology);
    ``partitioners``: stage -> partitioner."""
    out: dict[str, OperatorRoute] = {}
    for sid, d in (description.get("operators") or {}).items():
        name = str(d.get("key serde", "json"))
        stage = str(d.get("stage", ""))
        serialize = serde_by_name(name).serialize if name in ("bytes", "str", "json") else None
        out[sid] = OperatorRoute(
            sid, str(d.get("kind", "")), stage, name, serialize, partitioners.get(stage)
        )
    return out


def routes_of_plan(plan: JobPlan, source_partitioner: str = "murmur2") -> dict[str, OperatorRoute]:
    """Every stateful operator of ``plan`` with its exact key serde and partitioner."""
    if source_partitioner not in SOURCE_PARTITIONERS:
        raise RescaleError(
            f"unknown source partitioner {source_partitioner!r}: use "
            + " or ".join(SOURCE_PARTITIONERS)
        )
    out: dict[str, OperatorRoute] = {}
    for sid, info in of_plan(plan, source_partitioner).items():
        serde = info.serde
        out[sid] = OperatorRoute(
            sid,
            info.kind,
            info.stage,
            info.key_serde,
            None if serde is None else serde.serialize,
            info.partitioner,
        )
    return out
