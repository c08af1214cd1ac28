"""A sink process SIGKILLed inside an open transaction: nothing visible, recovery publishes once."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from integration.edge_tools import markers, read_all
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics
from kstream.kafka.commits import commits_topic_spec
from kstream.kafka.exactly_once_sink import ExactlyOnceSink

pytestmark = pytest.mark.integration

COUNT = 500


def _wait_for_line(proc: subprocess.Popen[str], prefix: str, timeout: float) -> str:
    """The first stdout line of ``proc`` starting with ``prefix``; fails with what was seen."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sel.select(timeout=0.2):
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if line.startswith(prefix):
                return line.strip()
    raise AssertionError(
        f"child did not print {prefix!r} within {timeout}s; output: {seen}, rc={proc.poll()}"
    )


def test_sigkill_in_open_transaction_leaves_nothing_and_recovery_publishes_once(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    app = unique_name("crash")
    out = f"{app}.out"
    ensure_topics(kafka_admin, [TopicSpec(out, 3), commits_topic_spec(app)])
    blob_path = tmp_path / "sink.blob"
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "integration.sink_crash_child",
            kafka_bootstrap,
            app,
            "sink-0",
            out,
            str(COUNT),
            str(blob_path),
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = _wait_for_line(proc, "IN-TRANSACTION", 60.0)
        assert line == "IN-TRANSACTION undelivered=0"
        # the records really are on the broker, inside the open transaction
        uncommitted = read_all(kafka_bootstrap, out, read_committed=False)
        assert len(uncommitted) == COUNT
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()

    blob = blob_path.read_bytes()
    sink = ExactlyOnceSink(app, "sink-0", kafka_bootstrap, timeout=30.0)
    try:
        # recover fences the dead producer (its transaction is aborted), finds no
        # marker, and publishes the buffered epoch
        assert sink.recover(blob, attempt=2) == COUNT
    finally:
        sink.close()

    committed = read_all(kafka_bootstrap, out)
    counts = Counter(r.key for r in committed)
    assert len(committed) == COUNT
    assert set(counts) == {f"k{i}".encode() for i in range(COUNT)}
    assert max(counts.values()) == 1  # each exactly once
    assert {r.key: r.value for r in committed}[b"k7"] == b"v7"
    # the aborted attempt's records are in the log but never visible
    assert len(read_all(kafka_bootstrap, out, read_committed=False)) == 2 * COUNT
    assert [(m["task"], m["checkpoint"], m["attempt"]) for m in markers(kafka_bootstrap, app)] == [
        ("sink-0", 1, 2)
    ]
