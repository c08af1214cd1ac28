"""Creation and configuration of every Kafka client kstream uses.

No other module builds a ``confluent_kafka`` client. Every client's settings are,
in this order (later wins): kstream's defaults, the caller's tuning and the user's
settings (``JobConfig.kafka``, passed as ``extra``), then the few settings a guarantee
depends on (transactional id, isolation level, auto-commit, group id), which
``KafkaSettings`` refuses from the user instead of overriding them silently.

librdkafka's own log lines (a connection refused, every few seconds per client
while a broker is down) go to the Python logger ``kstream.kafka.librdkafka`` at
DEBUG: what a user needs to know arrives as errors, and kstream logs those once
per change of state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from kstream.config import ConfigError, Replication, redact
from kstream.kafka.offsets import RETRIABLE_OFFSET_ERRORS, refresh_metadata, watermark_offsets

__all__ = [
    "OFFSET_BEGINNING",
    "AdminClient",
    "Consumer",
    "KafkaError",
    "KafkaException",
    "KafkaRefused",
    "KafkaUnreachable",
    "Producer",
    "TopicPartition",
    "TopicSpec",
    "check_cluster",
    "committed_group_offsets",
    "ensure_topics",
    "is_fenced",
    "kafka_error",
    "make_admin",
    "make_consumer",
    "make_producer",
    "max_message_bytes",
    "partition_counts",
    "produce_with_retry",
    "watermark_offsets",
]


@dataclass(frozen=True)
class TopicSpec:
    """A topic kstream may create: name, partitions, topic-level configs.

    ``exact_partitions``: an existing topic with another partition count is a
    conflict (the plan depends on it). A ``cleanup.policy`` in ``config`` must
    also be the existing topic's. Replication comes from the job
    (``ensure_topics(..., replication=)``; by default the cluster's).
    """

    name: str
    partitions: int = 1
    config: Mapping[str, str] | None = None
    exact_partitions: bool = False


class KafkaUnreachable(RuntimeError):
    """The cluster did not answer, or refused our credentials; the message says which."""


class KafkaRefused(KafkaUnreachable):
    """The cluster refused our credentials (SASL, TLS): asking again cannot help."""


_librdkafka_log = logging.getLogger("kstream.kafka.librdkafka")


class _LibrdkafkaLog:
    """librdkafka's log lines, forwarded to ``kstream.kafka.librdkafka`` at DEBUG."""

    def log(self, _level: int, msg: str, *args: object) -> None:
        _librdkafka_log.debug(msg, *args)


_LOG = _LibrdkafkaLog()
_C = TypeVar("_C")


_FENCED_CODES = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)


_FULL_WAIT_S = 0.05


def kafka_error(e: KafkaException) -> KafkaError | None:
    """The ``KafkaError`` a ``KafkaException`` carries, if any."""
    err = e.args[0] if e.args else None
    return err if isinstance(err, KafkaError) else None


def is_fenced(e: KafkaException | KafkaError) -> bool:
    """Whether a transactional producer's error means a newer producer with the same
    ``transactional.id`` took over (this one must stop; retrying cannot help)."""
    err = kafka_error(e) if isinstance(e, KafkaException) else e
    return err is not None and err.code() in _FENCED_CODES


def produce_with_retry(
    producer: Producer,
    topic: str,
    value: Any,
    key: Any = None,
    *,
    full: bool = False,
    **kwargs: Any,
) -> None:
    """Queue one record; while the producer's local queue is full, serve its deliveries
    and retry (never drop). A hot loop calls ``producer.produce`` directly and, on
    ``BufferError``, this with ``full=True`` (its queue was just found full)."""
    if full:
        producer.poll(_FULL_WAIT_S)
    while True:
        try:
            producer.produce(topic, value, key, **kwargs)
            return
        except BufferError:
            producer.poll(_FULL_WAIT_S)  # local queue full: let deliveries drain it


