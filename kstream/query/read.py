"""A query read against one task's tables: point lookup, key scan, a key's windows.

Pure over :class:`~kstream.state.base.StateTable` (live tables of a running task, or
tables restored from a checkpoint); the layouts read are the operators'
(``kstream.runtime``): ``(key,)`` for rolling aggregations, stream-table joins and
value/list process state, ``(key, map_key)`` for map state, ``(end, start, key)`` for
tumbling and hopping windows, ``(key, start) -> [end, acc]`` for sessions.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from itertools import dropwhile, islice
from typing import Any

from kstream.operators.stateschema import ACCUMULATOR, StoredDecoder, VersionedTable
from kstream.query.operators import OperatorInfo, QueryError
from kstream.state.base import NotNow, StateKey, StateTable

OPS = ("get", "scan", "windows")
CONSISTENCY = ("latest", "checkpointed")
MAX_LIMIT = 10_000
MAX_TS = 2**63 - 1
MIN_TS = -(2**63)


@dataclass(frozen=True)
class Tables:
    """One task's tables of one operator by suffix (``acc``, ``s.count``), opened on use."""

    by_suffix: dict[str, Callable[[], StateTable]]

    @classmethod
    def of(cls, operator: str, tables: Mapping[str, Callable[[], StateTable]]) -> Tables:
        """The entries of ``tables`` (full name -> opener) that are ``operator``'s."""
        prefix = f"{operator}."
        return cls({n[len(prefix) :]: t for n, t in tables.items() if n.startswith(prefix)})

    @classmethod
    def opened(cls, operator: str, tables: Mapping[str, StateTable]) -> Tables:
        """The same of tables open already (a running task's)."""
        return cls.of(operator, {n: partial(_same, t) for n, t in tables.items()})

    def __call__(self, suffix: str) -> StateTable | None:
        opener = self.by_suffix.get(suffix)
        if opener is None:
            return None
        table = opener()
        history = self.by_suffix.get("schemas")
        state = ACCUMULATOR if suffix in ("acc", "sessions") else suffix[2:]
        if history is not None and (suffix in ("acc", "sessions") or suffix.startswith("s.")):
            decoder = StoredDecoder(history(), state)  # Avro-typed state: values decoded
            if decoder.writers:
                return VersionedTable(table, decoder)
        return table

    def names(self) -> list[str]:
        return sorted(self.by_suffix)


def _same(table: StateTable) -> StateTable:
    return table


