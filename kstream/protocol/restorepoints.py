"""Which checkpoint the job restores: the newest retained one that no task failed to
restore — one global restore point, never a mix (docs/design.md §12). Pure."""

from __future__ import annotations

import logging

from kstream.checkpointstorage.metadata import CheckpointMetadata
from kstream.protocol.messages import RestoreFailed

log = logging.getLogger(__name__)


class RestorePoints:
    """The retained completed checkpoints (ascending) and those a task could not restore."""

    def __init__(
        self, retained: list[CheckpointMetadata], latest: CheckpointMetadata | None
    ) -> None:
        self.retained: list[CheckpointMetadata] = list(retained)
        if latest is not None and all(m.checkpoint_id != latest.checkpoint_id for m in retained):
            self.retained.append(latest)
        self.unrestorable: dict[int, str] = {}  # checkpoint id -> why a task could not restore it

    def completed(self, meta: CheckpointMetadata, keep: int) -> None:
        """``meta`` completed; the newest ``keep`` are retained."""
        self.retained = [*self.retained, meta][-keep:]

    def choose(self) -> int | None:
        """The checkpoint every task restores next (None: the start positions, when nothing
        ever completed or nothing restorable is left)."""
        for meta in reversed(self.retained):
            if meta.checkpoint_id not in self.unrestorable:
                return meta.checkpoint_id
        return None

    def refuse(self, checkpoint_id: int, why: str) -> int | None:
        """A task cannot restore ``checkpoint_id``: the next older choice (None: none left)."""
        self.unrestorable[checkpoint_id] = why
        return self.choose()

    def newer_unrestorable(self, checkpoint_id: int) -> list[int]:
        return sorted(k for k in self.unrestorable if k > checkpoint_id)

    def failed(self, n: int, msg: RestoreFailed) -> tuple[str, int | None]:
        """A task could not restore ``n``, the current restore point: ``(reason, older)``,
        the older checkpoint every task restores instead (said once, loudly), or None:
        the job fails for ``reason``."""
        if msg.published > n:
            return self._republishing(n, msg), None
        what = msg.object or "(object not named)"
        older = self.refuse(n, f"task {msg.task_id} on {msg.member}: {msg.reason}")
        if older is None:
            reason = (
                f"checkpoint {n} cannot be restored ({what}: task {msg.task_id}: {msg.reason}) "
                "and no older retained checkpoint is left"
            )
            return reason, None
        log.error(
            "RESTORE FAILED: checkpoint %d cannot be restored — %s is corrupt or missing "
            "(task %s on %s: %s); restoring EVERY task from the older checkpoint %d",
            n,
            what,
            msg.task_id,
            msg.member,
            msg.reason,
            older,
        )
        return f"checkpoint {n} cannot be restored ({what}); restoring checkpoint {older}", older

    def _republishing(self, n: int, msg: RestoreFailed) -> str:
        """Why the job stops rather than restore ``n``: a sink already published the
        output of a newer checkpoint, which processing from ``n`` would publish again."""
        newer = ", ".join(str(k) for k in self.newer_unrestorable(n))
        return (
            f"exactly-once cannot be kept: checkpoint {n} is the newest restorable one"
            + (f" (not restorable: {newer}, named above)" if newer else "")
            + f", but task {msg.task_id}'s sink already published the output of checkpoint "
            f"{msg.published} ({msg.object}); restoring {n} would publish output twice. "
            f"Restore the newer checkpoint's objects, or accept re-published output by "
            f"starting from it with --from-checkpoint {n}"
        )
