"""`kstream dev s3`: a local S3-compatible server (S3Proxy) for the ``s3://`` checkpoint store.

``kstream dev s3 start`` records the running server in a state directory
(``s3proxy.json`` and an ``env`` file of ``export AWS_…`` lines), so
``. .kstream/s3/env`` points any S3 client — kstream's ``--store s3://kstream/…``
included — at it.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType

import click

from kstream.dev.s3proxy import DEFAULT_BUCKET, S3Proxy, S3ProxyError, S3ProxyRecord, stop_pid

DEFAULT_STATE_DIR = Path(".kstream/s3")

state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    envvar="KSTREAM_DEV_S3_STATE_DIR",
    help="Where the local S3 server keeps its buckets, log, pid and endpoint.",
)


@click.group("s3")
def s3() -> None:
    """Run a real S3-compatible server (S3Proxy, file-system backend) on this machine.

    Needs Java 17+. Jars are downloaded once from Maven Central with `mvn` into
    $XDG_CACHE_HOME/kstream (default ~/.cache). A bucket is a directory under
    STATE_DIR/data/buckets.
    """


@s3.command("start")
@state_dir_option
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
    existing = S3ProxyRecord.read(state_dir)
    if existing is not None and existing.is_running():
        click.echo(existing.endpoint)
        click.echo(f"already running (pid {existing.pid})", err=True)
        return
    server = S3Proxy(
        state_dir / "data",
        host=host,
        port=port,
        buckets=buckets,
        start_timeout=timeout,
        detach=not foreground,
    )
    try:
        server.start()
    except S3ProxyError as e:
        raise click.ClickException(str(e)) from e
    record = server.record()
    record.write(state_dir)
    click.echo(server.endpoint)
    click.echo(
        f"S3Proxy {record.version} at {server.endpoint} (pid {record.pid}, buckets "
        f"{', '.join(buckets)}, log {server.log_file}); client environment: "
        f". {state_dir / S3ProxyRecord.ENV_FILE}",
        err=True,
    )
    if not foreground:
        return

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        code = server.wait()
        click.echo(f"S3Proxy exited with code {code}; log {server.log_file}", err=True)
    except KeyboardInterrupt:
        click.echo("stopping S3Proxy", err=True)
    finally:
        server.stop()
        S3ProxyRecord.clear(state_dir)


@s3.command("stop")
@state_dir_option
def s3_stop(state_dir: Path) -> None:
    """Stop the server started with `kstream dev s3 start` (SIGTERM, then SIGKILL)."""
    record = S3ProxyRecord.read(state_dir)
    if record is None:
        click.echo(f"not running (no S3 server recorded in {state_dir})")
        return
    try:
        stopped = stop_pid(record.pid)
    except S3ProxyError as e:
        S3ProxyRecord.clear(state_dir)
        click.echo(f"not running (stale record: {e})")
        return
    S3ProxyRecord.clear(state_dir)
    click.echo(f"stopped (pid {record.pid})" if stopped else "not running (stale record removed)")


@s3.command("status")
@state_dir_option
def s3_status(state_dir: Path) -> None:
    """Say whether the local S3 server runs, with endpoint and pid (exit 0 running, 1 not)."""
    record = S3ProxyRecord.read(state_dir)
    if record is not None and record.is_running():
        click.echo(
            f"running at {record.endpoint} (pid {record.pid}, S3Proxy {record.version}, "
            f"bucket {record.bucket}, log {record.log_file})"
        )
        return
    click.echo("not running")
    sys.exit(1)