def _base(bootstrap: str, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": _LOG}
    if extra:
        conf.update(extra)
    return conf


def _create(kind: Callable[[dict[str, Any]], _C], conf: dict[str, Any]) -> _C:
    """``kind(conf)``; a setting librdkafka rejects is a ConfigError (secrets masked)."""
    try:
        return kind(conf)
    except (KafkaException, ValueError, TypeError) as e:
        err = e.args[0] if e.args else e
        text = err.str() if isinstance(err, KafkaError) else str(err)
        raise ConfigError(f"Kafka client settings rejected: {redact(text, conf)}") from None


def make_producer(
    bootstrap: str,
    *,
    transactional_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Producer:
    """A producer; idempotent always, transactional when ``transactional_id`` is given.

    The caller of a transactional producer must call ``init_transactions`` — that
    call is what fences a previous owner of the same id.
    """
    conf = _base(bootstrap, {"linger.ms": 5, **(extra or {})})
    # Every producer carries a guarantee (exactly-once, at-least-once, control
    # messages): acknowledged by all in-sync replicas, no duplicates on retry.
    conf["enable.idempotence"] = True
    conf["acks"] = "all"
    if transactional_id is not None:
        conf["transactional.id"] = transactional_id  # fixed: fencing depends on it
    return _create(Producer, conf)


def init_transactions(producer: Producer, timeout: float) -> None:
    """``producer.init_transactions`` (fencing older owners of its id), without
    librdkafka's start-up stall.

    Asked right after start, the first metadata answer replaces the bootstrap
    connection by the broker's own one; a transaction-coordinator lookup in that gap
    finds no usable broker and is retried only 500 ms later. A second metadata
    request returns once the broker's own connection is up, so the lookup succeeds
    at once.
    """
    producer.list_topics(timeout=timeout)
    producer.list_topics(timeout=timeout)
    producer.init_transactions(timeout)


def make_consumer(
    bootstrap: str,
    group_id: str,
    *,
    read_committed: bool = True,
    auto_commit: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> Consumer:
    """A consumer in ``group_id``; ``read_committed`` by default (transactional output)."""
    conf = _base(
        bootstrap,
        {"auto.offset.reset": "earliest", "enable.partition.eof": False, **(extra or {})},
    )
    conf["group.id"] = group_id
    conf["enable.auto.commit"] = auto_commit
    conf["isolation.level"] = "read_committed" if read_committed else "read_uncommitted"
    return _create(Consumer, conf)


def consume_available(consumer: Consumer, max_messages: int, timeout: float) -> list[Any]:
    """Up to ``max_messages`` messages: what is queued now, or else the first to arrive
    within ``timeout`` s with whatever came along with it.

    librdkafka's ``consume(n, timeout)`` returns only once ``n`` messages are there or
    the timeout has passed: a reader asking for a batch with a timeout waits out the
    timeout whenever fewer arrive (the coordinator saw each acknowledgement 27 ms late
    on average with 50 ms polls; benchmarks/PROFILE.md, fifteenth round). Only an
    empty queue is waited for, and only until its first message (or event); with a
    timeout of 0 that is one ``poll(0)``.
    """
    msgs: list[Any] = consumer.consume(max_messages, 0)
    if msgs:
        return msgs
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(max_messages - 1, 0)] if max_messages > 1 else [first]


def make_admin(bootstrap: str, extra: Mapping[str, Any] | None = None) -> AdminClient:
    """An admin client."""
    return _create(AdminClient, _base(bootstrap, extra))


# Errors after which asking again cannot help: the cluster refused who we are.
_REFUSED = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }
)


