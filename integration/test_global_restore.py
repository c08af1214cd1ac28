"""One global checkpoint on restore (issue 13 point 5, issue 12 point 6) on a real broker,
with the checkpoint store on the local file system and on a real S3 server (S3Proxy).

A stateful exactly-once job (a running count per word, repartitioned) runs and
completes checkpoints, then stops gracefully. One object of the newest checkpoint's
snapshot of one task, shared by the newest checkpoints but not by an older retained
one, is then overwritten with garbage through the store's own API, and the local state
is removed (no task-local copy to reuse). More input arrives; on restart that task
cannot restore the newest checkpoints: the coordinator says so, naming the object.
The newest checkpoint's output is published (the graceful stop), so falling back to
the older checkpoint would publish output twice: the job stops, naming the
checkpoints (issue 37 point B). Started from the older checkpoint on purpose
(``--from-checkpoint``, accepting re-published output), every task restores that
same checkpoint — never a mix.

The exact ``read_committed`` output proves it: per word, the first run emitted the
counts 1..n1 and the second run the counts f+1..N, where f is the word's count in the
input below the older checkpoint's source offsets and N its total count. A task
restored from another checkpoint than its upstream task's (a mix) would skip or
double-count input and change those counts.
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
from integration.edge_tools import read_all
from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.metadata import completed_ids, read_metadata
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics, make_producer
from kstream.snapshots.upload import read_manifest

pytestmark = pytest.mark.integration

WORDS = ("apple", "berry", "cherry", "date", "elder", "fig")
PARTITIONS = 2

TOPOLOGY = """
from kstream.api import Topology

