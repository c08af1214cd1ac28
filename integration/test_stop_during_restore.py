"""Workers stopped while the job restores, on a real broker (docs/design.md §6.6).

Three ``kstream worker`` processes and a ``kstream coordinator``. One worker is frozen
(SIGSTOP): the coordinator declares it lost and restores; the other two restore their
tasks and report them ready, and the ``Resume`` waits for the frozen worker's tasks
(its 60 s session keeps them in the group). Then both live workers get SIGTERM, as a
deployment deleted mid-restore does: each asks whether it may leave, the coordinator
(still restoring) answers, and they exit at once; with no worker left, the job is
stopped and ``kstream status`` says so. Before, both exited without a word and the
status said "restoring" for good.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from integration.cli_job import CLI, CliJob, keyed_count_job
from integration.e2e.harness import REPO

WORKERS = 3


def test_every_worker_stopped_during_a_restore_leaves_at_once_and_the_job_is_stopped(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    _src, _out, app, topology = keyed_count_job(kafka_bootstrap, unique_name, tmp_path, WORKERS)
    store = f"file://{tmp_path}/store"
    job = [str(topology), "--bootstrap", kafka_bootstrap, "--app-id", app, "--store", store,
           "--interval", "1"]  # fmt: skip

    def status() -> dict[str, Any]:
        done = subprocess.run(
            [*CLI, "status", "--app-id", app, "--bootstrap", kafka_bootstrap, "--store", store,
             "--json"],
            capture_output=True, text=True, cwd=REPO, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        doc: dict[str, Any] = json.loads(done.stdout)
        return doc

    coordinator = CliJob(
        [*CLI, "-v", "coordinator", *job, "--heartbeat-timeout", "3"], tmp_path / "coord.log"
    )
    worker = [*CLI, "-v", "worker", *job, "--coordinator", "external", "--session-timeout", "60"]
    workers = [
        CliJob([*worker, "--state-dir", str(tmp_path / f"state-{i}")], tmp_path / f"w{i}.log")
        for i in range(WORKERS)
    ]
    try:

        def every_worker_owns_tasks() -> bool:
            if not all("resumed: running ['stage" in w.log() for w in workers):
                return False  # (the logs first: a status is a process of its own)
            st = status()
            owners = [w for w in st["workers"] if w["owns"]]
            return st["phase"] == "running" and len(owners) == WORKERS

        coordinator.wait_until(every_worker_owns_tasks, "the job running on 3 workers", 120)
        frozen, live = workers[-1], workers[:-1]
        mark = len(coordinator.log())  # (a start's group change may read "lost" too)
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        # The coordinator loses it and restores; the live ones report their tasks ready.
        lost = coordinator.wait_for(
            r"worker \S+ lost: no heartbeat[^\n]*\n(?:.*\n)*?.*attempt (\d+): restoring",
            30,
            since=mark,
        )
        attempt = int(lost.group(1))
        for w in live:
            w.wait_for(rf"attempt {attempt}: restored \d+ task", 60)
        assert "all tasks ready: resuming attempt " + str(attempt) not in coordinator.log()

        for w in live:
            w.proc.send_signal(signal.SIGTERM)
        for w in live:
            assert w.wait(timeout=30) == 0, w.tail()
            assert "stopping: during the restore of checkpoint" in w.log(), w.tail()
        stopped = f"job stopped in attempt {attempt}: every worker stopped during the restore"
        coordinator.wait_for(re.escape(stopped), 30)
        st = status()
        assert st["phase"] == "stopped", st
    finally:
        for w in workers:
            w.kill()
        if coordinator.proc.poll() is None:
            coordinator.proc.send_signal(signal.SIGTERM)
            coordinator.wait(timeout=60)