def check_cluster(
    bootstrap: str, extra: Mapping[str, Any] | None = None, timeout: float = 10.0
) -> None:
    """Return once the cluster at ``bootstrap`` answers a metadata request.

    Raises KafkaUnreachable with one line naming the address, what was tried and
    the last connection error: at once when the cluster refuses our credentials
    (SASL or TLS: asking again cannot help), else after ``timeout`` seconds.
    Secret settings never appear in the message.
    """
    errors: list[KafkaError] = []
    admin = make_admin(bootstrap, {**(extra or {}), "error_cb": errors.append})
    deadline = time.monotonic() + timeout
    protocol = (extra or {}).get("security.protocol", "PLAINTEXT")
    while True:
        try:
            admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            return
        except KafkaException as e:
            errors.append(e.args[0])
        admin.poll(0)  # serves error_cb
        refused = [e for e in errors if e.code() in _REFUSED]
        if refused:
            raise KafkaRefused(
                f"Kafka at {bootstrap} refused the connection ({protocol}): "
                f"{redact(refused[-1].str(), extra or {})}"
            )
        if time.monotonic() >= deadline:
            # The most telling error: one naming what was tried (a refused connect, an
            # unknown host) rather than "all brokers down" or a timeout.
            vague = (KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN)
            last = next(
                (e for e in reversed(errors) if e.code() not in vague),
                errors[-1] if errors else None,
            )
            detail = redact(last.str(), extra or {}) if last is not None else "no answer"
            raise KafkaUnreachable(
                f"cannot reach Kafka at {bootstrap}: no metadata answer within {timeout:g}s "
                f"({protocol}; last error: {detail})"
            )


def partition_counts(
    admin: AdminClient, topics: Iterable[str], timeout: float = 10.0
) -> dict[str, int]:
    """Partition count of each existing topic among ``topics`` (absent topics are omitted)."""
    md = admin.list_topics(timeout=timeout)
    out: dict[str, int] = {}
    for name in topics:
        t = md.topics.get(name)
        if t is not None and t.error is None:
            out[name] = len(t.partitions)
    return out


def ensure_topics(
    admin: AdminClient,
    specs: Iterable[TopicSpec],
    timeout: float = 30.0,
    *,
    replication: Replication | None = None,
) -> None:
    """Create the topics that do not exist yet and wait until their metadata is visible.

    New topics get ``replication`` (default: the cluster's replication factor and
    min.insync.replicas). An existing topic that conflicts with its spec (partition
    count, cleanup policy) is a ConfigError naming the topic and the conflict,
    raised before anything is created.
    """
    specs = list(specs)
    replication = replication or Replication()
    existing = partition_counts(admin, [s.name for s in specs])
    conflicts = topic_conflicts(admin, [s for s in specs if s.name in existing], existing)
    if conflicts:
        raise ConfigError(
            "existing topics conflict with what the job needs: "
            + "; ".join(conflicts)
            + ". Fix or delete these topics, or use another app id"
        )
    missing = [s for s in specs if s.name not in existing]
    if missing:
        futures = admin.create_topics(
            [
                NewTopic(
                    s.name,
                    num_partitions=s.partitions,
                    replication_factor=replication.factor,
                    config={**replication.topic_config(), **(s.config or {})},
                )
                for s in missing
            ],
            operation_timeout=timeout,
        )
        for fut in futures.values():
            try:
                fut.result()
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
    # Wait until every partition has a leader: a producer or a watermark query on a
    # partition whose leader is not elected yet fails (NOT_LEADER_FOR_PARTITION).
    deadline = time.monotonic() + timeout
    names = [s.name for s in specs]
    while True:
        not_ready = _without_leader(admin, names)
        if not not_ready:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics without a leader after {timeout}s: {not_ready}")
        time.sleep(0.1)


def topic_conflicts(
    admin: AdminClient, specs: list[TopicSpec], partitions: Mapping[str, int]
) -> list[str]:
    """One line per conflict between an existing topic and its spec.

    ``partitions``: the existing topics' partition counts. Checked: the partition
    count where the spec requires it, and the cleanup policy where the spec sets one.
    """
    out = [
        f"{s.name} has {partitions[s.name]} partitions, the job needs {s.partitions}"
        for s in specs
        if s.exact_partitions and partitions[s.name] != s.partitions
    ]
    policed = [s for s in specs if s.config and "cleanup.policy" in s.config]
    if not policed:
        return out
    have = _cleanup_policies(admin, [s.name for s in policed])
    for s in policed:
        assert s.config is not None
        want = _policy(s.config["cleanup.policy"])
        if have[s.name] != want:
            out.append(
                f"{s.name} has cleanup.policy={','.join(sorted(have[s.name]))}, "
                f"the job needs {','.join(sorted(want))}"
            )
    return out


