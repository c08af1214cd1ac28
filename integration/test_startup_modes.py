"""Every start-up check and option behaves the same in the three ways to run a job
(issue 37), on a real broker: `kstream run`, `kstream worker` with the elected
coordinator, and `kstream worker --coordinator external` + `kstream coordinator`.

Per mode: the checkpoints it writes carry the plan's operator description; a
topology whose window changed is refused against them (exit 2, one line, nothing
started); ``--from-checkpoint 999999`` is refused the same way; a savepoint is
refused under the changed topology and honoured (imported as the new app's first
checkpoint) under a fitting one. The elected coordinator used to skip all of it:
no check, checkpoints without descriptions, ``--from-*`` ignored.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from integration.cli_job import CLI, KEYED_COUNT, CliJob, run_to_end
from integration.s3server import S3Server
from kstream.checkpointstorage.metadata import CheckpointMetadata, latest_completed
from kstream.checkpointstorage.savepoints import create_savepoint
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin

MODES = ("run", "worker", "worker+coordinator")


def _commands(mode: str, topology: Path, common: list[str]) -> list[list[str]]:
    """The processes of ``mode``, each a full command line."""
    if mode == "run":
        return [[*CLI, "run", str(topology), *common]]
    if mode == "worker":
        return [[*CLI, "worker", str(topology), *common]]
    return [
        [*CLI, "coordinator", str(topology), *common],
        [*CLI, "worker", str(topology), *common, "--coordinator", "external"],
    ]


class Deployment:
    """One app of the keyed-count job, started in one mode."""

    def __init__(self, bootstrap: str, tmp: Path, src: str, out: str, mode: str) -> None:
        self.bootstrap, self.tmp, self.mode = bootstrap, tmp, mode
        self.store_url = f"file://{tmp}/store"
        self.topologies: dict[int, Path] = {}
        for size in (1000, 2000):
            path = tmp / f"count{size}.py"
            path.write_text(KEYED_COUNT.format(src=src, out=out).replace("1000", str(size)))
            self.topologies[size] = path

    def common(self, app: str, *extra: str) -> list[str]:
        return ["--bootstrap", self.bootstrap, "--app-id", app, "--store", self.store_url,
                "--state-dir", str(self.tmp / f"state-{app}"), "--interval", "0.5",
                *extra]  # fmt: skip

    @contextmanager
    def running(self, app: str, size: int, *extra: str) -> Iterator[list[CliJob]]:
        """The mode's processes running ``app`` (``-v``), stopped (SIGTERM) at the end."""
        jobs: list[CliJob] = []
        try:
            for i, cmd in enumerate(
                _commands(self.mode, self.topologies[size], self.common(app, *extra))
            ):
                cmd.insert(len(CLI), "-v")
                jobs.append(CliJob(cmd, self.tmp / f"{app}-{size}-{i}.log"))
            yield jobs
            for job in reversed(jobs):  # workers before their coordinator
                code, _ = job.stop()
                assert code == 0, job.tail()
        finally:
            for job in jobs:
                job.kill()

    def refusals(self, app: str, size: int, *extra: str) -> list[tuple[int, str]]:
        """(exit code, whole output) of each of the mode's processes started, to its exit."""
        return [
            run_to_end(cmd, timeout=90)
            for cmd in _commands(self.mode, self.topologies[size], self.common(app, *extra))
        ]

    def latest(self, app: str) -> CheckpointMetadata | None:
        return latest_completed(open_store(self.store_url), app)


def _wait_checkpoint(
    d: Deployment, app: str, jobs: list[CliJob], cond: Callable[[CheckpointMetadata], bool]
) -> CheckpointMetadata:
    deadline = time.monotonic() + 90
    while True:
        meta = d.latest(app)
        if meta is not None and cond(meta):
            return meta
        for job in jobs:
            assert job.proc.poll() is None, f"exited ({job.proc.returncode}): {job.tail()}"
        assert time.monotonic() < deadline, f"no such checkpoint of {app}: {jobs[-1].tail()}"
        time.sleep(0.2)


WINDOW = (
    "operator 'stage1.window0': its window changed from 'Tumbling(size_ms=1000, offset_ms=0)' to "
    "'Tumbling(size_ms=2000, offset_ms=0)'; its state cannot be read as the new one (give "
    "the changed operator a new name=... to start it empty)"
)


