"""Stable operator ids and per-operator state descriptors (what a checkpoint's state means).

**Stable ids.** Every stateful operator (window, rolling aggregation, process
function, stream-table and stream-stream join) has an id, and its state is stored
under that id (the RocksDB column families ``<id>.*`` of its task):

* the operator's explicit ``name=`` if the topology gives one (unique across the
  topology), else
* ``<stage>.<kind><k>``: the operator's stage and the ordinal ``k`` of the stateful
  operators *of the same kind* in that stage, in construction order (e.g.
  ``stage1.window0``, ``stage1.process0``, ``stage1.window1``).

Stateless operators (map, filter, flat_map, sources, sinks) never count, so adding
or removing them before or after a stateful operator keeps its id and its state;
adding a stateful operator of the same kind *before* another one in its stage
shifts the default id of the later one — give both a ``name=`` to avoid that.

**Descriptors.** :func:`describe` summarises what a plan's state means: per
stateful operator its kind, key serde, window spec, aggregation, process state
(names and types) and the Avro schemas of its typed state (``ValueState(schema=...)``,
an aggregation's ``schema=...``: ``"schemas"``, state name -> schema; the accumulator
is ``"accumulator"``), and the partition count of every stage (a stage reading an
internal topic has that topic's partition count). A checkpoint carries its plan's
description; :mod:`kstream.plan.compat` compares it with the plan restoring it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from kstream.api.spec import Node, TopicInput
from kstream.api.stream import KeyBySpec
from kstream.plan.model import JobPlan, PlanError
from kstream.serde import AvroSerde, Serde

__all__ = ["describe", "operator_ids"]

# 2: operators' Avro state schemas ("schemas": state name -> schema, absent: none);
# a version-1 description says nothing about them.
DESCRIPTION_VERSION = 2


def operator_ids(plan: JobPlan) -> dict[int, str]:
    """Node id -> stable id of every stateful operator (module doc); ``PlanError`` if
    two operators end up with the same id."""
    ids: dict[int, str] = {}
    for stage in plan.stages:
        per_kind: dict[str, int] = {}
        for node in plan.nodes_of(stage.name):
            if not node.spec.stateful:
                continue
            k = per_kind.get(node.kind, 0)
            per_kind[node.kind] = k + 1
            ids[node.id] = node.name if node.named else f"{stage.name}.{node.kind}{k}"
    seen: dict[str, int] = {}
    by_id = {n.id: n for n in plan.topology.nodes}
    for nid, sid in ids.items():
        if sid in seen:
            raise PlanError(
                f"two stateful operators have the id {sid!r} ({by_id[seen[sid]].kind} and "
                f"{by_id[nid].kind}): give them different name=... values"
            )
        seen[sid] = nid
    return ids


def _serde(serde: Serde | None) -> str:
    if serde is None:
        return "json"
    if isinstance(serde, AvroSerde):
        schema = json.dumps(serde.schema, sort_keys=True, default=str)
        return f"avro:{hashlib.sha256(schema.encode()).hexdigest()[:12]}"
    return serde.name


def _spec(value: Any) -> str:
    """A window spec or state declaration as ``Type(field=value, ...)``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ", ".join(
            f"{f.name}={getattr(value, f.name)!r}" for f in dataclasses.fields(value)
        )
        return f"{type(value).__name__}({fields})"
    return repr(value)


def _key_serde(node: Node, plan: JobPlan) -> str:
    """The serde of the keys a stateful operator sees (keys are state key components)."""
    internal = {t.key_by_node: t for t in plan.internal_topics}
    while True:
        if isinstance(node.spec, KeyBySpec):
            return _serde(internal[node.id].key_serde)
        if isinstance(node.spec, TopicInput):
            return _serde(node.spec.key_serde)
        if not node.parents:
            return "json"
        node = node.parents[0][0]


def _describe_operator(node: Node, plan: JobPlan, stage: str) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": node.kind, "stage": stage, "key serde": _key_serde(node, plan)}
    for what, value in node.spec.state_description().items():
        if what == "schemas":  # state name -> Avro schema (canonical JSON text)
            d[what] = dict(value)
        else:
            d[what] = value if isinstance(value, str) else _spec(value)
    return d


def describe(plan: JobPlan) -> dict[str, Any]:
    """What ``plan``'s state means, as JSON-compatible data (module doc)."""
    ids = operator_ids(plan)
    stage_of = {nid: s.name for s in plan.stages for nid in s.node_ids}
    by_id = {n.id: n for n in plan.topology.nodes}
    return {
        "version": DESCRIPTION_VERSION,
        "operators": {
            sid: _describe_operator(by_id[nid], plan, stage_of[nid]) for nid, sid in ids.items()
        },
        "stages": {s.name: s.partitions for s in plan.stages},
        # Without the app id: a new app id (blue/green) keeps the same topics' roles.
        "internal_topics": {
            t.name[len(plan.app_id) + 1 :]: t.partitions for t in plan.internal_topics
        },
    }
