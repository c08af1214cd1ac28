"""Process logging: text for people, one JSON object per line for log shippers.

Every record carries the process's app id (set once the job is known, see
:func:`set_app`); state changes pass ``attempt`` and ``task`` as ``extra`` (see
:func:`ctx`). The text format shows them as ``[app=... attempt=... task=...]``;
the JSON format as fields.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

FORMATS = ("text", "json")
_CONTEXT_FIELDS = ("app", "attempt", "task", "checkpoint")
_app: str | None = None


def set_app(app_id: str) -> None:
    """Name the job this process runs; every later log record carries it."""
    global _app
    _app = app_id


def ctx(
    attempt: int | None = None, task: str | None = None, checkpoint: int | None = None
) -> dict[str, Any]:
    """``extra=`` for a state-change log line: the attempt, task and checkpoint it concerns."""
    out: dict[str, Any] = {}
    if attempt is not None:
        out["attempt"] = attempt
    if task is not None:
        out["task"] = task
    if checkpoint is not None:
        out["checkpoint"] = checkpoint
    return out


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if _app is not None and not hasattr(record, "app"):
            record.app = _app
        return True


def _context(record: logging.LogRecord) -> dict[str, Any]:
    return {k: getattr(record, k) for k in _CONTEXT_FIELDS if hasattr(record, k)}


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message [app=... attempt=... task=...]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = _context(record)
        if not fields:
            return line
        tags = " ".join(f"{k}={v}" for k, v in fields.items())
        head, sep, rest = line.partition("\n")  # a traceback stays below the tagged line
        return f"{head} [{tags}]{sep}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC ISO 8601), level, logger, message, context,
    and ``exception`` with the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_context(record),
        }
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


def configure_logging(level: int, fmt: str = "text") -> None:
    """Log to stderr at ``level`` in ``fmt`` ("text" or "json"), replacing earlier handlers."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_ContextFilter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)


def log_at_least(level: int) -> None:
    """Lower the root level to ``level`` unless it is already lower (``-vv`` keeps DEBUG).

    The processes that run a job log at INFO by default, as Flink and Kafka Streams do:
    their state changes, checkpoint outcomes and restore progress are what an operator
    reads.
    """
    root = logging.getLogger()
    if root.level > level or root.level == logging.NOTSET:
        root.setLevel(level)
