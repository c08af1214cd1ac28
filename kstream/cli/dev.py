"""`kstream dev`: developer conveniences — a local Kafka broker and small topic tools.

``kstream dev kafka start`` records the running broker in a state directory
(``broker.json`` and a one-line ``bootstrap`` file); the other ``dev`` commands
use that address unless ``--bootstrap`` / ``KSTREAM_BOOTSTRAP`` says otherwise.
"""

from __future__ import annotations

import io
import os
import secrets
import signal
import stat
import sys
import time
import uuid
from pathlib import Path
from types import FrameType
from typing import IO

import click

from kstream.cli.common import BOOTSTRAP_HELP, DEV_STATE_DIR, NO_BOOTSTRAP
from kstream.cli.devs3 import s3
from kstream.dev.localbroker import BrokerRecord, LocalBroker, LocalBrokerError, stop_pid
from kstream.dev.localcluster import LocalCluster
from kstream.kafka.clients import (
    KafkaException,
    TopicSpec,
    ensure_topics,
    make_admin,
    make_consumer,
    make_producer,
    partition_counts,
    produce_with_retry,
)
from kstream.progress import Progress

DEFAULT_STATE_DIR = DEV_STATE_DIR

state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    envvar="KSTREAM_DEV_STATE_DIR",
    help="Where the local broker keeps its data, log, pid and bootstrap address.",
)


def bootstrap_option(f: click.decorators.FC) -> click.decorators.FC:
    """``--bootstrap`` (env ``KSTREAM_BOOTSTRAP``); defaults to the local broker's address."""
    f = click.option(
        "--bootstrap",
        "-b",
        envvar="KSTREAM_BOOTSTRAP",
        default=None,
        metavar="HOST:PORT",
        help=BOOTSTRAP_HELP.format(more=""),
    )(f)
    return state_dir_option(f)


def _resolve_bootstrap(bootstrap: str | None, state_dir: Path) -> str:
    if bootstrap:
        return bootstrap
    record = BrokerRecord.read(state_dir)
    if record is None or not record.is_running():
        raise click.UsageError(f"{NO_BOOTSTRAP} (no local broker runs in {state_dir})")
    return record.bootstrap


@click.group()
def dev() -> None:
    """Developer tools: a local Kafka broker, a local S3 server and topic helpers.

    For demos and tests; not for production clusters.
    """


dev.add_command(s3)


# ---------------------------------------------------------------- kafka


@dev.group()
def kafka() -> None:
    """Run a real single-node Apache Kafka broker (KRaft) on this machine.

    Needs Java 17+. Jars come from $KAFKA_HOME/libs, else are downloaded once from
    Maven Central with `mvn` into $XDG_CACHE_HOME/kstream (default ~/.cache).
    """


