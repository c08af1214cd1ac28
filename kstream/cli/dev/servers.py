"""What every `kstream dev SERVER` command group shares: the state directory where a
running server is recorded (:class:`~kstream.dev.server.ServerRecord`), ``start``
(record it, or run it in the foreground until Ctrl-C/SIGTERM), ``stop`` and ``status``.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import click

from kstream.dev.jvm import DevServerError
from kstream.dev.server import ServerRecord

Option = Callable[[Callable[..., Any]], Callable[..., Any]]


class Server(Protocol):
    """A server a ``start`` command runs: one JVM, or a cluster of them."""

    def start(self) -> str: ...

    def stop(self) -> None: ...

    def wait(self) -> int: ...

    def record(self) -> ServerRecord: ...


def state_dir_option(default: Path, envvar: str, help: str) -> Option:
    """``--state-dir``: where a server keeps its data and its record."""
    return click.option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=default,
        show_default=True,
        envvar=envvar,
        help=help,
    )


def pids_text(record: ServerRecord) -> str:
    """``pid 42`` or ``pids 42 43 44``."""
    return f"pid{'s' if len(record.pids) > 1 else ''} {' '.join(map(str, record.pids))}"


def already_running(record_type: type[ServerRecord], state_dir: Path) -> bool:
    """If ``state_dir`` records a running server: say where it is, and True."""
    existing = record_type.read(state_dir)
    if existing is None or not existing.is_running():
        return False
    click.echo(existing.address)
    click.echo(f"already running ({pids_text(existing)})", err=True)
    return True


def start_and_record(server: Server, state_dir: Path) -> ServerRecord:
    """Start ``server``, record it in ``state_dir`` and print its address."""
    try:
        server.start()
    except DevServerError as e:
        raise click.ClickException(str(e)) from e
    record = server.record()
    record.write(state_dir)
    click.echo(record.address)
    return record


def run_in_foreground(server: Server, record: ServerRecord, state_dir: Path, log_file: str) -> None:
    """Wait until ``server`` exits or Ctrl-C/SIGTERM stops it; then forget its record."""

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    name = record.KIND.name
    try:
        code = server.wait()
        click.echo(f"{name} exited with code {code}; log {log_file}", err=True)
    except KeyboardInterrupt:
        click.echo(f"stopping {name}", err=True)
    finally:
        server.stop()
        type(record).clear(state_dir)


def stop_and_status(
    group: click.Group,
    record_type: type[ServerRecord],
    noun: str,
    state_dir: Option,
) -> None:
    """Add ``stop`` and ``status`` of the server ``record_type`` records to ``group``."""

    @group.command(
        "stop",
        help=f"Stop the {noun} started with `kstream dev {group.name} start` "
        "(SIGTERM, then SIGKILL).",
    )
    @state_dir
    def stop(state_dir: Path) -> None:
        record = record_type.read(state_dir)
        if record is None:
            click.echo(f"not running (no {noun} recorded in {state_dir})")
            return
        try:
            stopped = record.stop()
        except DevServerError as e:
            record_type.clear(state_dir)  # a recorded pid now belongs to something else
            click.echo(f"not running (stale record: {e})")
            return
        record_type.clear(state_dir)
        pids = " ".join(map(str, stopped))
        click.echo(f"stopped (pid {pids})" if pids else "not running (stale record removed)")

    @group.command(
        "status",
        help=f"Say whether the local {noun} runs, with its address and "
        "pid (exit 0 running, 1 not).",
    )
    @state_dir
    def status(state_dir: Path) -> None:
        record = record_type.read(state_dir)
        if record is not None and record.is_running():
            click.echo(f"running at {record.address} ({pids_text(record)}, {record.describe()})")
            return
        click.echo("not running")
        sys.exit(1)
