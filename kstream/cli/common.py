"""The options every command spells the same way: the app id, the bootstrap servers and
the checkpoint store (tests/test_cli_grammar.py walks every command's ``--help``).

* ``--app-id APP`` (env ``KSTREAM_APP_ID``). Commands that once took the app id as an
  argument (``kstream status APP``) still accept it, with a deprecation note.
* ``--bootstrap/-b HOST:PORT`` (env ``KSTREAM_BOOTSTRAP``); without it the local broker
  of ``kstream dev kafka start`` when it runs (``kstream run`` starts it if not).
* ``--store URL`` (env ``KSTREAM_STORE_URL``) and ``--store-option KEY=VALUE``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kstream.dev.localbroker import BrokerRecord

F = Callable[..., Any]

DEV_STATE_DIR = Path(".kstream/kafka")  # where `kstream dev kafka start` records its broker
DEFAULT_STORE = "file://./.kstream/checkpoints"

BOOTSTRAP_HELP = (
    "Kafka bootstrap servers [env KSTREAM_BOOTSTRAP; else the local broker of "
    "`kstream dev kafka start`{more}]."
)


def dev_state_dir() -> Path:
    """The local broker's state directory (``KSTREAM_DEV_STATE_DIR``, as ``kstream dev``)."""
    return Path(os.environ.get("KSTREAM_DEV_STATE_DIR") or DEV_STATE_DIR)


def bootstrap_option(more: str = "") -> Callable[[F], F]:
    """``--bootstrap/-b`` (env ``KSTREAM_BOOTSTRAP``), resolved by :func:`resolve_bootstrap`."""
    return click.option(
        "--bootstrap",
        "-b",
        envvar="KSTREAM_BOOTSTRAP",
        default=None,
        metavar="HOST:PORT",
        help=BOOTSTRAP_HELP.format(more=more),
    )


def local_bootstrap() -> str | None:
    """The address of the running local dev broker, None if none runs."""
    record = BrokerRecord.read(dev_state_dir())
    return record.bootstrap if record is not None and record.is_running() else None


NO_BOOTSTRAP = (
    "no bootstrap servers: give --bootstrap HOST:PORT (or set KSTREAM_BOOTSTRAP), or start "
    "a local broker with `kstream dev kafka start`"
)


def resolve_bootstrap(bootstrap: str | None) -> str:
    """``bootstrap`` if given, else the running local dev broker's; a usage error naming
    both ways otherwise."""
    found = bootstrap or local_bootstrap()
    if not found:
        raise click.UsageError(NO_BOOTSTRAP)
    return found


def app_id_option(help: str = "The job's app id.") -> Callable[[F], F]:
    """``--app-id APP`` (env ``KSTREAM_APP_ID``)."""
    return click.option("--app-id", envvar="KSTREAM_APP_ID", default=None, metavar="APP", help=help)


def app_argument(f: F) -> F:
    """The deprecated positional spelling ``APP`` (kept for scripts); see :func:`app_id_of`."""
    return click.argument("app", required=False, metavar="[APP]")(f)


def app_id_of(app_id: str | None, app: str | None) -> str:
    """The app id from ``--app-id`` or the deprecated positional ``APP`` (which says so on
    stderr); a usage error when neither or two different ones are given."""
    if app is not None:
        click.echo(f"kstream: the argument APP is deprecated: use --app-id {app}", err=True)
        if app_id is not None and app_id != app:
            raise click.UsageError(f"two app ids: --app-id {app_id} and argument {app}")
        return app
    if app_id is None:
        raise click.UsageError("give the job's app id: --app-id APP (or set KSTREAM_APP_ID)")
    return app_id


def store_option(f: F) -> F:
    """``--store URL`` (env ``KSTREAM_STORE_URL``)."""
    return click.option(
        "--store",
        "store_url",
        envvar="KSTREAM_STORE_URL",
        default=DEFAULT_STORE,
        show_default=True,
        help="Checkpoint store URL: s3://BUCKET/PREFIX (also gs://, az://) or file://DIR "
        "[env KSTREAM_STORE_URL].",
    )(f)


def store_options_option(f: F) -> F:
    """``--store-option KEY=VALUE`` (repeatable)."""
    return click.option(
        "--store-option",
        "store_options",
        multiple=True,
        metavar="KEY=VALUE",
        help="Object-store setting (repeatable), e.g. endpoint=http://host:9000, region=..., "
        "concurrency=8; credentials come from the standard environment (AWS_ACCESS_KEY_ID, ...).",
    )(f)


def store_options(f: F) -> F:
    """``--store`` and ``--store-option``."""
    return store_option(store_options_option(f))
