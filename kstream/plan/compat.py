"""May a checkpoint taken under one plan be restored under another? (job upgrades)

The rule, per stateful operator keyed by its stable id
(:mod:`kstream.plan.operators`), comparing the checkpoint's description with the
restoring plan's:

1. An operator of the checkpoint that the new plan does not have: its state would
   be dropped — refused unless ``allow_non_restored_state``.
2. An operator present in both whose kind, key serde, window spec, aggregation or
   process state declarations changed: refused, naming the operator and what
   changed (its state would be read as something it is not).
3. An Avro-typed state (``ValueState(schema=...)``, an aggregation's ``schema=...``)
   whose stored values the new schema cannot read by Avro schema resolution (a field
   added without a default, a type changed beyond a promotion, ...), or whose state
   changed between JSON and Avro: refused, naming the operator, the state and the
   field. Compatible changes (a field added with a default, removed, promoted) pass:
   values are read through resolution. (A description of version 1 says nothing about
   schemas: nothing is compared; the operator's open still checks the stored history,
   :mod:`kstream.operators.stateschema`.)
4. A stage whose partition count changed (a source topic's or an internal
   topic's): refused (state is partitioned by key) — unless the state is being
   imported with ``--from-savepoint``/``--from-checkpoint`` (``rescale``): then its keyed
   state is redistributed to the new tasks (:mod:`kstream.rescale`), which refuses,
   naming the operator, what it cannot split soundly.
5. Operators new in the plan start empty; stateless operators (map, filter,
   flat_map, sinks) and function bodies may change freely.

A checkpoint without a description (taken before descriptions existed) is
restorable as before: its state is addressed as it was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import fastavro

from kstream.serde.avroresolve import incompatibility, schema_version

__all__ = ["IncompatibleStateError", "changed_partitions", "check_restorable"]

_COMPARED = ("kind", "key serde", "window", "aggregation", "state")


class IncompatibleStateError(ValueError):
    """A checkpoint's state cannot be restored under this plan; the message says why."""


def incompatibilities(
    saved: Mapping[str, Any],
    current: Mapping[str, Any],
    *,
    allow_non_restored_state: bool = False,
    rescale: bool = False,
) -> list[str]:
    """Every reason (in words) why state described by ``saved`` cannot be restored under
    the plan described by ``current``; empty when it can (module doc). ``rescale``:
    changed partition counts are not a reason (rule 4)."""
    problems: list[str] = []
    old_ops: Mapping[str, Mapping[str, Any]] = saved.get("operators") or {}
    new_ops: Mapping[str, Mapping[str, Any]] = current.get("operators") or {}
    for sid in sorted(old_ops.keys() - new_ops.keys()):
        if not allow_non_restored_state:
            problems.append(
                f"operator {sid!r} ({old_ops[sid].get('kind', '?')}) has state in the checkpoint "
                f"but is not in this topology: its state would be dropped (keep the operator, "
                f"give it its old name=..., or pass --allow-non-restored-state)"
            )
    for sid in sorted(old_ops.keys() & new_ops.keys()):
        old, new = old_ops[sid], new_ops[sid]
        for what in _COMPARED:
            if old.get(what) != new.get(what):
                problems.append(
                    f"operator {sid!r}: its {what} changed from {old.get(what)!r} to "
                    f"{new.get(what)!r}; its state cannot be read as the new one (give the "
                    f"changed operator a new name=... to start it empty)"
                )
        if saved.get("version", 1) >= 2:
            problems.extend(
                _schema_problems(sid, old.get("schemas") or {}, new.get("schemas") or {})
            )
    if rescale:
        return problems
    old_stages: Mapping[str, int] = saved.get("stages") or {}
    new_stages: Mapping[str, int] = current.get("stages") or {}
    for stage in sorted(old_stages.keys() & new_stages.keys()):
        if old_stages[stage] != new_stages[stage]:
            problems.append(
                f"{stage} has {new_stages[stage]} partitions but the checkpoint has "
                f"{old_stages[stage]}: state is partitioned by key, so a changed partition "
                f"count cannot be restored"
            )
    old_topics: Mapping[str, int] = saved.get("internal_topics") or {}
    new_topics: Mapping[str, int] = current.get("internal_topics") or {}
    for topic in sorted(old_topics.keys() & new_topics.keys()):
        if old_topics[topic] != new_topics[topic]:
            problems.append(
                f"internal topic <app>.{topic} has {new_topics[topic]} partitions but "
                f"{old_topics[topic]} in the checkpoint: changing an internal topic's partition "
                f"count is not supported (state is partitioned by key)"
            )
    return problems


def changed_partitions(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, int]:
    """Stage -> its partition count in ``current``, for every stage of both whose count
    differs (what a rescale of ``saved``'s state to ``current`` changes)."""
    old: Mapping[str, int] = saved.get("stages") or {}
    new: Mapping[str, int] = current.get("stages") or {}
    return {s: int(new[s]) for s in sorted(old.keys() & new.keys()) if old[s] != new[s]}


def _schema_problems(sid: str, old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """Why operator ``sid``'s typed states (state -> Avro schema, before and now) cannot
    be read under the new schemas (rule 3)."""
    problems: list[str] = []
    for state in sorted(old.keys() | new.keys()):
        where = f"operator {sid!r}, state {state!r}"
        if state not in new:
            problems.append(
                f"{where}: its values are stored as Avro but it has no schema now (keep its "
                f"schema=..., or start it empty under a new name=...)"
            )
            continue
        if state not in old:
            problems.append(
                f"{where}: its values are stored as JSON but it has a schema now (its state "
                f"cannot be read as Avro: start it empty under a new name=...)"
            )
            continue
        writer = fastavro.parse_schema(json.loads(old[state]))
        why = incompatibility(writer, fastavro.parse_schema(json.loads(new[state])))
        if why is not None:
            problems.append(
                f"{where}: the checkpoint holds values of schema version "
                f"{schema_version(writer).hex()} that this job's schema cannot read: {why}. "
                "Give the field a default (or keep the old schema), or start without that "
                "state (a new name=... or app id)"
            )
    return problems


def check_restorable(
    saved: Mapping[str, Any] | None,
    current: Mapping[str, Any],
    *,
    what: str = "the checkpoint",
    allow_non_restored_state: bool = False,
    rescale: bool = False,
) -> None:
    """Raise :class:`IncompatibleStateError` listing every reason ``saved`` (``what``'s
    description, None: taken before descriptions existed) cannot be restored."""
    if saved is None:
        return
    problems = incompatibilities(
        saved, current, allow_non_restored_state=allow_non_restored_state, rescale=rescale
    )
    if problems:
        raise IncompatibleStateError(
            f"{what} cannot be restored under this topology: " + "; ".join(problems)
        )
