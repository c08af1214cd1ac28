"""One global checkpoint on restore (issue 13 point 5, issue 12 point 6) on a real broker.

A stateful job runs and completes checkpoints; one file that only the newest
checkpoint of one task references is then corrupted in the store and the local
state is removed (no task-local copy to reuse). On restart that task cannot restore
the newest checkpoint: the coordinator says so once, naming the object, and every
task restores the next older checkpoint — never a mix.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from integration.e2e.harness import REPO
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics, make_producer
from kstream.state.snapshot import read_manifest
from kstream.store.file import FileStore
from kstream.store.metadata import completed_ids, read_metadata

CLI = [sys.executable, "-c", "from kstream.cli import main; main()"]
T0 = 1_767_225_600_000

TOPOLOGY = """
from kstream.api import Topology, Tumbling

topology = Topology("restore")
(
    topology.source("{src}", value_serde="str")
    .key_by(lambda w: w, key_serde="str")
    .window(Tumbling(3_600_000))
    .count()
    .map(lambda r: [r.key, r.value])
    .to("{out}", value_serde="json")
)
"""


def _produce(bootstrap: str, topic: str, words: list[str], start: int) -> None:
    p = make_producer(bootstrap)
    for i, w in enumerate(words):
        p.produce(topic, w.encode(), w.encode(), partition=i % 2, timestamp=T0 + start + i)
    assert p.flush(30) == 0


def _job(topology: Path, bootstrap: str, app: str, tmp: Path, *extra: str) -> list[str]:
    return [*CLI, "-v", "run", str(topology), "--bootstrap", bootstrap, "--app-id", app,
            "--store", f"file://{tmp}/store", "--state-dir", str(tmp / "state"),
            "--interval", "0.5", *extra]  # fmt: skip


def test_a_task_that_cannot_restore_makes_every_task_restore_one_older_checkpoint(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    src, out, app = unique_name("in"), unique_name("out"), unique_name("restore")
    ensure_topics(kafka_admin, [TopicSpec(src, 2), TopicSpec(out, 2)])
    topology = tmp_path / "restore_topology.py"
    topology.write_text(TOPOLOGY.format(src=src, out=out))
    store = FileStore(tmp_path / "store")

    # 1. Run while input flows until four checkpoints completed, then stop gracefully.
    first_log_file = tmp_path / "first.log"
    job = subprocess.Popen(
        _job(topology, kafka_bootstrap, app, tmp_path),
        stdout=first_log_file.open("w"), stderr=subprocess.STDOUT, text=True, cwd=REPO,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    batch = 0
    while max(completed_ids(store, app), default=0) < 4:
        assert job.poll() is None, first_log_file.read_text()[-3000:]
        assert time.monotonic() < deadline, "no 4 completed checkpoints in 120 s"
        _produce(kafka_bootstrap, src, [f"w{batch}-{i}" for i in range(20)], batch * 100)
        batch += 1
        time.sleep(0.7)
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=60) == 0, first_log_file.read_text()[-3000:]

    # 2. Corrupt a file of the newest checkpoint of one stateful task that an older
    #    retained checkpoint does not reference.
    task = "stage1-0"
    ids = completed_ids(store, app)
    files = {
        n: read_manifest(store, read_metadata(store, app, n).tasks[task].handle).files for n in ids
    }
    hashes = {n: {f.sha256 for f in fs} for n, fs in files.items()}
    victim = next(
        f for f in files[ids[-1]] if f.size > 0 and any(f.sha256 not in hashes[n] for n in ids)
    )
    fallback = max(n for n in ids if victim.sha256 not in hashes[n])
    unrestorable = [n for n in ids if n > fallback]  # all of them hold the victim
    tasks = len(read_metadata(store, app, fallback).tasks)
    (tmp_path / "store" / victim.path).write_bytes(b"corrupted")
    for d in (tmp_path / "state").glob("*"):
        subprocess.run(["rm", "-rf", str(d)], check=True)  # no task-local copy to reuse

    # 3. Restart: one loud line per checkpoint that cannot be restored, naming the
    #    object; every task restores the same older checkpoint.
    again = subprocess.run(
        _job(topology, kafka_bootstrap, app, tmp_path, "--stop-when-idle", "3"),
        capture_output=True, text=True, timeout=180, cwd=REPO,
    )  # fmt: skip
    log = again.stdout + again.stderr
    assert again.returncode == 0, log[-4000:]
    loud = [line for line in log.splitlines() if "RESTORE FAILED" in line]
    assert [int(re.findall(r"checkpoint (\d+) cannot", line)[0]) for line in loud] == sorted(
        unrestorable, reverse=True
    ), loud
    assert all(f"{store.url}/{victim.path} is corrupt or missing" in line for line in loud)
    assert f"older checkpoint {fallback}" in loud[-1]
    # Tasks of the abandoned attempts may have restored newer checkpoints, but none was
    # reported ready or ran: the only attempt that became ready restored `fallback`
    # for every task.
    ready = re.findall(
        r"attempt (\d+): restored (\d+) task\(s\) to checkpoint (\d+) \(generation", log
    )
    assert [(int(n), int(c)) for _a, n, c in ready] == [(tasks, fallback)], ready
    resumed = re.findall(r"attempt (\d+) resumed", log)
    assert resumed == [ready[0][0]], resumed
