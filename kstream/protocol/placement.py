"""Where standby copies go (``--standby-replicas N``, docs/design.md "Standby copies"):
the tasks a member would be given if up to N other members left the group — pure.

Tasks are assigned by the consumer group's range assignor (``kstream.kafka.source``
asks for ``range``; confluent-kafka offers no custom assignor), which is deterministic:
for each topic on its own, the members subscribed to it sorted by member id, the
topic's partitions ``0..n-1`` cut into consecutive ranges, the first ``n % members``
members one partition more (librdkafka's ``rd_kafka_range_assignor``, as Kafka's
``RangeAssignor``). Every worker subscribes to every topic of the plan, so a member
can compute what it would get from any set of members. A task belongs to the member
that holds all of its input partitions (co-partitioned inputs: the same range).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Set

TP = tuple[str, int]

#: Sets of leavers looked at, at most, per ``standby_tasks`` call: past it, larger
#: sets of leavers are not covered (a log of the cut is the caller's).
MAX_SCENARIOS = 20_000


def range_assignment(members: Iterable[str], partitions: Mapping[str, int]) -> dict[str, set[TP]]:
    """What the range assignor gives each of ``members`` for topics with ``partitions``
    partitions each (every member subscribed to every topic)."""
    ordered = sorted(set(members))
    out: dict[str, set[TP]] = {m: set() for m in ordered}
    if not ordered:
        return out
    for topic, n in partitions.items():
        per, extra = divmod(n, len(ordered))
        for i, m in enumerate(ordered):
            start = per * i + min(i, extra)
            length = per + (1 if i < extra else 0)
            out[m].update((topic, p) for p in range(start, start + length))
    return out


def tasks_of(held: Set[TP], task_inputs: Mapping[str, frozenset[TP]]) -> set[str]:
    """The tasks all of whose input partitions are in ``held``."""
    return {t for t, ins in task_inputs.items() if ins and ins <= held}


def partition_counts(task_inputs: Mapping[str, frozenset[TP]]) -> dict[str, int]:
    """Each topic's partition count as the plan's tasks read it."""
    counts: dict[str, int] = {}
    for ins in task_inputs.values():
        for topic, p in ins:
            counts[topic] = max(counts.get(topic, 0), p + 1)
    return counts


def standby_tasks(
    me: str,
    members: Iterable[str],
    task_inputs: Mapping[str, frozenset[TP]],
    replicas: int,
) -> frozenset[str]:
    """The tasks ``me`` does not run among ``members`` but would be given if any 1 to
    ``replicas`` of the other members left (a crash or a stop): where it keeps standby
    copies. Sets of leavers are taken smallest first, at most ``MAX_SCENARIOS``."""
    everyone = set(members) | {me}
    if replicas < 1 or len(everyone) < 2:
        return frozenset()
    partitions = partition_counts(task_inputs)
    mine = tasks_of(range_assignment(everyone, partitions)[me], task_inputs)
    others = sorted(everyone - {me})
    out: set[str] = set()
    budget = MAX_SCENARIOS
    for k in range(1, min(replicas, len(others)) + 1):
        if math.comb(len(others), k) > budget:
            break
        budget -= math.comb(len(others), k)
        for gone in itertools.combinations(others, k):
            rest = everyone.difference(gone)
            out |= tasks_of(range_assignment(rest, partitions)[me], task_inputs)
    return frozenset(out - mine)
