"""`kstream dev s3`: a local S3-compatible server (S3Proxy) for the ``s3://`` checkpoint store.

``kstream dev s3 start`` records the running server in a state directory
(``s3proxy.json`` and an ``env`` file of ``export AWS_…`` lines), so
``. .kstream/s3/env`` points any S3 client — kstream's ``--store s3://kstream/…``
included — at it.
"""

from __future__ import annotations

from pathlib import Path

import click

from kstream.cli.dev.servers import (
    already_running,
    run_in_foreground,
    start_and_record,
    state_dir_option,
    stop_and_status,
)
from kstream.dev.s3proxy import DEFAULT_BUCKET, S3Proxy, S3ProxyRecord

s3_state_dir = state_dir_option(
    Path(".kstream/s3"),
    "KSTREAM_DEV_S3_STATE_DIR",
    "Where the local S3 server keeps its buckets, log, pid and endpoint.",
)


@click.group("s3")
def s3() -> None:
    """Run a real S3-compatible server (S3Proxy, file-system backend) on this machine.

    Needs Java 17+. Jars are downloaded once from Maven Central with `mvn` into
    $XDG_CACHE_HOME/kstream (default ~/.cache). A bucket is a directory under
    STATE_DIR/data/buckets.
    """


@s3.command("start")
@s3_state_dir
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=int, default=0, show_default=True, help="0 picks a free port.")
@click.option(
    "--bucket",
    "buckets",
    multiple=True,
    default=(DEFAULT_BUCKET,),
    show_default=True,
    help="Bucket to create (repeatable).",
)
@click.option("--timeout", type=float, default=60.0, show_default=True)
@click.option("--foreground", is_flag=True, help="Run attached; stop on Ctrl-C/SIGTERM.")
def s3_start(
    state_dir: Path,
    host: str,
    port: int,
    buckets: tuple[str, ...],
    timeout: float,
    foreground: bool,
) -> None:
    """Start the server and print its endpoint (detached unless --foreground)."""
    if already_running(S3ProxyRecord, state_dir):
        return
    server = S3Proxy(
        state_dir / "data",
        host=host,
        port=port,
        buckets=buckets,
        start_timeout=timeout,
        detach=not foreground,
    )
    record = start_and_record(server, state_dir)
    click.echo(
        f"S3Proxy {server.record().version} at {server.endpoint} (pid {server.pid}, buckets "
        f"{', '.join(buckets)}, log {server.log_file}); client environment: "
        f". {state_dir / S3ProxyRecord.ENV_FILE}",
        err=True,
    )
    if foreground:
        run_in_foreground(server, record, state_dir, str(server.log_file))


stop_and_status(s3, S3ProxyRecord, "S3 server", s3_state_dir)