def _cleanup_policies(
    admin: AdminClient, names: list[str], timeout: float = 30.0, request_timeout: float = 5.0
) -> dict[str, frozenset[str]]:
    """Each topic's cleanup.policy. A topic another process has just created may not be
    known to the broker asked yet (UNKNOWN_TOPIC_OR_PART), and the broker asked may be
    down (a request that times out): asked again until ``timeout``, then
    KafkaUnreachable."""
    out: dict[str, frozenset[str]] = {}
    deadline = time.monotonic() + timeout
    while True:
        pending = [n for n in names if n not in out]
        futures = admin.describe_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, n) for n in pending],
            request_timeout=request_timeout,
        )
        for res, fut in futures.items():
            try:
                entry = fut.result(timeout=request_timeout + 5).get("cleanup.policy")
            except (KafkaException, TimeoutError) as e:
                retriable = isinstance(e, TimeoutError) or (
                    e.args[0].code() in RETRIABLE_OFFSET_ERRORS
                )
                if not retriable:
                    raise
                if time.monotonic() > deadline:
                    raise KafkaUnreachable(
                        f"the cleanup.policy of topic {res.name} could not be read within "
                        f"{timeout:g}s ({e or 'no answer'}): are the brokers up?"
                    ) from e
                refresh_metadata(admin, request_timeout)  # the controller asked may be down
                continue
            out[res.name] = _policy(entry.value if entry is not None and entry.value else "delete")
        if len(out) == len(names):
            return out
        time.sleep(0.2)


def _policy(value: str) -> frozenset[str]:
    return frozenset(p.strip() for p in value.split(",") if p.strip())


def _without_leader(admin: AdminClient, names: list[str]) -> list[str]:
    """Those of ``names`` that do not exist yet or have a partition without a leader."""
    md = admin.list_topics(timeout=10.0)
    out = []
    for name in names:
        t = md.topics.get(name)
        if (
            t is None
            or t.error is not None
            or not t.partitions
            or any(p.leader < 0 for p in t.partitions.values())
        ):
            out.append(name)
    return out


def delete_records_before(admin: AdminClient, offsets: Mapping[tuple[str, int], int]) -> None:
    """Delete the records below ``offsets`` (per topic-partition); failures raise KafkaException."""
    wanted = [TopicPartition(t, p, o) for (t, p), o in offsets.items() if o > 0]
    if not wanted:
        return
    for fut in admin.delete_records(wanted, operation_timeout=10.0).values():
        fut.result()


def committed_group_offsets(
    admin: AdminClient, group: str, timeout: float = 10.0
) -> dict[tuple[str, int], int]:
    """Every offset ``group`` has committed, by (topic, partition) (empty: none)."""
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=timeout
    )
    result = futures[group].result(timeout)
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in (result.topic_partitions or [])
        if tp.offset is not None and tp.offset >= 0
    }


def max_message_bytes(
    admin: AdminClient, topics: Iterable[str], timeout: float = 10.0
) -> int | None:
    """The largest ``max.message.bytes`` (in force, default or set) among existing
    ``topics``; None if none of them exists or the broker does not say."""
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in sorted(set(topics))]
    if not resources:
        return None
    best: int | None = None
    for fut in admin.describe_configs(resources, request_timeout=timeout).values():
        try:
            entries = fut.result()
        except KafkaException:
            continue  # an absent topic: it holds no records to dead-letter
        entry = entries.get("max.message.bytes")
        if entry is not None and entry.value is not None and str(entry.value).isdigit():
            best = max(best or 0, int(entry.value))
    return best
