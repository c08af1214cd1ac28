"""`kstream query`: ask a running job (any worker's query endpoint) or any retained
checkpoint or savepoint (the store, no job running) what a stateful operator holds.

Live: ``--url`` names any worker's endpoint (``KSTREAM_QUERY_PORT``); it answers or
forwards to the worker that runs the key's task. Stored: ``--checkpoint N`` or
``--savepoint PATH`` without ``--url`` restores the snapshots into a temporary
directory (as ``kstream state dump`` does) and reads them. The answer is printed as
JSON; see docs/queries.md.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import click

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.objectstore import parse_store_options
from kstream.checkpointstorage.urls import open_store
from kstream.cli.common import app_id_option, store_options
from kstream.query.operators import QueryError, of_description
from kstream.query.read import Query
from kstream.query.service import answer_stored
from kstream.query.stored import StoredState


def _live(url: str, token: str | None, q: Query, retry_s: float) -> tuple[int, dict[str, Any]]:
    path = f"/state/{urllib.parse.quote(q.operator)}/{q.op}?" + urllib.parse.urlencode(q.params())
    request = urllib.request.Request(url.rstrip("/") + path)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    deadline = time.monotonic() + retry_s
    while True:
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
            wait = body.get("retry_after_ms")
            if e.code == 503 and wait is not None and time.monotonic() + wait / 1000 < deadline:
                time.sleep(wait / 1000)  # the endpoint asked for this pause
                continue
            return e.code, body
        except (urllib.error.URLError, OSError) as e:
            raise click.ClickException(f"cannot reach the query endpoint {url}: {e}") from e


@click.command()
@click.argument("operator")
@click.argument("query", type=click.Choice(["get", "scan", "windows"]))
@click.argument("key", required=False)
@click.option("--url", envvar="KSTREAM_QUERY_URL", help="A worker's query endpoint (live).")
@click.option("--token", envvar="KSTREAM_QUERY_TOKEN", help="The endpoint's bearer token.")
@click.option(
    "--consistency",
    type=click.Choice(["latest", "checkpointed"]),
    default="latest",
    show_default=True,
    help="latest: as processed so far; checkpointed: as of the last completed checkpoint.",
)
@app_id_option("The job's app id (stored reads, without --url).")
@store_options
@click.option("--checkpoint", type=int, help="Read this retained checkpoint (time travel).")
@click.option("--savepoint", metavar="PATH", help="Read this savepoint (without --url).")
@click.option("--prefix", help="scan: keys starting with this text.")
@click.option("--from-key", help="scan: keys from this one (inclusive).")
@click.option("--to-key", help="scan: keys up to this one (exclusive).")
@click.option("--from", "time_from", type=int, help="windows/scan: window starts from (ms).")
@click.option("--to", "time_to", type=int, help="windows/scan: window starts up to (ms).")
@click.option("--at", type=int, help="windows: the window(s) containing this time (ms).")
@click.option("--limit", type=int, default=100, show_default=True)
@click.option("--partition", type=int, help="The key's partition, when its producer's is unusual.")
@click.option("--retry", type=float, default=0.0, metavar="SECONDS",
              help="Live: ask again while the key's task is moving, up to this long.")  # fmt: skip
def query(
    operator: str,
    query: str,
    key: str | None,
    url: str | None,
    token: str | None,
    consistency: str,
    app_id: str | None,
    store_url: str,
    store_options: tuple[str, ...],
    checkpoint: int | None,
    savepoint: str | None,
    **options: Any,
) -> None:
    """Ask OPERATOR (its stable id) for KEY: get | scan | windows (a key's windows)."""
    retry = options.pop("retry")
    params = {k: str(v) for k, v in options.items() if v is not None}
    if key is not None:
        params["key"] = key
    params["consistency"] = consistency
    if checkpoint is not None:
        params["checkpoint"] = str(checkpoint)
    try:
        q = Query.from_params(query, operator, params)
        if url is not None:
            if savepoint is not None:
                raise QueryError("--savepoint reads the store: leave out --url")
            status, body = _live(url, token, q, retry)
        else:
            if app_id is None and savepoint is None:
                raise QueryError(
                    "give --url (a running job) or --app-id with --checkpoint (stored)"
                )
            store = open_store(store_url, parse_store_options(store_options))
            status, body = 200, _stored(store, app_id or "", checkpoint, savepoint, q)
    except QueryError as e:
        click.echo(f"kstream: {e}", err=True)
        sys.exit(2)
    click.echo(json.dumps(body, indent=2, sort_keys=True))
    if status != 200:
        reason = body.get("reason") or body.get("error") or f"HTTP {status}"
        click.echo(f"kstream: not answered ({status}): {reason}", err=True)
        sys.exit(2 if status in (400, 401, 404) else 1)


def _stored(
    store: CheckpointStore, app_id: str, checkpoint: int | None, savepoint: str | None, q: Query
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kstream-query-") as tmp:
        stored = StoredState(store, app_id, tmp)
        try:
            meta = stored.metadata(checkpoint, savepoint)
            operators = of_description(meta.description or {})
            info = operators.get(q.operator)
            if info is None:
                raise QueryError(
                    f"no stateful operator {q.operator!r} in this checkpoint (operators: "
                    f"{', '.join(sorted(operators)) or 'none recorded'})"
                )

            def head(_i: Any, _q: Query, task: str | None) -> dict[str, Any]:
                return {"operator": q.operator, "query": q.op, "consistency": "checkpointed",
                        "task": task, "worker": None}  # fmt: skip

            return answer_stored(stored, meta, info, q, head)
        finally:
            stored.close()