@kafka.command("start")
@state_dir_option
@click.option(
    "--port", type=int, default=0, show_default=True, help="Client port; 0 picks a free one."
)
@click.option(
    "--controller-port",
    type=int,
    default=0,
    show_default=True,
    help="KRaft controller port; 0 picks a free one.",
)
@click.option("--heap", default="512m", show_default=True, help="JVM heap (-Xms/-Xmx) per broker.")
@click.option(
    "--timeout",
    type=float,
    default=90.0,
    show_default=True,
    help="Seconds to wait for the broker to answer.",
)
@click.option(
    "--foreground",
    is_flag=True,
    help="Run attached: stop the broker on Ctrl-C/SIGTERM instead of detaching.",
)
@click.option(
    "--brokers",
    type=click.IntRange(1, 9),
    default=1,
    show_default=True,
    help="Nodes of a KRaft cluster (one process each, free loopback ports; internal topics "
    "at replication factor N, min ISR N-1; --port/--controller-port are for one broker).",
)
@click.option(
    "--sasl",
    is_flag=True,
    help="Also open a SASL_PLAINTEXT (PLAIN) listener with a generated user; its client "
    "settings go to STATE_DIR/client.properties (use with --kafka-config).",
)
def kafka_start(
    state_dir: Path,
    port: int,
    controller_port: int,
    heap: str,
    timeout: float,
    foreground: bool,
    brokers: int,
    sasl: bool,
) -> None:
    """Start the broker and print its bootstrap address (detached unless --foreground).

    The address is also written to STATE_DIR/bootstrap, so scripts can use
    `--bootstrap "$(cat .kstream/kafka/bootstrap)"`. Data survives a stop/start.
    """
    existing = BrokerRecord.read(state_dir)
    if existing is not None and existing.is_running():
        click.echo(existing.bootstrap)
        click.echo(f"already running (pids {' '.join(map(str, existing.pids))})", err=True)
        return
    broker: LocalBroker | LocalCluster
    if brokers == 1 and not sasl:
        broker = LocalBroker(
            state_dir / "data",
            port=port,
            controller_port=controller_port,
            heap=heap,
            start_timeout=timeout,
            detach=not foreground,
        )
    else:
        if port or controller_port:
            raise click.UsageError(
                "--port/--controller-port pick one broker's ports: not with --brokers or --sasl"
            )
        user = "kstream"
        broker = LocalCluster(
            state_dir / f"cluster-{brokers}",
            size=brokers,
            heap=heap if heap != "512m" or brokers == 1 else "320m",
            start_timeout=max(timeout, 60.0 * brokers),
            sasl_users={user: secrets.token_urlsafe(18)} if sasl else None,
            detach=not foreground,
        )
    try:
        broker.start()
    except LocalBrokerError as e:
        raise click.ClickException(str(e)) from e
    record = broker.record()
    record.write(state_dir)
    click.echo(broker.bootstrap)
    click.echo(
        f"Kafka {broker.kafka_version} running at {broker.bootstrap} (pids "
        f"{' '.join(map(str, record.pids))}, log {record.log_file})",
        err=True,
    )
    if isinstance(broker, LocalCluster) and broker.sasl_users:
        props = state_dir / "client.properties"
        props.touch(mode=0o600)
        props.write_text(broker.client_properties("kstream"))
        click.echo(
            f"SASL_PLAINTEXT at {broker.sasl_bootstrap}; client settings in {props} "
            f"(kstream run TOPOLOGY --kafka-config {props})",
            err=True,
        )
    if not foreground:
        return

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    first = broker if isinstance(broker, LocalBroker) else broker.nodes[0]
    try:
        code = first.wait()
        click.echo(f"broker exited with code {code}; log {record.log_file}", err=True)
    except KeyboardInterrupt:
        click.echo("stopping broker", err=True)
    finally:
        broker.stop()
        BrokerRecord.clear(state_dir)


@kafka.command("stop")
@state_dir_option
def kafka_stop(state_dir: Path) -> None:
    """Stop the broker started with `kstream dev kafka start` (SIGTERM, then SIGKILL)."""
    record = BrokerRecord.read(state_dir)
    if record is None:
        click.echo(f"not running (no broker recorded in {state_dir})")
        return
    try:
        stopped = [stop_pid(pid) for pid in record.pids]
    except LocalBrokerError as e:
        BrokerRecord.clear(state_dir)  # the recorded pid now belongs to something else
        click.echo(f"not running (stale record: {e})")
        return
    BrokerRecord.clear(state_dir)
    pids = " ".join(str(p) for p, done in zip(record.pids, stopped, strict=True) if done)
    click.echo(f"stopped (pid {pids})" if pids else "not running (stale record removed)")


@kafka.command("status")
@state_dir_option
def kafka_status(state_dir: Path) -> None:
    """Say whether the local broker runs, with its address and pid (exit 0 running, 1 not)."""
    record = BrokerRecord.read(state_dir)
    if record is not None and record.is_running():
        click.echo(
            f"running at {record.bootstrap} (pid {' '.join(map(str, record.pids))}, "
            f"Kafka {record.kafka_version}, "
            f"log {record.log_file})"
        )
        return
    click.echo("not running")
    sys.exit(1)


# ---------------------------------------------------------------- topics / produce / consume


@dev.group()
def topics() -> None:
    """Create and inspect topics."""


@topics.command("create")
@click.argument("name")
@click.option("--partitions", "-p", type=int, default=1, show_default=True)
@click.option(
    "--config", "-c", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config; repeat."
)
@bootstrap_option
def topics_create(
    name: str, partitions: int, configs: tuple[str, ...], bootstrap: str | None, state_dir: Path
) -> None:
    """Create topic NAME (no-op if it exists; its partition count is printed either way)."""
    config: dict[str, str] = {}
    for item in configs:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--config")
        config[key] = value
    admin = make_admin(_resolve_bootstrap(bootstrap, state_dir))
    try:
        ensure_topics(admin, [TopicSpec(name, partitions, config or None)])
    except KafkaException as e:
        raise click.ClickException(f"creating topic {name}: {e}") from e
    click.echo(f"{name}\t{partition_counts(admin, [name])[name]} partitions")


