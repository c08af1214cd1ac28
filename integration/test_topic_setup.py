"""Topics a job creates: replication from the job or the cluster, conflicts stop the job
before it starts; a wrong --bootstrap is one clear line."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kstream.config import ConfigError, JobConfig, Replication
from kstream.job import ensure_job_topics, load_topology, plan_live
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics

pytestmark = pytest.mark.integration

WORDCOUNT = Path(__file__).parent.parent / "topologies" / "wordcount.py"
KSTREAM = [sys.executable, "-c", "from kstream.cli import main; main()"]


def _replicas(admin: AdminClient, topic: str) -> int:
    md = admin.list_topics(topic, timeout=10.0)
    return len(md.topics[topic].partitions[0].replicas)


def _topic_config(admin: AdminClient, topic: str, name: str) -> str:
    from confluent_kafka.admin import ConfigResource

    (fut,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return str(fut.result(timeout=10.0)[name].value)


def test_job_topics_take_the_clusters_replication_by_default(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("rf")
    ensure_topics(kafka_admin, [TopicSpec("lines", 1)])
    cfg = JobConfig(app, kafka_bootstrap, replication=Replication(-1, 1))
    ensure_job_topics(plan_live(load_topology(WORDCOUNT), cfg))
    for topic in (f"{app}.control", f"{app}.commits", f"{app}.stage0.repartition"):
        assert _replicas(kafka_admin, topic) == 1  # the single test broker's default
        assert _topic_config(kafka_admin, topic, "min.insync.replicas") == "1"
    with pytest.raises(Exception, match=r"(?i)replication"):
        ensure_topics(
            kafka_admin, [TopicSpec(unique_name("rf3"), 1)], replication=Replication(3)
        )  # one broker cannot hold three replicas: the broker's refusal surfaces


def test_conflicting_existing_topics_stop_the_job_before_it_starts(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("conflict")
    ensure_topics(kafka_admin, [TopicSpec("lines", 1)])
    # Someone created the control topic with 3 partitions and the commit-marker topic
    # with time-based deletion (markers would expire: output published twice).
    ensure_topics(
        kafka_admin,
        [
            TopicSpec(f"{app}.control", 3),
            TopicSpec(f"{app}.commits", 1, {"cleanup.policy": "delete"}),
        ],
    )
    job = plan_live(load_topology(WORDCOUNT), JobConfig(app, kafka_bootstrap))
    with pytest.raises(ConfigError) as e:
        ensure_job_topics(job)
    msg = str(e.value)
    assert f"{app}.control has 3 partitions, the job needs 1" in msg
    assert f"{app}.control has cleanup.policy=delete, the job needs compact" in msg
    assert f"{app}.commits has cleanup.policy=delete, the job needs compact" in msg
    md = kafka_admin.list_topics(timeout=10.0)
    assert f"{app}.stage0.repartition" not in md.topics  # nothing created before the check


def test_cli_unreachable_bootstrap_is_an_outage_then_one_line_and_exit_1() -> None:
    t0 = time.monotonic()
    res = subprocess.run(
        [*KSTREAM, "worker", str(WORDCOUNT), "-b", "127.0.0.1:1", "--max-outage", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - t0
    assert res.returncode == 1, res.stderr
    # No answer is an outage: its log line, then one line past --max-outage.
    outage, line = res.stderr.strip().splitlines()
    assert "Kafka unreachable (cannot reach Kafka at 127.0.0.1:1: no metadata answer" in outage
    assert line.startswith("kstream: Kafka unreachable for "), res.stderr
    assert "Connection refused" in line
    assert took < 30, took
    unresolvable = subprocess.run(
        [
            *KSTREAM,
            "worker",
            str(WORDCOUNT),
            "-b",
            "no-such-host.invalid:9092",
            "--max-outage",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unresolvable.returncode == 1
    assert len(unresolvable.stderr.strip().splitlines()) == 2, unresolvable.stderr
    assert "no-such-host.invalid:9092" in unresolvable.stderr
