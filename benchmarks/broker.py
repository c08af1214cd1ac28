"""The Kafka a benchmark command runs against: the one it is given, or a local broker it
starts for the run (``kstream.dev.localbroker``, needs Java 17+) and stops afterwards."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click

#: The commands' ``--bootstrap`` option.
bootstrap_option = click.option(
    "--bootstrap",
    envvar="KSTREAM_TEST_BOOTSTRAP",
    default=None,
    help="Kafka to use [env KSTREAM_TEST_BOOTSTRAP]; without it a local broker is started.",
)


@contextlib.contextmanager
def kafka(bootstrap: str | None, workdir: Path | None = None) -> Iterator[tuple[str, str]]:
    """``(bootstrap, what it is, for a report)``: ``bootstrap`` itself, or, when it is None,
    a local broker started for the block (in ``workdir/kafka``, else a temporary
    directory) and stopped after it."""
    if bootstrap is not None:
        yield bootstrap, f"existing broker at {bootstrap}"
        return
    from kstream.dev.localbroker import LocalBroker

    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="kstream-bench-"))
            )
        broker = stack.enter_context(LocalBroker(workdir / "kafka"))
        click.echo(f"started a local broker at {broker.bootstrap}")
        yield (
            broker.bootstrap,
            f"local broker started by the command (Kafka {broker.kafka_version})",
        )
