"""The control protocol: messages on ``<app>.control`` (docs/design.md §5-§7).

Every message is one JSON object ``{"v": 1, "type": "<Name>", ...fields}``.
Decoding validates the version, the type and every field's type; anything else
raises :class:`ProtocolError`, which a reader logs, counts and skips. Nothing
read from the wire is ever unpickled or executed: decoding builds one of the
frozen dataclasses below from plain JSON values, nothing more.

Who writes what:

* coordinator: TriggerCheckpoint, CheckpointCompleted, CheckpointAborted,
  Restore, Resume, JobFailed, StopJob, JobStopped, WatermarkBound, HandoverDeclined, Adopt;
* workers: AcknowledgeCheckpoints (its snapshots in columns: :mod:`kstream.protocol.snapshotcolumns`;
  an object per snapshot, as before columns, and AcknowledgeCheckpoint, one task's: still read), DeclineCheckpoint, TasksReady (TaskReady: one task's, still read), Heartbeat,
  TaskFailed, RestoreFailed, CheckpointRequest, WorkerStopped, WatermarkReport, AdoptRequest,
  TasksReleased, Pulse, CoordinatorPulse;
* ``kstream savepoint``: SavepointRequest.

**Signed coordinator messages**: :mod:`kstream.protocol.signing`.

Receivers must be idempotent: ``CheckpointCompleted`` may repeat or arrive late
(a later one subsumes earlier ones). During a restore a worker re-sends
``TaskReady`` for the current attempt after every rebalance: only readies from
the newest group generation count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from kstream.checkpointstorage.metadata import TaskSnapshot
from kstream.protocol.elasticmessages import (
    Adopt,
    AdoptRequest,
    CoordinatorPulse,
    Pulse,
    TasksReleased,
)
from kstream.protocol.fields import FieldError, build
from kstream.protocol.snapshotcolumns import from_columns, to_columns

SCHEMA_VERSION = 1
MAX_MESSAGE_BYTES = 256 * 1024  # an ack with many partition offsets stays far below this
# The reason of a ``TaskFailed`` a worker reports for a task whose partitions the group
# gave it while the current attempt has another owner (a rebalance: its owner left,
# died or was slow): the coordinator names the cause from what it knows of the owner.
REASSIGNED = "its partitions were reassigned to a worker that does not run it"


class ProtocolError(ValueError):
    """A control record is malformed, of an unknown type/version, or oversized."""


@dataclass(frozen=True)
class TriggerCheckpoint:
    """Coordinator → sources: take checkpoint ``checkpoint_id`` (wall-clock ``timestamp`` ms)."""

    checkpoint_id: int
    attempt: int
    timestamp: int
    # A hand-over checkpoint (docs/design.md §6.6): each task holds after its snapshot
    # until the restore that follows the group's change. Left out of the wire form when
    # False: readers of an older version decode it (and do not hold).
    hold: bool = False


@dataclass(frozen=True)
class AcknowledgeCheckpoint:
    """Task → coordinator: my snapshot for ``checkpoint_id`` is durable in the store.

    ``snapshot`` describes it as the completed checkpoint's metadata lists it: the store
    path of the task's manifest (``handle``), its input positions, sizes and times (the
    coordinator adds only the acknowledgement's delay).
    """

    checkpoint_id: int
    task_id: str
    attempt: int
    snapshot: TaskSnapshot


@dataclass(frozen=True)
class AcknowledgeCheckpoints:
    """Worker → coordinator: the snapshots of ``member``'s tasks for ``checkpoint_id`` are
    durable in the store (``snapshots``: task -> its ``AcknowledgeCheckpoint.snapshot``).

    One message per worker per checkpoint, not one per task: at hundreds of tasks per
    worker the coordinator reads a message per worker. Split into parts only to stay
    under ``MAX_MESSAGE_BYTES`` (:func:`kstream.protocol.batching.batch`); on the wire its
    snapshots are columns (:mod:`kstream.protocol.snapshotcolumns`).
    """

    checkpoint_id: int
    attempt: int
    member: str
    snapshots: dict[str, TaskSnapshot]


@dataclass(frozen=True)
class DeclineCheckpoint:
    """Task → coordinator: I cannot take checkpoint ``checkpoint_id``, because ``reason``."""

    checkpoint_id: int
    task_id: str
    attempt: int
    reason: str


@dataclass(frozen=True)
class CheckpointCompleted:
    """Coordinator → all: ``checkpoint_id`` is committed (its metadata is in the store)."""

    checkpoint_id: int
    attempt: int


@dataclass(frozen=True)
class CheckpointAborted:
    """Coordinator → all: ``checkpoint_id`` will never complete; drop its partial state."""

    checkpoint_id: int
    reason: str


@dataclass(frozen=True)
class Restore:
    """Coordinator → workers: roll back to ``checkpoint_id`` (None: start positions) as ``attempt``."""

    attempt: int
    checkpoint_id: int | None
    plan: str = ""  # the coordinator's plan fingerprint: a worker with another plan refuses


@dataclass(frozen=True)
class TaskReady:
    """Worker → coordinator: ``task_id`` is restored for ``attempt`` on ``member``."""

    attempt: int
    task_id: str
    member: str
    generation: int
    plan: str = ""  # the worker's plan fingerprint: the coordinator refuses another plan


@dataclass(frozen=True)
class TasksReady:
    """Worker → coordinator: ``tasks`` are restored for ``attempt`` on ``member``: one
    ``TaskReady`` each, in one message per worker (split only under the size limit:
    :mod:`kstream.protocol.batching`)."""

    attempt: int
    tasks: tuple[str, ...]
    member: str
    generation: int
    plan: str = ""  # the worker's plan fingerprint: the coordinator refuses another plan


@dataclass(frozen=True)
class Resume:
    """Coordinator → workers: run ``attempt``; ``owners`` names the one member per task.

    Past the size limit (thousands of tasks) written in ``parts`` (``part``: this one's
    number from 0), each with some of the owners, in one transaction; a reader acts on
    the whole (:mod:`kstream.protocol.batching`). One part: the fields are not written
    (as before parts: readers of an older version decode it)."""

    attempt: int
    owners: dict[str, str]
    part: int = 0
    parts: int = 1


@dataclass(frozen=True)
class JobFailed:
    """Coordinator → workers: the job failed hard; stop and exit non-zero with ``reason``."""

    reason: str


@dataclass(frozen=True)
class Heartbeat:
    """Worker → coordinator: ``member`` is alive and runs ``tasks`` in group ``generation``."""

    member: str
    tasks: tuple[str, ...]
    generation: int
    plan: str = ""  # the worker's plan fingerprint
    query: str = ""  # the worker's query endpoint (docs/queries.md), "" when it serves none
    # While it restores: how many of its tasks it restored so far (the keepalive's
    # heartbeats, kstream.worker.keepalive); the coordinator's restore deadline runs from
    # the last increase (kstream.protocol.failover). 0 otherwise.
    restored: int = 0
    # With cooperative assignment: the transactional id of its exactly-once sinks, which
    # the adopter of its tasks fences should it fall silent (kstream.protocol.adoption).
    producer: str = ""


@dataclass(frozen=True)
class TaskFailed:
    """Worker → coordinator: ``task_id`` failed on ``member`` in ``attempt``."""

    task_id: str
    member: str
    attempt: int
    reason: str


@dataclass(frozen=True)
class RestoreFailed:
    """Worker → coordinator: ``task_id`` cannot restore checkpoint ``checkpoint_id`` in
    ``attempt``, because ``reason``; ``object`` names the corrupt or missing object."""

    attempt: int
    task_id: str
    member: str
    checkpoint_id: int
    reason: str
    object: str = ""
    # Not corrupt: the task's exactly-once sink already published the output of this
    # newer checkpoint, so restoring ``checkpoint_id`` would publish it twice (0: none).
    published: int = 0


@dataclass(frozen=True)
class CheckpointRequest:
    """Worker → coordinator: trigger a checkpoint of ``attempt`` now, not at the next
    interval (a graceful stop wants its last output committed: ``reason`` says why)."""

    member: str
    attempt: int
    reason: str


@dataclass(frozen=True)
class SavepointRequest:
    """``kstream savepoint`` → coordinator: make savepoint ``name`` of the next checkpoint;
    with ``stop``, stop every worker gracefully first so that checkpoint is the last."""

    name: str
    stop: bool
    requester: str


@dataclass(frozen=True)
class StopJob:
    """Coordinator → workers: stop gracefully (read no more input; exit once a checkpoint
    triggered after this message, with an id above ``after``, completed and its output is
    published). A stop with a savepoint names the last id triggered before the request:
    a trigger already in flight, read in the same loop as this message, covers what the
    worker read but is not the savepoint, so it does not end the worker."""

    attempt: int
    reason: str
    after: int = -1


@dataclass(frozen=True)
class JobStopped:
    """Coordinator → everyone: the job stopped on request or because every worker that
    ran it stopped (``reason``) in ``attempt``; nothing is triggered after it. A worker
    that joins later restarts the job with a restore."""

    attempt: int
    reason: str


@dataclass(frozen=True)
class WorkerStopped:
    """Worker → coordinator: ``member`` stopped gracefully in ``attempt`` (``reason``):
    it is not lost, and once every owner of the attempt stopped, the job is stopped."""

    member: str
    attempt: int
    reason: str


@dataclass(frozen=True)
class HandoverDeclined:
    """Coordinator → ``member``: no hand-over checkpoint now (``reason``: an owner is quiet)."""

    member: str
    reason: str


@dataclass(frozen=True)
class WatermarkReport:
    """Worker → coordinator: in ``attempt``, the watermark of the slowest source partition
    ``member`` reads that still holds others back, per aligned source topic (``slowest``;
    a topic without such a partition here is absent). Global watermark alignment:
    :mod:`kstream.protocol.alignment`."""

    member: str
    attempt: int
    slowest: dict[str, int]


@dataclass(frozen=True)
class WatermarkBound:
    """Coordinator → workers: in ``attempt``, the slowest watermark over every worker's
    report, per aligned source topic (``slowest``), the member that reported it (``by``)
    and the slowest of the other members' reports (``second``; absent: none). A worker
    holds a partition whose watermark is more than the topic's ``max_drift_ms`` ahead of
    the slowest report but its own (its own slowest it knows first hand)."""

    attempt: int
    slowest: dict[str, int]
    by: dict[str, str]
    second: dict[str, int]


Message = (
    TriggerCheckpoint
    | AcknowledgeCheckpoint
    | AcknowledgeCheckpoints
    | DeclineCheckpoint
    | CheckpointCompleted
    | CheckpointAborted
    | Restore
    | TaskReady
    | TasksReady
    | Resume
    | JobFailed
    | Heartbeat
    | Pulse
    | CoordinatorPulse
    | TaskFailed
    | RestoreFailed
    | CheckpointRequest
    | SavepointRequest
    | StopJob
    | JobStopped
    | WorkerStopped
    | WatermarkReport
    | WatermarkBound
    | HandoverDeclined
    | AdoptRequest
    | TasksReleased
    | Adopt
)

MESSAGE_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        TriggerCheckpoint,
        AcknowledgeCheckpoint,
        AcknowledgeCheckpoints,
        DeclineCheckpoint,
        CheckpointCompleted,
        CheckpointAborted,
        Restore,
        TaskReady,
        TasksReady,
        Resume,
        JobFailed,
        Heartbeat,
        Pulse,
        CoordinatorPulse,
        TaskFailed,
        RestoreFailed,
        CheckpointRequest,
        SavepointRequest,
        StopJob,
        JobStopped,
        WorkerStopped,
        WatermarkReport,
        WatermarkBound,
        HandoverDeclined,
        AdoptRequest,
        TasksReleased,
        Adopt,
    )
}


def record_key(msg: Message) -> str:
    """The Kafka record key of ``msg`` on the compacted control topic.

    Compaction keeps the newest record per key, so keys are chosen for what a
    starting process needs (``kstream.protocol.recovery``, the worker's ``learn``):
    the newest message of each coordinator type (the highest trigger, the newest
    completion, abort, Restore, Resume, JobFailed), and of the workers' reports the
    newest per task (acknowledgement, decline, readiness, failure), and of a worker's
    batched acknowledgements the newest per first task (not per member: a restarted
    worker has a new member id, and its predecessor's record would stay forever; a
    worker's parts have different first tasks; an adoption's and a release's, per first
    task too). Heartbeats, pulses and checkpoint requests matter only while
    fresh: one key each.
    """
    name = type(msg).__name__
    if isinstance(msg, Resume) and msg.part:
        return f"{name}:{msg.part}"  # (the first part keeps the key of a whole one)
    if isinstance(msg, AcknowledgeCheckpoints):
        return f"{name}:{min(msg.snapshots, default='')}"
    if isinstance(msg, TasksReady | Adopt | TasksReleased):
        return f"{name}:{min(msg.tasks, default='')}"
    task = getattr(msg, "task_id", None)
    return f"{name}:{task}" if isinstance(task, str) else name


COLUMNS_FROM = 64
"""An ``AcknowledgeCheckpoints`` of at least this many snapshots is written in columns
(two thirds of the bytes, a fraction of the decoding); a smaller one as an object per
snapshot, as before columns, which a coordinator of an older version reads — a job with
fewer tasks per worker can be upgraded by a rolling restart (docs/design.md §5.5)."""


def dump(msg: Message) -> bytes:
    """The wire form of ``msg``, whatever its size (``encode`` checks it)."""
    # (vars, not asdict: asdict deep-copies every value, which made encoding a Resume
    # of 100 000 owners or a batch of snapshots several times slower than json itself)
    body = dict(vars(msg))
    if isinstance(msg, Heartbeat) and not msg.query:
        del body["query"]  # as before queries: readers of an older version decode it
    if isinstance(msg, Heartbeat) and not msg.restored:
        del body["restored"]  # likewise
    if isinstance(msg, Heartbeat) and not msg.producer:
        del body["producer"]  # likewise
    if isinstance(msg, TriggerCheckpoint) and not msg.hold:
        del body["hold"]  # likewise
    if isinstance(msg, Resume) and msg.parts == 1:
        del body["part"], body["parts"]  # as before parts
    if isinstance(msg, AcknowledgeCheckpoints) and len(msg.snapshots) >= COLUMNS_FROM:
        body["columns"] = to_columns(body.pop("snapshots"))  # (objects: still read)
    return json.dumps(
        {"v": SCHEMA_VERSION, "type": type(msg).__name__, **body},
        separators=(",", ":"),
        default=vars,  # a nested dataclass (TaskSnapshot): its fields (tuples: lists)
    ).encode()


def encode(msg: Message) -> bytes:
    """The wire form of ``msg``: compact UTF-8 JSON with ``v`` and ``type``; ProtocolError
    past ``MAX_MESSAGE_BYTES``."""
    data = dump(msg)
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(
            f"{type(msg).__name__} is {len(data)} bytes, over the {MAX_MESSAGE_BYTES} limit"
        )
    return data


def decode(data: bytes | None) -> Message:
    """The message in ``data``; ProtocolError if it is not exactly one valid message."""
    if data is None:
        raise ProtocolError("empty record (no value)")
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"record of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise ProtocolError(f"not a JSON object but {type(obj).__name__}")
    version = obj.get("v")
    if version != SCHEMA_VERSION:
        raise ProtocolError(f"unsupported schema version {version!r} (supported: 1)")
    name = obj.get("type")
    if not isinstance(name, str) or name not in MESSAGE_TYPES:
        raise ProtocolError(f"unknown message type {name!r}")
    body = {k: v for k, v in obj.items() if k not in ("v", "type", "epoch", "seq", "sig")}
    try:
        if name == "AcknowledgeCheckpoints" and "columns" in body:
            return _acks_in_columns(body)
        message: Message = build(MESSAGE_TYPES[name], body, name)
    except FieldError as e:
        raise ProtocolError(str(e)) from None
    return message


def _acks_in_columns(body: dict[str, Any]) -> AcknowledgeCheckpoints:
    """An ``AcknowledgeCheckpoints`` whose snapshots are in columns (``"snapshots"``:
    an object per task, as written before columns)."""
    where = "AcknowledgeCheckpoints"
    if "snapshots" in body:
        raise FieldError(f"{where}: both snapshots and columns")
    snapshots = from_columns(body.pop("columns"), f"{where}.columns")
    msg: AcknowledgeCheckpoints = build(AcknowledgeCheckpoints, {**body, "snapshots": {}}, where)
    return replace(msg, snapshots=snapshots)
