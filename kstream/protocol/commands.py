"""Commands: what the coordinator decided, for the adapter to execute in order (``Send``
and ``RefusePlan`` are the worker's commands too: :mod:`kstream.protocol.worker`).

The coordinator does no I/O; it returns these plain values and the adapter
(``kstream.hosting.coordinator``) turns them into store writes and control-topic
messages, in the order given.
"""

from __future__ import annotations

from dataclasses import dataclass

from kstream.checkpointstorage.metadata import CheckpointMetadata
from kstream.protocol.messages import Message


@dataclass(frozen=True)
class Send:
    """Produce ``message`` on the control topic (in the coordinator's transaction)."""

    message: Message


@dataclass(frozen=True)
class WriteMetadata:
    """Create the completed checkpoint's metadata file exclusively.

    The adapter reports the outcome back (``CheckpointCompletion.metadata_written``
    or ``metadata_failed``); only then does the coordinator announce completion.
    """

    metadata: CheckpointMetadata


@dataclass(frozen=True)
class CleanupCheckpoint:
    """Delete what an aborted checkpoint left in the store (the acknowledged manifests)."""

    checkpoint_id: int
    handles: tuple[str, ...]


@dataclass(frozen=True)
class ApplyRetention:
    """Keep the newest ``retained`` completed checkpoints; delete unreferenced files."""

    retained: int


@dataclass(frozen=True)
class CreateSavepoint:
    """Make savepoint ``name`` of the completed checkpoint ``metadata`` (its metadata is
    written: the copy of its manifests is safe from retention)."""

    name: str
    metadata: CheckpointMetadata


@dataclass(frozen=True)
class Finish:
    """The job stopped on request (stop with a savepoint): the coordinator exits 0."""

    reason: str


@dataclass(frozen=True)
class RefusePlan:
    """The other side runs another plan (fingerprint ``plan``) than this one.

    The coordinator's: worker ``member`` reported it; its reports are ignored, and the
    adapter says loudly what differs (once per member and plan). The worker's: the
    coordinator's Restore of ``attempt`` carried it; this worker must not run, it exits
    2 saying what differs.
    """

    plan: str
    member: str = ""
    attempt: int = 0


@dataclass(frozen=True)
class Fail:
    """Hard failure: the coordinator stops and exits non-zero with ``reason``."""

    reason: str


Command = (
    Send
    | WriteMetadata
    | CleanupCheckpoint
    | ApplyRetention
    | CreateSavepoint
    | Finish
    | RefusePlan
    | Fail
)
