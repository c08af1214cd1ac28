"""`kstream dev topics create`, `produce` and `consume`: small topic tools, on the local
broker of `kstream dev kafka start` unless ``--bootstrap`` / ``KSTREAM_BOOTSTRAP`` names
another cluster."""

from __future__ import annotations

import io
import os
import stat
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import click

from kstream.cli.common import BOOTSTRAP_HELP, NO_BOOTSTRAP
from kstream.cli.dev.kafka import kafka_state_dir
from kstream.dev.localbroker import BrokerRecord
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


def bootstrap_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--bootstrap`` (env ``KSTREAM_BOOTSTRAP``); defaults to the local broker's address."""
    f = click.option(
        "--bootstrap",
        "-b",
        envvar="KSTREAM_BOOTSTRAP",
        default=None,
        metavar="HOST:PORT",
        help=BOOTSTRAP_HELP.format(more=""),
    )(f)
    return kafka_state_dir(f)


def _resolve_bootstrap(bootstrap: str | None, state_dir: Path) -> str:
    if bootstrap:
        return bootstrap
    record = BrokerRecord.read(state_dir)
    if record is None or not record.is_running():
        raise click.UsageError(f"{NO_BOOTSTRAP} (no local broker runs in {state_dir})")
    return record.bootstrap


@click.group()
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


@click.command("produce")
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


@click.command("consume")
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