topology = Topology("restore")
(
    topology.source("{src}", value_serde="str")
    .key_by(lambda w: w, key_serde="str")
    .count()
    .to("{out}", key_serde="str", value_serde="json")
)
"""


class Input:
    """What was produced, per source partition in offset order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = make_producer(bootstrap)
        self.topic = topic
        self.words: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
        self.n = 0

    def send(self, count: int) -> None:
        for _ in range(count):
            word, part = WORDS[(self.n * 5 + self.n // 7) % len(WORDS)], self.n % PARTITIONS
            self.producer.produce(self.topic, word.encode(), partition=part)
            self.words[part].append(word)
            self.n += 1
        assert self.producer.flush(30) == 0

    def counts(self, below: dict[int, int] | None = None) -> Counter[str]:
        """Per word, the records below ``below[partition]`` (default: all of them)."""
        out: Counter[str] = Counter()
        for part, words in self.words.items():
            out.update(words[: len(words) if below is None else below[part]])
        return out


def _source_offsets(store: CheckpointStore, app: str, checkpoint: int, src: str) -> dict[int, int]:
    """The source offsets checkpoint ``checkpoint`` restores to, per partition."""
    offsets: dict[int, int] = {}
    for snap in read_metadata(store, app, checkpoint).tasks.values():
        for key, pos in snap.offsets.items():
            topic, _, part = key.rpartition(":")
            if topic == src:
                offsets[int(part)] = 0 if pos is None else int(pos)  # None: the start
    assert sorted(offsets) == list(range(PARTITIONS)), offsets
    return offsets


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_a_task_that_cannot_restore_makes_every_task_restore_one_older_checkpoint(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    kind: str,
) -> None:
    src, out, app = unique_name("in"), unique_name("out"), unique_name("restore")
    ensure_topics(kafka_admin, [TopicSpec(src, PARTITIONS), TopicSpec(out, PARTITIONS)])
    topology = tmp_path / "restore_topology.py"
    topology.write_text(TOPOLOGY.format(src=src, out=out))
    if kind == "s3":
        s3 = request.getfixturevalue("s3_server")
        url, options = s3.fresh_url("global-restore"), s3.options()
        store_args = [*s3.cli_options()]
    else:
        url, options, store_args = f"file://{tmp_path}/store", {}, []
    store = open_store(url, options)

    def job(*extra: str) -> list[str]:
        return [*CLI, "-v", "run", str(topology), "--bootstrap", kafka_bootstrap,
                "--app-id", app, "--store", url, *store_args,
                "--state-dir", str(tmp_path / "state"), "--interval", "0.5", *extra]  # fmt: skip

    # 1. Run while input flows until four checkpoints completed, then stop gracefully:
    #    everything read is in the final checkpoint and its output is published. The
    #    newest retained checkpoints must hold a file of the task that an older retained
    #    one does not; when the task saw no input in its last intervals they are all the
    #    same, and the job runs again (exactly-once: its output goes on where it stopped).
    task = "stage1-0"
    data = Input(kafka_bootstrap, src)
    first_log = tmp_path / "first.log"
    for _attempt in range(3):
        started = max(completed_ids(store, app), default=0)
        proc = subprocess.Popen(
            job(), stdout=first_log.open("w"), stderr=subprocess.STDOUT, text=True, cwd=REPO
        )
        deadline = time.monotonic() + 120
        while max(completed_ids(store, app), default=0) < started + 4:
            assert proc.poll() is None, first_log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no 4 completed checkpoints in 120 s"
            data.send(40)
            time.sleep(0.5)  # input pacing, not synchronisation
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, first_log.read_text()[-3000:]
        assert "stopping: the final checkpoint completed" in first_log.read_text()
        ids = completed_ids(store, app)
        files = {
            n: read_manifest(store, read_metadata(store, app, n).tasks[task].handle).files
            for n in ids
        }
        hashes = {n: {f.sha256 for f in fs} for n, fs in files.items()}
        victim = next(
            (
                f
                for f in files[ids[-1]]
                if f.size > 0 and any(f.sha256 not in hashes[n] for n in ids)
            ),
            None,
        )
        if victim is not None:
            break
    assert victim is not None, f"{task}'s retained checkpoints {ids} hold the same files"
    first_run = data.counts()

    # 2. Corrupt that object of the newest checkpoint (the newest ones all share it).
    fallback = max(n for n in ids if victim.sha256 not in hashes[n])
    unrestorable = [n for n in ids if n > fallback]  # all of them hold the victim
    assert len(unrestorable) >= 1
    tasks = len(read_metadata(store, app, fallback).tasks)
    cut = _source_offsets(store, app, fallback, src)  # read now: retention deletes it later
    store.put_bytes(victim.path, b"corrupted")
    assert store.get_bytes(victim.path) == b"corrupted"
    for d in (tmp_path / "state").glob("*"):
        subprocess.run(["rm", "-rf", str(d)], check=True)  # no task-local copy to reuse
    data.send(200)  # input the second run reads beyond the first one's

    # 3. Restart: one loud line per checkpoint that cannot be restored, naming the
    #    object. The older checkpoint is restorable, but the first run published the
    #    newest checkpoint's output: restoring the older one would publish output twice
    #    (issue 37 point B). The job stops instead, naming the checkpoints, with nothing
    #    published and no task resumed.
    again = subprocess.run(
        job("--stop-when-idle", "3"), capture_output=True, text=True, timeout=240, cwd=REPO
    )
    log = again.stdout + again.stderr
    assert again.returncode == 1, log[-4000:]
    loud = [line for line in log.splitlines() if "RESTORE FAILED" in line]
    assert loud, log[-4000:]
    assert all(f"{store.url}/{victim.path} is corrupt or missing" in line for line in loud)
    refused = re.search(
        r"exactly-once cannot be kept: checkpoint (\d+) is the newest restorable one.*"
        r"already published the output of checkpoint (\d+).*--from-checkpoint \1",
        log,
    )
    assert refused is not None, log[-4000:]
    # (The sink's marker names the newest checkpoint that had output for it.)
    assert fallback <= int(refused[1]) < int(refused[2]) <= ids[-1], refused[0]
    assert re.findall(r"attempt (\d+) resumed", log) == []
    assert Counter(
        (r.key.decode() if r.key else "", int(r.value or b"0"))
        for r in read_all(kafka_bootstrap, out)
    ) == Counter((w, c) for w in WORDS for c in range(1, first_run[w] + 1))

    # 4. The operator accepts re-published output: the job starts from the older
    #    checkpoint (imported as its next one), every task restores it — never a mix.
    again = subprocess.run(
        job("--stop-when-idle", "3", "--from-checkpoint", str(fallback)),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    log = again.stdout + again.stderr
    assert again.returncode == 0, log[-4000:]
    ready = re.findall(
        r"attempt (\d+): restored (\d+) task\(s\) to checkpoint (\d+) \(generation", log
    )
    assert [int(n) for _a, n, _c in ready] == [tasks], ready
    resumed = re.findall(r"attempt (\d+) resumed", log)
    assert resumed == [ready[0][0]], resumed

    # 5. The exact output: counts 1..n1 from the first run, f+1..N from the second (the
    #    output after the older checkpoint published again, as the operator accepted).
    below = data.counts(cut)
    total = data.counts()
    expected = Counter(
        [(w, c) for w in WORDS for c in range(1, first_run[w] + 1)]
        + [(w, c) for w in WORDS for c in range(below[w] + 1, total[w] + 1)]
    )
    rows = read_all(kafka_bootstrap, out)
    got = Counter((r.key.decode() if r.key else "", int(r.value or b"0")) for r in rows)
    assert sum(total.values()) == data.n
    assert got == expected, (
        f"fallback {fallback}: missing {sorted((expected - got).items())[:20]}, "
        f"extra {sorted((got - expected).items())[:20]}"
    )