@dev.command("produce")
@click.argument("topic")
@click.option(
    "--file",
    "-f",
    "source",
    type=click.File("r"),
    default="-",
    help="Read lines from this file instead of stdin.",
)
@click.option(
    "--key-sep",
    default=None,
    help="Split each line at the first SEP into key and value (lines without it get no key).",
)
@click.option(
    "--event-time-step",
    type=int,
    default=None,
    metavar="MS",
    help="Give record i the timestamp START + i*MS (START: --event-time-start, else now), "
    "so event time advances and windows close; default: the producer's clock.",
)
@click.option(
    "--event-time-start", type=int, default=None, metavar="MS", help="First timestamp (epoch ms)."
)
@bootstrap_option
def produce(
    topic: str,
    source: IO[str],
    key_sep: str | None,
    event_time_step: int | None,
    event_time_start: int | None,
    bootstrap: str | None,
    state_dir: Path,
) -> None:
    """Produce each line of stdin (or --file) as one record value to TOPIC."""
    start = event_time_start if event_time_start is not None else int(time.time() * 1000)
    producer = make_producer(_resolve_bootstrap(bootstrap, state_dir))
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    progress = Progress(
        f"producing to {topic}",
        items="records",
        total_bytes=_file_size(source),
        emit=lambda line: click.echo(line, err=True),
    )
    count = 0
    for raw in source:
        line = raw.rstrip("\n")
        key: str | None = None
        if key_sep is not None and key_sep in line:
            key, line = line.split(key_sep, 1)
        ts = 0 if event_time_step is None else start + count * event_time_step  # 0: now
        produce_with_retry(
            producer, topic, line.encode(), key, on_delivery=on_delivery, timestamp=ts
        )
        count += 1
        progress.advance(1, len(raw.encode()) if progress.total_bytes else 0)
    left = producer.flush(60)
    progress.finish()
    if left or errors:
        detail = errors[0] if errors else f"{left} undelivered after 60s"
        raise click.ClickException(f"producing to {topic} failed: {detail}")
    click.echo(f"produced {count} records to {topic}", err=True)


def _file_size(source: IO[str]) -> int | None:
    """Size of a regular input file (progress in bytes and an ETA), else None (a pipe)."""
    try:
        st = os.fstat(source.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) and st.st_size > 0 else None


@dev.command("consume")
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset, not the end.")
@click.option("--max", "max_records", type=int, default=None, help="Stop after N records.")
@click.option(
    "--timeout",
    type=float,
    default=None,
    help="Stop after S seconds without a new record (default: run until --max or Ctrl-C).",
)
@bootstrap_option
def consume(
    topic: str,
    from_beginning: bool,
    max_records: int | None,
    timeout: float | None,
    bootstrap: str | None,
    state_dir: Path,
) -> None:
    """Print TOPIC's committed records (read_committed) as KEY<TAB>VALUE lines.

    Uses a throw-away consumer group and commits nothing.
    """
    consumer = make_consumer(
        _resolve_bootstrap(bootstrap, state_dir),
        f"kstream-dev-consume-{uuid.uuid4().hex[:12]}",
        extra={"auto.offset.reset": "earliest" if from_beginning else "latest"},
    )
    consumer.subscribe([topic])
    seen = 0
    last = time.monotonic()
    try:
        while max_records is None or seen < max_records:
            msg = consumer.poll(0.5)
            if msg is None:
                if timeout is not None and time.monotonic() - last > timeout:
                    break
                continue
            if msg.error() is not None:
                raise click.ClickException(f"consuming {topic}: {msg.error()}")
            last = time.monotonic()
            key, value = msg.key(), msg.value()
            k = key.decode(errors="replace") if key is not None else ""
            v = value.decode(errors="replace") if value is not None else ""
            click.echo(f"{k}\t{v}")
            seen += 1
    except KeyboardInterrupt:
        pass  # Ctrl-C is the normal way to end an open-ended consume
    finally:
        consumer.close()