def to_json(value: Any) -> Any:
    """A key component or value as JSON (bytes as ``{"base64": ...}``)."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, tuple | list):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


def _int(params: dict[str, str], name: str) -> int | None:
    text = params.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise QueryError(f"{name}={text!r}: give an integer") from None


@dataclass(frozen=True)
class Query:
    """One query. ``key``/``prefix``/``start``/``end`` are text as the client gave it
    (parsed with the operator's key serde); ``time_from``/``time_to`` (ms, inclusive)
    bound window starts; ``checkpoint``: a checkpointed read of that checkpoint
    (default: the latest completed); ``partitioner``/``partition``: overrides for a
    source topic whose producers did not use the default (``murmur2``)."""

    op: str
    operator: str
    key: str | None = None
    prefix: str | None = None
    start: str | None = None
    end: str | None = None
    time_from: int | None = None
    time_to: int | None = None
    limit: int = 100
    consistency: str = "latest"
    checkpoint: int | None = None
    partitioner: str | None = None
    partition: int | None = None
    task: str | None = None
    at: int | None = None

    @classmethod
    def from_params(cls, op: str, operator: str, params: dict[str, str]) -> Query:
        if op not in OPS:
            raise QueryError(f"no query {op!r}: use {', '.join(OPS)}", 404)
        consistency = params.get("consistency", "latest")
        if consistency not in CONSISTENCY:
            raise QueryError(f"consistency={consistency!r}: use latest or checkpointed")
        limit = _int(params, "limit")
        limit = 100 if limit is None else limit
        if not 1 <= limit <= MAX_LIMIT:
            raise QueryError(f"limit={limit}: give 1..{MAX_LIMIT}")
        at = _int(params, "at")
        q = cls(
            op,
            operator,
            key=params.get("key"),
            prefix=params.get("prefix"),
            start=params.get("from_key"),
            end=params.get("to_key"),
            time_from=_int(params, "from"),
            time_to=_int(params, "to"),
            at=at,
            limit=limit,
            consistency=consistency,
            checkpoint=_int(params, "checkpoint"),
            partitioner=params.get("partitioner"),
            partition=_int(params, "partition"),
            task=params.get("task"),
        )
        if op in ("get", "windows") and q.key is None:
            raise QueryError(f"{op} needs key=...")
        if q.checkpoint is not None and consistency != "checkpointed":
            q = cls(**{**q.__dict__, "consistency": "checkpointed"})
        return q

    def params(self) -> dict[str, str]:
        """The query string that asks the same (forwarding)."""
        out = {
            "key": self.key,
            "prefix": self.prefix,
            "from_key": self.start,
            "to_key": self.end,
            "from": self.time_from,
            "to": self.time_to,
            "limit": self.limit,
            "consistency": self.consistency,
            "checkpoint": self.checkpoint,
            "partitioner": self.partitioner,
            "partition": self.partition,
            "task": self.task,
            "at": self.at,
        }
        return {k: str(v) for k, v in out.items() if v is not None}


def _upper(prefix: Any) -> Any:
    """The smallest str/bytes above every one starting with ``prefix`` (None: none)."""
    if isinstance(prefix, bytes):
        stripped = prefix.rstrip(b"\xff")
        return stripped[:-1] + bytes([stripped[-1] + 1]) if stripped else None
    if isinstance(prefix, str) and prefix:
        return prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return None


def _take(entries: Iterator[tuple[StateKey, Any]], limit: int) -> tuple[list[Any], bool]:
    got = list(islice(entries, limit + 1))
    return got[:limit], len(got) > limit


def read(info: OperatorInfo, q: Query, tables: Tables) -> dict[str, Any]:
    """The answer of ``q`` from one task's ``tables`` (without task and position)."""
    if q.op == "scan":
        return _scan(info, q, tables)
    key = info.parse_key(q.key or "")
    if info.kind == "window" or q.op == "windows":
        return _windows(info, q, key, tables)
    if info.kind == "process":
        return _process(q, key, tables)
    table = tables("acc") or tables("table")
    if table is None:
        return _generic(q, key, tables)
    missing = object()
    value = table.get((key,), missing)
    found = value is not missing
    return {"found": found, "value": to_json(value) if found else None}


_IMMUTABLE = (int, float, str, bytes, bool, type(None))


def _peek(table: StateTable) -> Callable[[StateKey, Any], Any]:
    def get(key: StateKey, default: Any) -> Any:
        value = table.peek(key, default)
        if value is not default and type(value) not in _IMMUTABLE:
            raise NotNow(table.name)  # the owner may be changing it in place
        return value

    return get


def peek_read(info: OperatorInfo, q: Query, tables: Tables) -> dict[str, Any]:
    """``read`` from a thread other than the tables' owner, which may be writing them
    meanwhile (``StateTable.peek``): a rolling value or a key's fixed windows by time
    (``at``, or ``from`` and ``to``), each an immutable value of one moment during the
    call. NotNow for anything else (read under the gate)."""
    if q.op == "scan" or info.kind == "process" or "schemas" in tables.by_suffix:
        raise NotNow(info.id)  # (Avro-typed state: its decoder reads a table)
    key = info.parse_key(q.key or "")
    missing = object()
    if info.kind == "window" or q.op == "windows":
        acc = tables("acc")
        if acc is None or info.windows is None:
            raise NotNow(info.id)
        if q.at is not None:
            lo, hi = q.at - info.windows[0] + 1, q.at
        elif q.time_from is not None and q.time_to is not None:
            lo, hi = q.time_from, q.time_to
        else:
            raise NotNow(info.id)
        out, more = _fixed_by_time(info.windows, acc, key, lo, hi, q.limit, _peek(acc))
        return {"found": bool(out), "windows": out, "more": more}
    table = tables("acc") or tables("table")
    if table is None:
        raise NotNow(info.id)
    value = _peek(table)((key,), missing)
    found = value is not missing
    return {"found": found, "value": to_json(value) if found else None}


def _windows(info: OperatorInfo, q: Query, key: Any, tables: Tables) -> dict[str, Any]:
    """A key's windows starting in [from, to] (Kafka Streams' ``fetch(key, from, to)``),
    or containing ``at``."""
    lo = MIN_TS if q.time_from is None else q.time_from
    hi = MAX_TS if q.time_to is None else q.time_to
    at = q.at
    out: list[dict[str, Any]] = []
    more = False
    acc, sessions = tables("acc"), tables("sessions")
    bounded = at is not None or (q.time_from is not None and q.time_to is not None)
    if acc is not None and info.windows is not None and bounded:
        if at is not None:
            lo, hi = at - info.windows[0] + 1, at
        out, more = _fixed_by_time(info.windows, acc, key, lo, hi, q.limit)
    elif acc is not None:
        out, more = _fixed_by_scan(acc, key, lo, hi, q.limit)
        if at is not None:
            out = [w for w in out if w["start"] <= at < w["end"]]
    elif sessions is not None:
        for k, ext in sessions.scan((key,)):
            if lo <= k[1] <= hi and (at is None or k[1] <= at < ext[0]):
                if len(out) == q.limit:
                    more = True
                    break
                out.append({"start": k[1], "end": ext[0], "value": to_json(ext[1])})
    else:
        return _generic(q, key, tables)
    return {"found": bool(out), "windows": out, "more": more}


def _fixed_by_time(
    spec: tuple[int, int, int],
    acc: StateTable,
    key: Any,
    lo: int,
    hi: int,
    limit: int,
    get: Callable[[StateKey, Any], Any] | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Tumbling/hopping windows starting in ``[lo, hi]``: one point lookup per window
    (``get``: the table's, or a peek)."""
    size, advance, offset = spec
    get = get or acc.get
    start = lo + (offset - lo) % advance  # the first window start >= lo
    out: list[dict[str, Any]] = []
    missing = object()
    looked = 0
    while start <= hi:
        if looked == limit:
            return out, True
        looked += 1
        value = get((start + size, start, key), missing)
        if value is not missing:
            out.append({"start": start, "end": start + size, "value": to_json(value)})
        start += advance
    return out, False


def _fixed_by_scan(
    acc: StateTable, key: Any, lo: int, hi: int, limit: int
) -> tuple[list[dict[str, Any]], bool]:
    """Windows of ``key`` starting in ``[lo, hi]`` without the window spec: one seek per
    distinct window end held (few: windows are deleted once fired and expired; a
    fixed window's end determines its start)."""
    out: list[dict[str, Any]] = []
    missing = object()
    end = lo if lo == MIN_TS else lo + 1  # a window ends after its start
    while True:
        first = next(iter(acc.scan_range((end,), (MAX_TS,))), None)
        if first is None:
            return out, False
        e, s = first[0][0], first[0][1]
        if s > hi:
            return out, False
        if s >= lo:
            value = acc.get((e, s, key), missing)
            if value is not missing:
                if len(out) == limit:
                    return out, True
                out.append({"start": s, "end": e, "value": to_json(value)})
        end = e + 1


def _process(q: Query, key: Any, tables: Tables) -> dict[str, Any]:
    names = [n for n in tables.names() if n.startswith("s.")]
    value: dict[str, Any] = {}
    for name in names:
        table = tables(name)
        assert table is not None
        entries, _ = _take(table.scan((key,)), q.limit)
        if not entries:
            continue
        if len(entries) == 1 and entries[0][0] == (key,):
            value[name[2:]] = to_json(entries[0][1])
        else:
            value[name[2:]] = [[to_json(k[1:]), to_json(v)] for k, v in entries]
    return {"found": bool(value), "value": value}


def _generic(q: Query, key: Any, tables: Tables) -> dict[str, Any]:
    """Any other operator: every entry of its tables under ``(key,)``."""
    value: dict[str, Any] = {}
    for name in tables.names():
        table = tables(name)
        assert table is not None
        entries, _ = _take(table.scan((key,)), q.limit)
        if entries:
            value[name] = [[to_json(k), to_json(v)] for k, v in entries]
    return {"found": bool(value), "value": value}


def _scan(info: OperatorInfo, q: Query, tables: Tables) -> dict[str, Any]:
    """Keys in order: by ``prefix`` (str/bytes keys), or ``from_key`` (inclusive) to
    ``to_key`` (exclusive); for fixed windows, the windows starting in [from, to]."""
    acc = tables("acc")
    if info.kind == "window" and acc is not None:
        lo = MIN_TS if q.time_from is None else q.time_from
        hi = MAX_TS if q.time_to is None else q.time_to
        entries: list[dict[str, Any]] = []
        more = False
        for k, v in acc.scan_range((lo if lo == MIN_TS else lo + 1,), (MAX_TS,)):
            if k[1] > hi:
                continue
            if k[1] < lo:
                continue
            if len(entries) == q.limit:
                more = True
                break
            entries.append({"key": to_json(k[2]), "start": k[1], "end": k[0], "value": to_json(v)})
        return {"entries": entries, "more": more}
    table = acc or tables("table") or tables("sessions")
    if table is None:
        names = [n for n in tables.names() if n.startswith("s.")]
        table = tables(names[0]) if names else None
    if table is None:
        raise QueryError(f"operator {info.id!r} ({info.kind}) has no keyed table to scan", 404)
    if q.prefix is not None:
        p = info.parse_key(q.prefix) if info.key_serde != "json" else q.prefix
        up = _upper(p)
        it = table.scan_range((p,), (up,)) if up is not None else table.scan()
    elif q.start is not None or q.end is not None:
        lo_key = (info.parse_key(q.start),) if q.start is not None else ()
        if q.end is None:
            it = dropwhile(lambda e: e[0] < lo_key, table.scan())
        else:
            it = table.scan_range(lo_key, (info.parse_key(q.end),))
    else:
        it = table.scan()
    got, more = _take(it, q.limit)
    out = []
    for k, v in got:
        row = {"key": to_json(k[0]), "value": to_json(v)}
        if len(k) > 1:
            row["sub"] = to_json(list(k[1:]))
        out.append(row)
    return {"entries": out, "more": more}
