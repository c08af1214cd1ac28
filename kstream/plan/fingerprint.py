"""The plan fingerprint: what a job's processes and checkpoints must agree on.

A :class:`PlanFingerprint` hashes the planned stages (inputs, outputs, partition
counts), every operator (kind, name, position in the graph, serdes, window specs,
sink topics and guarantees, the shape of aggregations) and the source partition
counts. It is kept **per operator** (``parts``), so two plans can be compared part
by part and a message can say what differs; ``digest`` is the hash of all parts.

Function bodies are not part of it: a changed ``map`` function keeps the plan (as
a redeploy of a bug fix should), a renamed, added, removed or reordered operator,
a changed serde or window, or a changed partition count does not.

Which checkpoint may be restored under a changed plan is not decided here but by
the state descriptions of :mod:`kstream.plan.compat` (job upgrades); the fingerprint
answers "do these processes run the same plan?".
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kstream.plan.model import JobPlan
from kstream.serde import AvroSerde, Serde

__all__ = ["PlanFingerprint", "describe_difference", "fingerprint"]


def _canon(value: Any) -> Any:
    """A JSON-able description of a plan parameter; functions count by presence only."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, AvroSerde):
        raw: Any = value.schema
        schema = (
            {k: v for k, v in raw.items() if not k.startswith("__")}
            if isinstance(raw, dict)
            else raw
        )
        return {"serde": "avro", "schema": schema, "schema_id": value.schema_id}
    if isinstance(value, Serde):
        return {"serde": value.name, "class": type(value).__name__}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            "type": type(value).__name__,
            **{f.name: _canon(getattr(value, f.name)) for f in dataclasses.fields(value)},
        }
    if isinstance(value, list | tuple):
        return [_canon(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _canon(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if callable(value):
        return "<function>"
    return f"<{type(value).__name__}>"


def _hash(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PlanFingerprint:
    """Per-part hashes of a plan (``operator:<stage>/<name>``, ``stage:<name>``,
    ``sources``) and ``digest``, the hash of them all."""

    digest: str
    parts: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "parts": dict(self.parts)}

    @classmethod
    def from_json(cls, obj: Any) -> PlanFingerprint | None:
        """The fingerprint in ``obj`` or None if it is not one (never raises)."""
        if not isinstance(obj, dict):
            return None
        digest, parts = obj.get("digest"), obj.get("parts")
        if not isinstance(digest, str) or not isinstance(parts, dict):
            return None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in parts.items()):
            return None
        return cls(digest, dict(parts))


def fingerprint(plan: JobPlan) -> PlanFingerprint:
    """The fingerprint of ``plan``."""
    parts: dict[str, str] = {}
    stage_of = {nid: s.name for s in plan.stages for nid in s.node_ids}
    for node in plan.topology.nodes:
        parts[f"operator:{stage_of.get(node.id, '?')}/{node.name}"] = _hash(
            {
                "id": node.id,
                "kind": node.spec.kind,
                "parents": [[p.id, port] for p, port in node.parents],
                "params": _canon(node.spec.params()),
            }
        )
    for s in plan.stages:
        parts[f"stage:{s.name}"] = _hash(
            {
                "partitions": s.partitions,
                "nodes": list(s.node_ids),
                "inputs": list(s.inputs),
                "outputs": list(s.outputs),
                "stateful": s.stateful,
            }
        )
    parts["sources"] = _hash(sorted([list(tp) for tp in plan.source_partitions]))
    return PlanFingerprint(_hash(sorted(parts.items())), parts)


def describe_difference(mine: Mapping[str, str], theirs: Mapping[str, str] | None) -> str:
    """What differs between two fingerprints' parts, in words (``theirs`` unknown: say so)."""
    if theirs is None:
        return "the other plan's description is not available"
    only_mine = sorted(mine.keys() - theirs.keys())
    only_theirs = sorted(theirs.keys() - mine.keys())
    changed = sorted(k for k in mine.keys() & theirs.keys() if mine[k] != theirs[k])
    out = []
    if changed:
        out.append("changed " + ", ".join(changed))
    if only_mine:
        out.append("only here " + ", ".join(only_mine))
    if only_theirs:
        out.append("only there " + ", ".join(only_theirs))
    return "; ".join(out) or "no part differs"
