"""The coordinator as a real process against a real broker, with fake-worker processes.

(a) a task that never acknowledges → every checkpoint times out → hard failure,
    exit 1 naming the task; (b) a task deployed late misses the first trigger →
    that checkpoint times out, the next completes; (c) a second coordinator
    fences the first; (d) garbage on the control topic is skipped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from integration.cli_job import CLI
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import completed_ids
from kstream.kafka.clients import make_producer
from kstream.kafka.control import ControlReader
from kstream.kafka.controltopic import ensure_control_topic
from kstream.names import control_topic
from kstream.protocol.messages import (
    CheckpointAborted,
    CheckpointCompleted,
    JobFailed,
    Message,
    TriggerCheckpoint,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]


class Proc:
    """A child process whose merged output is collected line by line."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.p = subprocess.Popen(
            args,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    @property
    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_line(self, needle: str, timeout: float = 30.0) -> str:
        """The first output line containing ``needle``; fails with the output on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if needle in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(
                        f"{needle!r} not in output of {self.args} after {timeout}s:\n{self.output}"
                    )
                self._cond.wait(left)

    def wait_count(self, needle: str, n: int, timeout: float = 30.0) -> None:
        """Wait until ``n`` output lines contain ``needle``; fails with the output on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while sum(needle in line for line in self.lines) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"{n}x {needle!r} not in output of {self.args}:\n{self.output}")
                self._cond.wait(left)

    def wait_exit(self, timeout: float = 30.0) -> int:
        try:
            code = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.args} still running after {timeout}s:\n{self.output}")
        self._reader.join(5.0)
        return code

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10.0)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


@pytest.fixture
def procs() -> Iterator[Callable[[list[str]], Proc]]:
    started: list[Proc] = []

    def start(args: list[str]) -> Proc:
        started.append(Proc(args))
        return started[-1]

    yield start
    for p in started:
        p.stop()


def coordinator_args(
    bootstrap: str, app: str, store: Path, tasks: str, **opts: object
) -> list[str]:
    settings = {"interval": 0.3, "timeout": 1.5, "tolerable-failures": 2, **opts}
    args = [*CLI, "-v", "coordinator", "--bootstrap", bootstrap, "--app-id", app]
    args += ["--store", str(store), "--tasks", tasks]
    for k, v in settings.items():
        args += [f"--{k}", str(v)]
    return args


def worker_args(bootstrap: str, app: str, tasks: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "integration.fake_worker", "--bootstrap", bootstrap,
            "--app-id", app, "--tasks", tasks, *extra]  # fmt: skip


class ControlLog:
    """Everything on the control topic, read_committed, for assertions."""

    def __init__(self, bootstrap: str, app: str) -> None:
        ensure_control_topic(bootstrap, app)
        self.reader = ControlReader(bootstrap, app)
        self.messages: list[Message] = []

    def wait_for(
        self, pred: Callable[[Message], bool], what: str, timeout: float = 30.0
    ) -> Message:
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for msg in self.messages[seen:]:
                if pred(msg):
                    return msg
            seen = len(self.messages)
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} on the control topic after {timeout}s: {self.messages}")
            self.messages += self.reader.poll(0.2)

    def close(self) -> None:
        self.reader.close()


