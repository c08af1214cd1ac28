"""Where and how the scaling measurements run (``benchmarks/scaling_runs.py``,
``benchmarks/scaling_state.py``): the ``Env``, fresh topics and their cleanup, and
``scaling_job`` run exactly-once to the end of its input.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import generate, recovery
from benchmarks.generate import KEEP_FOREVER
from benchmarks.procstats import Child, ChildResult
from benchmarks.verify import read_output
from benchmarks.workloads import Report
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin

REPO_DIR = Path(__file__).resolve().parent.parent
UNBOUNDED = 1 << 40  # a sink buffer budget nothing reaches: everything stays in memory
MIB = 1024 * 1024


@dataclass
class Env:
    """Where and how the measurements run."""

    bootstrap: str
    partitions: int
    workdir: Path
    timeout: float
    say: Callable[[str], None] = print
    python: str = "python"
    notes: list[str] = field(default_factory=list)


def _job_argv(env: Env, module: str, *args: str) -> list[str]:
    return [env.python, "-m", module, "--bootstrap", env.bootstrap, *args]


def _fresh_topics(env: Env, *names: str) -> None:
    ensure_topics(
        make_admin(env.bootstrap), [TopicSpec(n, env.partitions, KEEP_FOREVER) for n in names]
    )


def _cleanup(env: Env, group: str, topics: list[str], dirs: list[Path]) -> None:
    for t in [*topics, *recovery.topics_of_group(env.bootstrap, group)]:
        try:
            generate.delete_topic(env.bootstrap, t)
        except Exception as e:  # cleanup must not hide the measurement
            env.say(f"  (could not delete topic {t}: {e})")
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def _job_to_end(env: Env, group: str, out: str, state: Path, topic: str, ends: str,
                *args: str) -> tuple[ChildResult, Report, int]:  # fmt: skip
    """Run ``scaling_job`` exactly-once from ``topic`` to ``ends`` into ``out``; its
    result, report and the records read back from ``out``."""
    child = Child(
        _job_argv(
            env, "benchmarks.scaling_job", "--input", topic, "--output", out, "--group", group,
            "--end-offsets", ends, "--state-dir", str(state), "--guarantee", "exactly-once",
            *args,
        ),
        cwd=REPO_DIR, log_dir=env.workdir, name=group,
    )  # fmt: skip
    res = child.wait(env.timeout)
    if res.returncode != 0:
        raise RuntimeError(f"exit code {res.returncode}:\n{res.stderr_tail}")
    report = Report.parse(res.stdout)
    got = read_output(env.bootstrap, out, env.partitions, timeout=env.timeout)
    return res, report, got.records
