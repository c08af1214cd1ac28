"""Job configuration as frozen dataclasses: defaults and validation in one place.

The CLI and environment variables map onto these; nothing else reads ``os.environ``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from kstream import names


class ConfigError(ValueError):
    """A configuration value is invalid; the message says which and why."""


class Guarantee(StrEnum):
    """Delivery guarantee of a sink."""

    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


class OnBadRecord(StrEnum):
    """What a source does with a record its serde cannot decode."""

    DEAD_LETTER = "dead_letter"  # send to <app>.dlq with the reason, keep going
    FAIL = "fail"  # stop the job with the record's topic/partition/offset


class OnError(StrEnum):
    """What a task does when a user function (map, filter, flat_map, key_by) raises."""

    FAIL = "fail"  # the task fails and the job rolls back (the restart strategy retries)
    DEAD_LETTER = "dead_letter"  # the record goes to <app>.dlq with the operator and error


@dataclass(frozen=True)
class CheckpointingConfig:
    """Checkpointing is a flag plus an interval, not a "streaming mode" (seed, docs/design.md §9).

    Times are in seconds. With ``enabled=False`` no coordinator is needed: workers
    run on committed group offsets and restart wherever the sources are.
    """

    enabled: bool = True
    interval: float = 5.0
    timeout: float = 60.0
    min_pause: float = 0.0
    max_concurrent: int = 1
    tolerable_failures: int = 3
    guarantee: Guarantee | None = None  # for sinks that declare none; None: the topology's
    retained: int = 3

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ConfigError(f"checkpointing.interval must be > 0, got {self.interval}")
        if self.timeout <= 0:
            raise ConfigError(f"checkpointing.timeout must be > 0, got {self.timeout}")
        if self.min_pause < 0:
            raise ConfigError(f"checkpointing.min_pause must be >= 0, got {self.min_pause}")
        if self.max_concurrent < 1:
            raise ConfigError(
                f"checkpointing.max_concurrent must be >= 1, got {self.max_concurrent}"
            )
        if self.tolerable_failures < 0:
            raise ConfigError(
                f"checkpointing.tolerable_failures must be >= 0, got {self.tolerable_failures}"
            )
        if self.retained < 1:
            raise ConfigError(f"checkpointing.retained must be >= 1, got {self.retained}")


@dataclass(frozen=True)
class RestartStrategy:
    """Bounds and spaces automatic failover.

    **Exponential delay** (default, ``max_restarts=None``; Flink's default since 1.19):
    the job restarts for ever; the first restart after a quiet period starts at once,
    each further one waits ``delay`` (1 s), then ``multiplier`` times the previous wait,
    at most ``max_delay`` (60 s), counted from the previous restart; ``reset_after``
    seconds without a restart make the next one immediate again.

    **Fixed count** (``max_restarts=N``): at most N restarts within ``window`` seconds,
    then the job fails; restarts at least ``delay`` apart (the first one after a quiet
    spell at once).

    A restore not finished within ``restore_timeout`` of its start or of its last
    progress (a worker heartbeat saying it restored more tasks) counts as a failure.
    """

    max_restarts: int | None = None
    window: float = 600.0
    delay: float = 1.0
    restore_timeout: float = 120.0
    max_delay: float = 60.0
    multiplier: float = 2.0
    reset_after: float = 600.0

    def __post_init__(self) -> None:
        if self.max_restarts is not None and self.max_restarts < 0:
            raise ConfigError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.delay < 0 or self.max_delay < self.delay:
            raise ConfigError(
                f"restart delays must satisfy 0 <= delay <= max_delay, got {self.delay}, "
                f"{self.max_delay}"
            )
        if self.multiplier < 1:
            raise ConfigError(f"restart multiplier must be >= 1, got {self.multiplier}")
        if self.window <= 0 or self.reset_after <= 0 or self.restore_timeout <= 0:
            raise ConfigError("restart window, reset_after and restore_timeout must be > 0")

    @property
    def exponential(self) -> bool:
        """Exponential delay (no ``max_restarts``) rather than fixed count."""
        return self.max_restarts is None


# Client settings kstream sets itself because a guarantee depends on them. A user
# setting among these is refused (never silently overridden); the value says why.
OWNED_SETTINGS: Mapping[str, str] = {
    "bootstrap.servers": "give the brokers with --bootstrap (or KSTREAM_BOOTSTRAP)",
    "metadata.broker.list": "give the brokers with --bootstrap (or KSTREAM_BOOTSTRAP)",
    "group.id": "the consumer group is the app id (--app-id)",
    "transactional.id": "kstream gives the coordinator and each exactly-once sink task one "
    "fixed transactional id; fencing depends on it",
    "isolation.level": "kstream reads read_committed wherever exactly-once depends on it",
    "enable.auto.commit": "source offsets are part of kstream's checkpoints (or committed by "
    "kstream after the output is flushed)",
    "enable.auto.offset.store": "source offsets are part of kstream's checkpoints",
    "auto.offset.reset": "kstream positions every consumer itself",
    "enable.partition.eof": "kstream's control and marker readers depend on it",
    "delivery.report.only.error": "kstream's sinks choose which delivery reports they need",
    "enable.idempotence": "producers that carry a guarantee are idempotent (only 'true' is "
    "accepted)",
    "acks": "producers that carry a guarantee use acks=all (only 'all' or '-1' is accepted)",
    "request.required.acks": "producers that carry a guarantee use acks=all (only 'all' or '-1' "
    "is accepted)",
    "partition.assignment.strategy": "a task needs the same partition of each of its inputs: "
    "'range' (the default), or 'cooperative-sticky' for a job without a key_by that reads one "
    "topic (docs/operations.md)",
}
# Owned settings a user may repeat with exactly kstream's own value.
_OWNED_ALLOWED: Mapping[str, frozenset[str]] = {
    "enable.idempotence": frozenset({"true"}),
    "acks": frozenset({"all", "-1"}),
    "request.required.acks": frozenset({"all", "-1"}),
    "partition.assignment.strategy": frozenset({"range", "cooperative-sticky"}),
}
_SECRET_MARKS = (
    "password",
    "secret",
    "jaas",
    "key.pem",
    "token",
    "credential",
    "oauthbearer.config",
    "user.info",  # schema.registry.basic.auth.user.info (user:password)
)
MASK = "***"
REGISTRY_PREFIX = "schema.registry."


def is_secret(name: str) -> bool:
    """Whether the client setting ``name`` holds a secret (never logged, printed or shown)."""
    name = name.lower()
    return any(mark in name for mark in _SECRET_MARKS)


class KafkaSettings(Mapping[str, str]):
    """The user's librdkafka client settings, applied to every client a job creates.

    Immutable. Refuses the settings kstream owns (``OWNED_SETTINGS``) with the
    reason, naming where each came from (``origins``: name -> "-X", a file, ...).
    Its ``repr`` masks secret values, so a logged or printed config shows no secret.
    Settings named ``schema.registry.*`` are the Schema Registry client's: kept apart in
    ``registry`` (never given to librdkafka; see ``kstream.serde.registry``).
    """

    __slots__ = ("_items", "_origins", "_registry")

    def __init__(
        self,
        items: Mapping[str, object] | None = None,
        origins: Mapping[str, str] | None = None,
    ) -> None:
        values = {str(k).strip(): _setting_value(v) for k, v in (items or {}).items()}
        origins = dict(origins or {})
        for name, value in values.items():
            if not name:
                raise ConfigError("a Kafka client setting has an empty name")
            reason = OWNED_SETTINGS.get(name)
            if reason is None or value.lower() in _OWNED_ALLOWED.get(name, frozenset()):
                continue
            where = f" (from {origins[name]})" if name in origins else ""
            raise ConfigError(f"Kafka client setting {name}{where} is set by kstream: {reason}")
        self._registry = {k: v for k, v in values.items() if k.startswith(REGISTRY_PREFIX)}
        self._items = {k: v for k, v in values.items() if not k.startswith(REGISTRY_PREFIX)}
        self._origins = {k: v for k, v in origins.items() if k in values}

    @property
    def registry(self) -> dict[str, str]:
        """The ``schema.registry.*`` settings (the Schema Registry client's)."""
        return dict(self._registry)

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._items.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._items) == dict(other)

    def __repr__(self) -> str:
        return f"KafkaSettings({self.masked()!r})"

    def masked(self) -> dict[str, str]:
        """The settings with every secret value replaced by ``***``."""
        both = {**self._items, **self._registry}
        return {k: (MASK if is_secret(k) else v) for k, v in both.items()}

    def origin(self, name: str) -> str | None:
        """Where setting ``name`` came from (``-X``, the environment, a file), if known."""
        return self._origins.get(name)

    def redact(self, text: str) -> str:
        """``text`` with every secret value of these settings replaced by ``***``."""
        return redact(text, {**self._items, **self._registry})


def redact(text: str, settings: Mapping[str, object]) -> str:
    """``text`` with the value of every secret setting in ``settings`` replaced by ``***``."""
    for name, value in settings.items():
        if isinstance(value, str) and value and is_secret(name):
            text = text.replace(value, MASK)
    return text


def _setting_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class Replication:
    """Replication of the topics kstream creates.

    ``factor=-1`` and ``min_insync_replicas=None`` take the cluster's defaults
    (``default.replication.factor``, ``min.insync.replicas``).
    """

    factor: int = -1
    min_insync_replicas: int | None = None

    def __post_init__(self) -> None:
        if self.factor == 0 or self.factor < -1:
            raise ConfigError(
                f"replication factor must be >= 1 (or -1: the cluster's default), got {self.factor}"
            )
        if self.min_insync_replicas is not None:
            if self.min_insync_replicas < 1:
                raise ConfigError(
                    f"min.insync.replicas must be >= 1, got {self.min_insync_replicas}"
                )
            if self.factor != -1 and self.min_insync_replicas > self.factor:
                raise ConfigError(
                    f"min.insync.replicas ({self.min_insync_replicas}) exceeds the replication "
                    f"factor ({self.factor}): no write could ever succeed"
                )

    def topic_config(self) -> dict[str, str]:
        """Topic-level configs these choices add to a topic kstream creates."""
        if self.min_insync_replicas is None:
            return {}
        return {"min.insync.replicas": str(self.min_insync_replicas)}


def parse_instant(text: str) -> int:
    """``text`` as epoch milliseconds: digits are milliseconds, else ISO 8601 (UTC when it
    names no offset); ConfigError otherwise."""
    if text.strip().isdigit():
        return int(text)
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"{text!r} is not a time: give epoch milliseconds or ISO 8601 "
            "(e.g. 2026-12-04T18:00:00Z)"
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


@dataclass(frozen=True)
class StartFrom:
    """Where a job's state comes from when it first starts (job upgrades, blue/green).

    ``checkpoint``: ``ID`` (a completed checkpoint of this app) or ``APP:ID`` (of
    another app); ``savepoint``: the store path of a savepoint (``<app>/savepoints/<name>``).
    ``allow_non_restored_state``: restore even if the state has operators this
    topology no longer has (their state is dropped). ``new_partitions_from``: where the
    partitions a source topic gained read from when the state is rescaled (epoch ms of
    the records' Kafka timestamps; ``None``: from the beginning).
    """

    checkpoint: str | None = None
    savepoint: str | None = None
    allow_non_restored_state: bool = False
    new_partitions_from: int | None = None

    def __post_init__(self) -> None:
        if self.checkpoint is not None and self.savepoint is not None:
            raise ConfigError("give --from-checkpoint or --from-savepoint, not both")
        if self.new_partitions_from is not None and not self.given:
            raise ConfigError(
                "--new-partitions-from applies to a rescaled state: give --from-savepoint "
                "(or --from-checkpoint) too"
            )
        if self.checkpoint is not None:
            _app, _, n = self.checkpoint.rpartition(":")
            if not n.isdigit():
                raise ConfigError(
                    f"--from-checkpoint takes ID or APP:ID (a checkpoint number), got "
                    f"{self.checkpoint!r}"
                )

    @property
    def given(self) -> bool:
        return self.checkpoint is not None or self.savepoint is not None


@dataclass(frozen=True)
class JobConfig:
    """Everything one deployed job (one app id) needs to run."""

    app_id: str
    bootstrap_servers: str
    store_url: str = "file://./.kstream/checkpoints"
    state_dir: str = "./.kstream/state"
    checkpointing: CheckpointingConfig = field(default_factory=CheckpointingConfig)
    restart: RestartStrategy = field(default_factory=RestartStrategy)
    on_bad_record: OnBadRecord = OnBadRecord.DEAD_LETTER
    bounded: bool = False
    start: StartFrom = field(default_factory=StartFrom)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)  # the user's client settings
    replication: Replication = field(default_factory=Replication)
    # Seconds the brokers may stay unreachable (a full outage) before the job fails;
    # shorter outages are retried with backoff and the job resumes by itself.
    max_outage: float = 300.0
    store_options: dict[str, str] = field(default_factory=dict)  # --store-option key=value
    # Bytes of output the exactly-once sink tasks of one worker process hold in memory
    # together until their checkpoints complete, before the growing one spills to local
    # disk in its task's state directory (--sink-buffer-memory).
    sink_buffer_memory: int = 64 * 1024 * 1024
    # Bytes of RocksDB block cache and memtables of all the tasks of one worker process
    # together (--state-memory; kstream.state.rocksdb_resources).
    state_memory: int = 256 * 1024 * 1024

    def __post_init__(self) -> None:
        if not isinstance(self.kafka, KafkaSettings):
            object.__setattr__(self, "kafka", KafkaSettings(self.kafka))
        if self.max_outage <= 0:
            raise ConfigError(f"max outage must be > 0 seconds, got {self.max_outage}")
        if self.sink_buffer_memory <= 0:
            raise ConfigError(
                f"sink buffer memory must be > 0 bytes, got {self.sink_buffer_memory}"
            )
        if self.state_memory <= 0:
            raise ConfigError(f"state memory must be > 0 bytes, got {self.state_memory}")
        if not self.app_id or any(c in self.app_id for c in " /\\:"):
            raise ConfigError(
                f"app id must be a non-empty name without spaces, '/', '\\' or ':': {self.app_id!r}"
            )
        if not self.bootstrap_servers:
            raise ConfigError("bootstrap servers must not be empty")

    @property
    def group_id(self) -> str:
        return names.group_id(self.app_id)

    @property
    def cooperative(self) -> bool:
        """Whether the workers' group assigns cooperatively (``-X
        partition.assignment.strategy=cooperative-sticky``): a rebalance moves only the
        partitions that change owner, and a crashed worker's tasks are adopted by their
        new owners while the others run on (docs/design.md §6.8)."""
        return self.kafka.get("partition.assignment.strategy") == "cooperative-sticky"
