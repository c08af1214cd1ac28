"""Falling back past a corrupt checkpoint never publishes its output twice (issue 37
point B, the probe's case) on a real broker.

A stateful exactly-once job (``integration.test_global_restore``'s running count per
word, repartitioned) runs until its input's output is published, and is killed with
SIGKILL. A delta file of the newest completed checkpoint's snapshot (shared by the
newest checkpoints, not by an older retained one) is then corrupted. On restart the
older checkpoint is restorable, but the sink's commit marker says the newer output is
already out: the probe saw 11 duplicates here; now the job stops with one line naming
the checkpoints, and the ``read_committed`` output is exactly what the first run
published — every count once, none lost.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from integration.edge_tools import markers, read_all
from integration.test_global_restore import PARTITIONS, TOPOLOGY, Input
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import completed_ids, read_metadata
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics
from kstream.snapshots.upload import read_manifest

pytestmark = pytest.mark.integration

TASK = "stage1-0"


def _wait(cond: Callable[[], bool], what: str, within: float, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert proc.poll() is None, f"the job ended while waiting for {what}"
        assert time.monotonic() < deadline, f"no {what} within {within:g}s"
        time.sleep(0.2)  # polling a condition, with a deadline


def _counts(bootstrap: str, out: str) -> Counter[tuple[str, int]]:
    rows = read_all(bootstrap, out)
    return Counter((r.key.decode() if r.key else "", int(r.value or b"0")) for r in rows)


def test_a_fallback_past_published_output_stops_the_job_instead_of_publishing_it_twice(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    src, out, app = unique_name("in"), unique_name("out"), unique_name("fallback")
    ensure_topics(kafka_admin, [TopicSpec(src, PARTITIONS), TopicSpec(out, PARTITIONS)])
    topology = tmp_path / "fallback_topology.py"
    topology.write_text(TOPOLOGY.format(src=src, out=out))
    url = f"file://{tmp_path}/store"
    store = FileStore(tmp_path / "store")

    def job(*extra: str) -> list[str]:
        return [*CLI, "-v", "run", str(topology), "--bootstrap", kafka_bootstrap,
                "--app-id", app, "--store", url, "--state-dir", str(tmp_path / "state"),
                "--interval", "0.5", "--retained", "50", *extra]  # fmt: skip

    # 1. Input in rounds while checkpoints complete, then none: wait until every count
    #    is published (the newest checkpoints' output is out), then kill -9. Every
    #    checkpoint is retained, so older ones without the newest state's files remain.
    data = Input(kafka_bootstrap, src)
    log_file = tmp_path / "first.log"
    proc = subprocess.Popen(
        job(), stdout=log_file.open("w"), stderr=subprocess.STDOUT, text=True, cwd=REPO
    )

    def newer_than(before: int) -> Callable[[], bool]:
        return lambda: max(completed_ids(store, app), default=0) > before

    try:
        for _round in range(4):
            before = max(completed_ids(store, app), default=0)
            data.send(40)
            _wait(newer_than(before), "a completed checkpoint", 90, proc)
        published = Counter((w, c) for w, n in data.counts().items() for c in range(1, n + 1))
        _wait(lambda: _counts(kafka_bootstrap, out) == published, "all output", 90, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert _counts(kafka_bootstrap, out) == published, log_file.read_text()[-3000:]

    # 2. Corrupt a delta file of the newest checkpoint that an older retained one lacks.
    ids = completed_ids(store, app)
    files = {
        n: read_manifest(store, read_metadata(store, app, n).tasks[TASK].handle).files for n in ids
    }
    hashes = {n: {f.sha256 for f in fs} for n, fs in files.items()}
    victim = next(
        f for f in files[ids[-1]] if f.size > 0 and any(f.sha256 not in hashes[n] for n in ids)
    )
    fallback = max(n for n in ids if victim.sha256 not in hashes[n])
    marker = max(m["checkpoint"] for m in markers(kafka_bootstrap, app) if m["task"] == TASK)
    assert marker > fallback, (marker, fallback, ids)  # the probe's case: output is out
    store.put_bytes(victim.path, b"corrupted")
    for d in (tmp_path / "state").glob("*"):
        subprocess.run(["rm", "-rf", str(d)], check=True)  # no task-local copy to reuse

    # 3. Restart: the corrupt checkpoint is reported, then the job stops rather than
    #    restore the older one; nothing is published twice.
    again = subprocess.run(
        job("--stop-when-idle", "3"), capture_output=True, text=True, timeout=240, cwd=REPO
    )
    log = again.stdout + again.stderr
    assert again.returncode == 1, log[-4000:]
    assert f"{store.url}/{victim.path} is corrupt or missing" in log, log[-4000:]
    refused = re.search(
        r"exactly-once cannot be kept: checkpoint (\d+) is the newest restorable one.*"
        rf"task {TASK}'s sink already published the output of checkpoint {marker} ",
        log,
    )
    assert refused is not None and int(refused[1]) >= fallback, log[-4000:]
    assert re.findall(r"attempt (\d+) resumed", log) == []
    assert _counts(kafka_bootstrap, out) == published  # 0 duplicates, 0 lost