@pytest.fixture
def control(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> Iterator[tuple[str, ControlLog]]:
    app = unique_name("coord")
    log = ControlLog(kafka_bootstrap, app)
    yield app, log
    log.close()


def test_a_task_that_never_acknowledges_fails_the_job(
    kafka_bootstrap: str,
    control: tuple[str, ControlLog],
    tmp_path: Path,
    procs: Callable[[list[str]], Proc],
) -> None:
    app, log = control
    worker = procs(worker_args(kafka_bootstrap, app, "src-0,sink-0"))
    worker.wait_line("started")
    # The stuck task is deployed (it reports ready after the restore) but never acks.
    stuck = procs(worker_args(kafka_bootstrap, app, "stuck-0", "--never-ack", "--member", "w2"))
    stuck.wait_line("started")
    coord = procs(coordinator_args(kafka_bootstrap, app, tmp_path, "src-0,sink-0,stuck-0"))
    assert coord.wait_exit(60.0) == 1
    reason = (
        "checkpoint 3 timed out after 1.5s: no acknowledgement from tasks stuck-0. "
        "3 successive checkpoints failed; tolerable_failures=2 -> job failed"
    )
    assert reason in coord.output
    failed = log.wait_for(lambda m: isinstance(m, JobFailed), "JobFailed")
    assert failed == JobFailed(reason)
    aborted = [m for m in log.messages if isinstance(m, CheckpointAborted)]
    assert [m.checkpoint_id for m in aborted] == [1, 2, 3]
    assert all("no acknowledgement from tasks stuck-0" in m.reason for m in aborted)
    assert not any(isinstance(m, CheckpointCompleted) for m in log.messages)
    assert completed_ids(FileStore(tmp_path), app) == []
    assert worker.wait_exit(30.0) == 1  # workers stop on JobFailed
    assert f"failed {reason}" in worker.output


def test_a_late_task_makes_the_first_checkpoint_time_out_and_the_next_completes(
    kafka_bootstrap: str,
    control: tuple[str, ControlLog],
    tmp_path: Path,
    procs: Callable[[list[str]], Proc],
) -> None:
    app, log = control
    procs(worker_args(kafka_bootstrap, app, "src-0")).wait_line("started")
    # The job's tasks are deployed (ready after the first restore), but late-0's source
    # comes up only after trigger 1 was written: it misses that trigger.
    late = procs(
        worker_args(
            kafka_bootstrap, app, "late-0", "--start-after-checkpoint", "1", "--member", "w2"
        )
    )
    late.wait_line("started")
    # Every completed checkpoint is retained, so retention cannot delete checkpoint 2
    # before the listing below reads it (checkpoints complete every 0.3 s meanwhile).
    coord = procs(
        coordinator_args(kafka_bootstrap, app, tmp_path, "src-0,late-0", timeout=3.0, retained=1000)
    )
    log.wait_for(lambda m: isinstance(m, TriggerCheckpoint) and m.checkpoint_id == 1, "trigger 1")
    completed = log.wait_for(lambda m: isinstance(m, CheckpointCompleted), "a completion")
    assert completed == CheckpointCompleted(2, 1)
    aborted = [m for m in log.messages if isinstance(m, CheckpointAborted)]
    assert aborted == [
        CheckpointAborted(
            1, "checkpoint 1 timed out after 3s: no acknowledgement from tasks late-0"
        )
    ]
    late.wait_line("acked 2 late-0")
    assert coord.p.poll() is None  # one timeout is tolerated
    assert completed_ids(FileStore(tmp_path), app)[0] == 2
    listing = subprocess.run(
        [*CLI, "checkpoints", "list", "--store", str(tmp_path), "--app-id", app],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    rows = [r.split() for r in listing.stdout.splitlines()[1:]]
    # The timed-out checkpoint is in the history with its reason, then the completed one.
    assert [r[:2] for r in rows[:2]] == [["1", "failed"], ["2", "completed"]]
    assert listing.stdout.splitlines()[1].endswith(
        "checkpoint 1 timed out after 3s: no acknowledgement from tasks late-0"
    )
    coord.stop()
    assert coord.p.returncode == 0


def test_a_second_coordinator_fences_the_first(
    kafka_bootstrap: str,
    control: tuple[str, ControlLog],
    tmp_path: Path,
    procs: Callable[[list[str]], Proc],
) -> None:
    app, log = control
    procs(worker_args(kafka_bootstrap, app, "a-0,b-0")).wait_line("started")
    first = procs(coordinator_args(kafka_bootstrap, app, tmp_path, "a-0,b-0"))
    log.wait_for(
        lambda m: isinstance(m, CheckpointCompleted) and m.checkpoint_id >= 2, "completion"
    )
    second = procs(coordinator_args(kafka_bootstrap, app, tmp_path, "a-0,b-0"))
    assert first.wait_exit(30.0) == 1
    assert "another coordinator took over" in first.output
    first_ids = {m.checkpoint_id for m in log.messages if isinstance(m, TriggerCheckpoint)}
    # The second one keeps completing checkpoints, with ids the first never used.
    start = len(log.messages)
    log.wait_for(lambda m: isinstance(m, CheckpointCompleted), "a completion")
    later = log.wait_for(
        lambda m: isinstance(m, CheckpointCompleted) and m.checkpoint_id > max(first_ids) + 1,
        "a completion by the second coordinator",
    )
    triggered = [m.checkpoint_id for m in log.messages[start:] if isinstance(m, TriggerCheckpoint)]
    assert triggered == sorted(set(triggered))  # never repeated
    assert isinstance(later, CheckpointCompleted)
    ids = completed_ids(FileStore(tmp_path), app)
    assert len(ids) == len(set(ids)) and ids[-1] >= later.checkpoint_id
    second.stop()
    assert second.p.returncode == 0


def test_garbage_on_the_control_topic_is_skipped(
    kafka_bootstrap: str,
    control: tuple[str, ControlLog],
    tmp_path: Path,
    procs: Callable[[list[str]], Proc],
) -> None:
    app, log = control
    worker = procs(worker_args(kafka_bootstrap, app, "a-0"))
    worker.wait_line("started")
    coord = procs(coordinator_args(kafka_bootstrap, app, tmp_path, "a-0"))
    log.wait_for(lambda m: isinstance(m, CheckpointCompleted), "a first completion")
    producer = make_producer(kafka_bootstrap)
    garbage = [
        b"\x00\xffnot json",
        b'{"v": 1, "type": "os.system", "cmd": "touch /tmp/pwned"}',
        b'{"v": 99, "type": "TriggerCheckpoint"}',
        b'{"v": 1, "type": "AcknowledgeCheckpoint", "checkpoint_id": "x"}',
        b"[]",
        b'{"v": 1, "type": "JobFailed", "reason": "' + b"x" * 300_000 + b'"}',
    ]
    for i, g in enumerate(garbage):
        # (keyed: the compacted control topic refuses records without a key)
        producer.produce(control_topic(app), g, key=b"garbage-%d" % i)
    assert producer.flush(10.0) == 0
    # Both ends read and skipped every bad record ...
    coord.wait_count("skipping control record", len(garbage))
    worker.wait_count("skipping control record", len(garbage))
    # ... and checkpoints triggered after that still complete.
    log.messages += log.reader.read_to_end()
    after = max(m.checkpoint_id for m in log.messages if isinstance(m, TriggerCheckpoint))
    done = log.wait_for(
        lambda m: isinstance(m, CheckpointCompleted) and m.checkpoint_id >= after + 1,
        "completions after the garbage",
    )
    assert isinstance(done, CheckpointCompleted)
    worker.wait_line(f"completed {done.checkpoint_id}")
    assert log.reader.skipped == len(garbage)
    assert coord.p.poll() is None and worker.p.poll() is None
    assert not any(isinstance(m, JobFailed | CheckpointAborted) for m in log.messages)
    assert not Path("/tmp/pwned").exists()


def test_an_idle_coordinator_notices_its_successor(
    kafka_bootstrap: str,
    control: tuple[str, ControlLog],
    tmp_path: Path,
    procs: Callable[[list[str]], Proc],
) -> None:
    app, _log = control
    # The first one writes its initial Restore, then waits for readies that never come (no
    # worker), so no write of its own can fail.
    first = procs(coordinator_args(kafka_bootstrap, app, tmp_path, "a-0", interval=100.0))
    first.wait_line("next checkpoint 1")
    second = procs(coordinator_args(kafka_bootstrap, app, tmp_path, "a-0"))
    assert first.wait_exit(30.0) == 1
    assert "another coordinator took over app" in first.output
    assert "it wrote Restore" in first.output
    second.stop()
    assert second.p.returncode == 0
