"""`kstream dev kafka`: a local Kafka broker, or a cluster of several (``--brokers``).

``kstream dev kafka start`` records the running broker in a state directory
(``broker.json`` and a one-line ``bootstrap`` file); the other ``dev`` commands use
that address unless ``--bootstrap`` / ``KSTREAM_BOOTSTRAP`` says otherwise.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import click

from kstream.cli.common import DEV_STATE_DIR
from kstream.cli.dev.servers import (
    already_running,
    pids_text,
    run_in_foreground,
    start_and_record,
    state_dir_option,
    stop_and_status,
)
from kstream.dev.localbroker import BrokerRecord, LocalBroker
from kstream.dev.localcluster import LocalCluster

kafka_state_dir = state_dir_option(
    DEV_STATE_DIR,
    "KSTREAM_DEV_STATE_DIR",
    "Where the local broker keeps its data, log, pid and bootstrap address.",
)


@click.group()
def kafka() -> None:
    """Run a real single-node Apache Kafka broker (KRaft) on this machine.

    Needs Java 17+. Jars come from $KAFKA_HOME/libs, else are downloaded once from
    Maven Central with `mvn` into $XDG_CACHE_HOME/kstream (default ~/.cache).
    """


@kafka.command("start")
@kafka_state_dir
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
    `--bootstrap "$(cat .kstream/kafka/bootstrap)"`. Data and ports survive a stop/start.
    """
    if already_running(BrokerRecord, state_dir):
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
        broker = LocalCluster(
            state_dir / f"cluster-{brokers}",
            size=brokers,
            heap=heap if heap != "512m" or brokers == 1 else "320m",
            start_timeout=max(timeout, 60.0 * brokers),
            sasl_users={"kstream": secrets.token_urlsafe(18)} if sasl else None,
            detach=not foreground,
        )
    record = start_and_record(broker, state_dir)
    assert isinstance(record, BrokerRecord)
    click.echo(
        f"Kafka {broker.kafka_version} running at {broker.bootstrap} ({pids_text(record)}, "
        f"log {record.log_file})",
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
    if foreground:
        run_in_foreground(broker, record, state_dir, record.log_file)


stop_and_status(kafka, BrokerRecord, "broker", kafka_state_dir)
