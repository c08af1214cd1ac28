"""Which checkpoint the job restores: the newest retained one that no task failed to
restore — one global restore point, never a mix (docs/design.md §12). Pure."""

from __future__ import annotations

from kstream.store.metadata import CheckpointMetadata


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
