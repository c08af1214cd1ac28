"""A worker that starts while no broker answers waits the outage out (one log line when
it starts) and exits 1 with one line past --max-outage; a SIGTERM during that start-up
ends it (or a coordinator) cleanly, exit 0, not by the default action (exit -15). Real
``kstream`` processes against a port where nothing listens: no broker needed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KSTREAM = [sys.executable, "-c", "from kstream.cli import main; main()"]
WORDCOUNT = ROOT / "topologies" / "wordcount.py"
NOBODY = "127.0.0.1:1"  # connection refused
OUTAGE_LINE = "Kafka unreachable (cannot reach Kafka at 127.0.0.1:1: no metadata answer"


def _worker(*args: str, command: str = "worker") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*KSTREAM, command, str(WORDCOUNT), "-b", NOBODY, "--app-id", "nobody", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "KSTREAM_STATE_DIR": "/nonexistent-unused"},
    )


def test_no_broker_at_start_is_an_outage_then_one_line_past_max_outage() -> None:
    p = _worker("--max-outage", "2")
    _out, err = p.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert p.returncode == 1, err
    assert len(lines) == 2, err
    assert OUTAGE_LINE in lines[0] and "--max-outage" in lines[0]
    assert lines[1].startswith("kstream: Kafka unreachable for "), err
    assert "longer than --max-outage 2s" in lines[1] and "Connection refused" in lines[1]


@pytest.mark.parametrize("command", ["worker", "coordinator"])
def test_sigterm_while_the_start_waits_for_the_brokers_exits_0(command: str) -> None:
    p = _worker("--max-outage", "120", command=command)
    assert p.stderr is not None
    seen = threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert p.stderr is not None
        for line in p.stderr:
            lines.append(line.rstrip("\n"))
            if OUTAGE_LINE in line:
                seen.set()
        seen.set()  # the process ended

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(60)
        assert p.poll() is None, "\n".join(lines)  # the start-up waits for the brokers
        p.send_signal(signal.SIGTERM)
        try:
            code = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, "\n".join(lines)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    reader.join(10)
    assert lines[-1].endswith("SIGTERM during start-up: exiting"), lines
