"""A worker's standby copies (``--standby-replicas N``, docs/design.md "Standby copies"):
fed the control topic, it tells :class:`~kstream.snapshots.standby.StandbyCopies` which
tasks to keep copies of — those this worker would be given if up to N other members
left (:mod:`kstream.protocol.placement`), decided at each ``Resume`` from its owners —
and when a checkpoint completed. Runs on the processing thread and only hands over:
the copies are made on their own thread."""

from __future__ import annotations

import logging
from collections.abc import Callable

from kstream.plan import JobPlan
from kstream.protocol.batching import ResumeParts
from kstream.protocol.messages import CheckpointCompleted, Message, Resume
from kstream.protocol.placement import TP, standby_tasks
from kstream.snapshots.standby import StandbyCopies

log = logging.getLogger(__name__)


class Standbys:
    """Observes the control topic (``Checkpointed.observers``) for ``copies``."""

    def __init__(
        self, copies: StandbyCopies, plan: JobPlan, replicas: int, member: Callable[[], str]
    ) -> None:
        self.copies = copies
        self.replicas = replicas
        self.member = member
        self.task_inputs: dict[str, frozenset[TP]] = {
            spec.task_id: frozenset((i.topic, i.partition) for i in spec.inputs)
            for spec in plan.tasks
        }
        self._resumes = ResumeParts()
        self.wanted: frozenset[str] = frozenset()

    def observe(self, msg: Message) -> None:
        if isinstance(msg, CheckpointCompleted):
            self.copies.completed(msg.checkpoint_id)
        elif isinstance(msg, Resume):
            whole = self._resumes.add(msg)
            if whole is not None:
                self._placed(whole.owners)

    def _placed(self, owners: dict[str, str]) -> None:
        me, members = self.member(), set(owners.values())
        if me not in members:  # (an earlier incarnation's Resume, read at start)
            return
        want = standby_tasks(me, members, self.task_inputs, self.replicas)
        want -= {t for t, m in owners.items() if m == me}
        if want != self.wanted:
            log.info("standby copies of %d task(s): %s", len(want), sorted(want))
        self.wanted = want
        self.copies.want(want)
