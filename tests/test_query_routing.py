"""Queries: key -> partition with the job's partitioners, and the routing directory as a
state machine fed control messages (never an answer from a worker that lost the task)."""

from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.api import Topology, Tumbling
from kstream.operators.core import partition_for_key
from kstream.plan import plan_job
from kstream.protocol.messages import CheckpointCompleted, Heartbeat, Message, Restore, Resume
from kstream.query.operators import murmur2, of_plan, partition_of
from kstream.query.routing import Directory, Forward, Local, Moving


def test_murmur2_matches_kafkas_test_vectors() -> None:
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


@given(st.binary(max_size=40), st.integers(1, 64))
def test_the_crc32_partitioner_is_key_bys(key: bytes, n: int) -> None:
    assert partition_of(key, n, "crc32") == partition_for_key(key, n) == zlib.crc32(key) % n


def test_a_key_goes_to_the_task_the_job_sends_it_to() -> None:
    t = Topology("q")
    counts = t.source("lines", value_serde="str").key_by(lambda w: w, key_serde="str")
    counts.window(Tumbling(1000), name="per-word").count().to("out")
    t.source("kv", key_serde="str", value_serde="json", keyed=True).count(name="totals").to(
        "totals"
    )
    ops = of_plan(plan_job(t, "q", {"lines": 3, "kv": 4}))
    window, rolling = ops["per-word"], ops["totals"]
    # Behind key_by: kstream's crc32 over the key serde's bytes, over the stage's 3 tasks.
    assert window.partitioner == "crc32"
    assert window.task_of("hello") == f"{window.stage}-{zlib.crc32(b'hello') % 3}"
    assert window.windows == (1000, 1000, 0)
    # A keyed source: Kafka's default partitioner (murmur2), or as configured.
    assert rolling.partitioner == "murmur2"
    assert rolling.task_of("k") == f"{rolling.stage}-{(murmur2(b'k') & 0x7FFFFFFF) % 4}"
    assert rolling.task_of("k", "crc32") == f"{rolling.stage}-{zlib.crc32(b'k') % 4}"


def test_routing_through_a_failover() -> None:
    d = Directory(me="m1")
    d.learn([Restore(1, None), Resume(1, {"s-0": "m1", "s-1": "m2"})])
    assert d.route("s-0", True, forwarded=False) == Local("s-0")
    assert isinstance(d.route("s-1", False, forwarded=False), Moving)  # m2's URL unknown
    d.observe(Heartbeat("m2", ("s-1",), 3, "", "http://h2:1"))
    assert d.route("s-1", False, forwarded=False) == Forward("s-1", "m2", "http://h2:1")
    # Forwarded once only: the sender's view was out of date.
    assert isinstance(d.route("s-1", False, forwarded=True), Moving)
    # m2 dies: the coordinator restores; every task is moving until the Resume.
    d.observe(Restore(2, 7))
    for task, here in (("s-0", True), ("s-1", False)):
        m = d.route(task, here, forwarded=False)
        assert isinstance(m, Moving) and m.retry_after_ms > 0 and "restoring" in m.reason
    d.observe(Resume(2, {"s-0": "m1", "s-1": "m1"}))
    assert d.route("s-1", True, forwarded=False) == Local("s-1")
    # Assigned here but not running (yet, or any more): moving, not a stale answer.
    assert isinstance(d.route("s-1", False, forwarded=False), Moving)
    d.observe(CheckpointCompleted(9, 2))
    d.observe(CheckpointCompleted(8, 2))  # late and subsumed
    assert d.completed == 9


messages = st.one_of(
    st.builds(Restore, st.integers(0, 6), st.none()),
    st.builds(
        Resume,
        st.integers(0, 6),
        st.dictionaries(st.sampled_from(["t0", "t1"]), st.sampled_from(["m1", "m2", "m3"])),
    ),
    st.builds(
        Heartbeat,
        st.sampled_from(["m1", "m2", "m3"]),
        st.just(()),
        st.just(1),
        st.just(""),
        st.sampled_from(["", "http://a:1", "http://b:2"]),
    ),
)


@settings(max_examples=300)
@given(st.lists(messages, max_size=25), st.sampled_from(["t0", "t1"]), st.booleans(), st.booleans())
def test_routing_never_answers_for_a_task_the_coordinator_gave_elsewhere(
    history: list[Message], task: str, running: bool, forwarded: bool
) -> None:
    d = Directory(me="m1")
    d.learn(history)
    # The model: the newest Restore's attempt, and whether a Resume of it followed.
    attempt, resumed, owners, urls = 0, True, {}, {}
    for msg in history:
        if isinstance(msg, Restore) and msg.attempt > attempt:
            attempt, resumed = msg.attempt, False
        elif isinstance(msg, Resume) and msg.attempt >= attempt:
            attempt, resumed, owners = msg.attempt, True, msg.owners
        elif isinstance(msg, Heartbeat) and msg.query:
            urls[msg.member] = msg.query
    route = d.route(task, running, forwarded=forwarded)
    owner = owners.get(task) if resumed else None
    if isinstance(route, Local):
        assert resumed and owner == "m1" and running
    elif isinstance(route, Forward):
        assert resumed and owner not in (None, "m1") and not forwarded
        assert (route.member, route.url) == (owner, urls[owner])
    else:
        assert not (resumed and owner == "m1" and running)
        assert not (resumed and owner not in (None, "m1") and not forwarded and owner in urls)


def test_without_a_coordinator_only_local_tasks_answer() -> None:
    d = Directory(me="w", coordinated=False)
    assert d.route("s-0", True, forwarded=False) == Local("s-0")
    assert isinstance(d.route("s-1", False, forwarded=False), Moving)
