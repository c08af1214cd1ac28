"""Job configuration as frozen dataclasses: defaults and validation in one place.

The CLI and environment variables map onto these; nothing else reads ``os.environ``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class CheckpointingConfig:
    """Checkpointing is a flag plus an interval, not a "streaming mode" (seed, DESIGN §9).

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
    """Bounds automatic failover: at most ``max_restarts`` within ``window`` seconds, and
    at least ``delay`` seconds between two restarts (the first one after a quiet spell
    starts at once)."""

    max_restarts: int = 10
    window: float = 600.0
    delay: float = 1.0
    restore_timeout: float = 120.0


@dataclass(frozen=True)
class StartFrom:
    """Where a job's state comes from when it first starts (job upgrades, blue/green).

    ``checkpoint``: ``ID`` (a completed checkpoint of this app) or ``APP:ID`` (of
    another app); ``savepoint``: the store path of a savepoint (``<app>/savepoints/<name>``).
    ``allow_non_restored_state``: restore even if the state has operators this
    topology no longer has (their state is dropped).
    """

    checkpoint: str | None = None
    savepoint: str | None = None
    allow_non_restored_state: bool = False

    def __post_init__(self) -> None:
        if self.checkpoint is not None and self.savepoint is not None:
            raise ConfigError("give --from-checkpoint or --from-savepoint, not both")
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
    kafka: dict[str, str] = field(default_factory=dict)  # extra librdkafka settings

    def __post_init__(self) -> None:
        if not self.app_id or any(c in self.app_id for c in " /\\:"):
            raise ConfigError(
                f"app id must be a non-empty name without spaces, '/', '\\' or ':': {self.app_id!r}"
            )
        if not self.bootstrap_servers:
            raise ConfigError("bootstrap servers must not be empty")

    @property
    def group_id(self) -> str:
        return names.group_id(self.app_id)