@pytest.mark.parametrize("mode", MODES)
def test_start_up_checks_and_options_in_every_mode(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path, mode: str
) -> None:
    src, out, app = unique_name("users"), unique_name("counts"), unique_name("app")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(src, 2), TopicSpec(out, 2)])
    d = Deployment(kafka_bootstrap, tmp_path, src, out, mode)

    # 1. Checkpoints of every mode carry the plan's operator description.
    with d.running(app, 1000) as jobs:
        meta = _wait_checkpoint(d, app, jobs, lambda m: m.checkpoint_id >= 2)
    assert meta.description is not None
    assert meta.description["operators"]["stage1.window0"]["aggregation"] == "count"
    latest = d.latest(app)
    assert latest is not None and latest.description == meta.description
    n = latest.checkpoint_id

    def refused(expected: str, size: int, *extra: str, on: str = app) -> None:
        for code, output in d.refusals(on, size, *extra):
            assert (code, output) == (2, f"kstream: {expected}\n")

    # 2. A changed window is refused against the latest checkpoint, by every process.
    refused(f"checkpoint {n} cannot be restored under this topology: {WINDOW}", 2000)
    # 3. A checkpoint that does not exist.
    refused(
        f"cannot start from checkpoint 999999 of {app}: checkpoint 999999 of {app!r}: "
        f"{d.store_url}/{app}/checkpoints/chk-999999.json does not exist (see `kstream "
        f"checkpoints list` or `kstream savepoints list`)",
        1000,
        "--from-checkpoint",
        "999999",
    )
    # 4. A savepoint: refused under the changed topology, honoured under a fitting one.
    path = create_savepoint(open_store(d.store_url), app, "sp", latest)
    green = unique_name("green")
    refused(
        f"savepoint {path} cannot be restored under this topology: {WINDOW}",
        2000,
        "--from-savepoint",
        path,
        on=green,
    )
    assert d.latest(green) is None  # nothing was written
    with d.running(green, 1000, "--from-savepoint", path) as jobs:
        imported = _wait_checkpoint(d, green, jobs, lambda m: m.checkpoint_id >= 2)
        first = re.search(r"starting from savepoint \S+, imported as checkpoint (\d+)",
                          "".join(j.log() for j in jobs))  # fmt: skip
    assert first is not None and first.group(1) == "1", jobs[0].tail()
    assert imported.description == latest.description


S3_CASES = {
    "wrong secret": (
        {"secret_access_key": "not-the-secret"},
        "SignatureDoesNotMatch (403 Forbidden): the store refused the secret access key "
        "(check AWS_SECRET_ACCESS_KEY or --store-option secret_access_key=)",
    ),
    "wrong key id": (
        {"access_key_id": "nobody"},
        "InvalidAccessKeyId (403 Forbidden): the store does not know the access key id "
        "(check AWS_ACCESS_KEY_ID or --store-option access_key_id=)",
    ),
    "missing bucket": (
        {},
        "NoSuchBucket (404 Not Found): the bucket does not exist (create it, or fix the store URL)",
    ),
    "unreachable endpoint": (
        {"endpoint": "http://127.0.0.1:9"},
        "cannot reach http://127.0.0.1:9 (check the endpoint, AWS_ENDPOINT_URL or "
        "--store-option endpoint=)",
    ),
}


@pytest.mark.parametrize("mode", MODES)
def test_store_errors_are_one_line_in_every_mode(
    kafka_bootstrap: str,
    s3_server: S3Server,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    mode: str,
) -> None:
    """A wrong secret printed 60 lines and two tracebacks (and with the elected
    coordinator, a traceback every 10 s forever); a missing bucket said "control.key
    does not exist"; an unreachable endpoint 74 lines."""
    src, out, app = unique_name("users"), unique_name("counts"), unique_name("app")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(src, 2), TopicSpec(out, 2)])
    d = Deployment(kafka_bootstrap, tmp_path, src, out, mode)
    for case, (options, reason) in S3_CASES.items():
        url = "s3://no-such-bucket/x" if case == "missing bucket" else s3_server.fresh_url()
        d.store_url = url
        extra = s3_server.cli_options(**options)
        for code, output in d.refusals(app, 1000, *extra):
            assert (code, output) == (
                1,
                f"kstream: the checkpoint store cannot be used: listing {url}/{app}/control.key "
                f"failed: {reason}\n",
            ), case
