"""What every contender computes, defined once: the event shape, workload 1's filter and
map, the window, and the report protocol between a contender process and the harness.

Standard library only: this module is imported by contenders that run in the Quix
Streams virtualenv, where kstream is not installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
EVENT_SCHEMA_FILE = SCHEMA_DIR / "event.avsc"
OUT_EVENT_SCHEMA_FILE = SCHEMA_DIR / "out_event.avsc"

KINDS: tuple[str, ...] = ("click", "view", "purchase", "signup")
KIND_WEIGHTS: tuple[int, ...] = (50, 30, 15, 5)
KEPT_KINDS: frozenset[str] = frozenset({"click", "purchase"})
MIN_AMOUNT = 1.0
DEDUP_WITHIN_MS = 3_600_000  # workload 6: a key's records within an hour are duplicates

REPORT_PREFIX = "BENCH_REPORT "


def keep(event: Mapping[str, Any]) -> bool:
    """Workload 1's filter: clicks and purchases of at least ``MIN_AMOUNT``."""
    return event["kind"] in KEPT_KINDS and event["amount"] >= MIN_AMOUNT


def transform(event: Mapping[str, Any]) -> dict[str, Any]:
    """Workload 1's map: the amount in integer cents, the other fields kept."""
    return {
        "user": event["user"],
        "kind": event["kind"],
        "cents": round(event["amount"] * 100),
        "ts": event["ts"],
    }


def forever_store_dir(state_dir: Path) -> Path:
    """Where a kstream ``--forever`` job keeps its checkpoint store: ``<state-dir>.store``,
    next to its local state, so wiping the local state (a replacement machine) keeps it."""
    return state_dir.parent / f"{state_dir.name}.store"


def load_schema(path: Path) -> dict[str, Any]:
    """An Avro schema from ``benchmarks/schemas/`` as a dict (not yet parsed by fastavro)."""
    schema: dict[str, Any] = json.loads(path.read_text())
    return schema


@dataclass(frozen=True)
class EndOffsets:
    """The input a bounded contender must process: ``partition -> end offset`` (exclusive).

    The harness captures them once the input is loaded and passes them as JSON, so
    every contender stops at exactly the same records.
    """

    ends: dict[int, int]

    @classmethod
    def from_json(cls, text: str) -> EndOffsets:
        return cls({int(p): int(o) for p, o in json.loads(text).items()})

    def to_json(self) -> str:
        return json.dumps({str(p): o for p, o in sorted(self.ends.items())})


class Progress:
    """Tracks consumed offsets against ``EndOffsets``; ``done`` once every partition reached its end.

    Partitions whose end offset is 0 (empty) count as done from the start.
    """

    def __init__(self, end: EndOffsets) -> None:
        self._remaining = {p: o for p, o in end.ends.items() if o > 0}
        self.total = sum(end.ends.values())  # input records (every input starts at offset 0)
        self.t_first: float | None = None

    @property
    def done(self) -> bool:
        return not self._remaining

    def observe(self, partition: int, offset: int) -> bool:
        """Record that ``offset`` of ``partition`` was processed; True once all input is done."""
        if self.t_first is None:
            self.t_first = time.time()
        end = self._remaining.get(partition)
        if end is not None and offset + 1 >= end:
            del self._remaining[partition]
        return not self._remaining


@dataclass(frozen=True)
class Report:
    """What a contender reports on its last stdout line.

    ``t_first``: wall-clock time the first input record was in the contender's hands.
    ``t_end``: wall-clock time after its output was flushed and committed and the
    clients were closed. ``records_in``: input records processed.
    ``records_out``: records produced, or -1 when the contender does not count them
    (the harness then counts the output topic).
    """

    contender: str
    records_in: int
    records_out: int
    t_first: float
    t_end: float

    def emit(self) -> None:
        """Print the report line the harness parses."""
        sys.stdout.write(REPORT_PREFIX + json.dumps(asdict(self)) + "\n")
        sys.stdout.flush()

    @classmethod
    def parse(cls, stdout: str) -> Report:
        """The report in a contender's stdout; ValueError when there is none."""
        for line in reversed(stdout.splitlines()):
            if line.startswith(REPORT_PREFIX):
                return cls(**json.loads(line[len(REPORT_PREFIX) :]))
        raise ValueError("contender printed no report line")


def contender_parser(description: str) -> argparse.ArgumentParser:
    """The command line every contender accepts (each ignores the options it has no use for).

    The harness always passes ``--bootstrap --input --output --group --end-offsets``
    and the workload's options; see benchmarks/README.md, "Contender contract".
    """
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--input", required=True, help="input topic")
    p.add_argument("--output", required=True, help="output topic (created by the harness)")
    p.add_argument("--group", required=True, help="fresh consumer group / app id for this run")
    p.add_argument("--end-offsets", type=EndOffsets.from_json, help="JSON partition->end offset")
    p.add_argument("--format", choices=("json", "avro", "avro-sr"), default="json")
    p.add_argument("--registry-url", default="", help="avro-sr: the Schema Registry's URL")
    p.add_argument("--schema-id", type=int, default=0, help="avro-sr: the input's schema id")
    p.add_argument(
        "--decode", choices=("fixed", "registry"), default="fixed",
        help="avro-sr: the fixed-schema path (header checked) or the registry path",
    )  # fmt: skip
    p.add_argument(
        "--guarantee", choices=("exactly-once", "at-least-once"), default="at-least-once"
    )
    p.add_argument("--window-ms", type=int, default=60_000, help="tumbling window size")
    p.add_argument("--commit-interval", type=float, default=1.0, help="checkpoint interval, s")
    p.add_argument("--checkpointing", choices=("on", "off"), default="on")
    p.add_argument("--state-dir", default="", help="local state directory for this run")
    p.add_argument("--instance-id", default="", help="static group membership id (recovery)")
    p.add_argument("--forever", action="store_true", help="do not stop at the end offsets")
    p.add_argument("--store-url", default="", help="kstream: checkpoint store URL (s3://...)")
    p.add_argument(
        "--store-option", action="append", default=[], help="kstream: object-store KEY=VALUE"
    )
    return p
