"""Every kind of bad input reaches ``<app>.dlq`` with its reason; the good output is exact.

A real job (`kstream run --bounded`) on a real broker reads a JSON source with a
timestamp extractor and an Avro source, each holding good records between bad ones
of every kind issue 13 lists; the dead-letter writer truncates what the topic
cannot take. Under ``on_error="dead_letter"`` a map raising on a record and a timer
callback raising (a dead letter describing the timer) are dead-lettered too.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from integration.edge_tools import read_all
from kstream.api.time import MAX_TIMESTAMP
from kstream.kafka.clients import (
    AdminClient,
    TopicSpec,
    ensure_topics,
    make_producer,
    max_message_bytes,
)
from kstream.kafka.dlq import HEADER_ROOM_BYTES, TRUNCATED_BYTES, DeadLetterWriter, dlq_topic_spec

T0 = 1_767_225_600_000
BIG = 5 * 1024 * 1024
SOURCE_MAX = 8 * 1024 * 1024

TOPOLOGY = """
from kstream.api import Topology
from kstream.serde import AvroSerde


def event_time(value, kafka_ts):
    kind = value.get("kind")
    if kind == "raise":
        raise ZeroDivisionError("no time for this")
    if kind == "none":
        return None
    if kind == "str":
        return "1700000000000"
    if kind == "float":
        return 1.5
    if kind == "huge":
        return 10**20
    return value["t"]


def number(value):
    if value.get("boom"):
        raise RuntimeError("boom")
    return value["n"]


topology = Topology("bad", on_error="dead_letter")
topology.source("{json_topic}", value_serde="json", timestamp=event_time).map(
    number, name="number"
).to("{out_topic}", value_serde="json")
topology.source(
    "{avro_topic}", value_serde=AvroSerde({{"type": "array", "items": "null"}})
).map(len).to("{out_topic}", value_serde="json")


class Alarm:
    def process(self, key, value, ts, state, out):
        state.register_event_timer(ts + 10)

    def on_timer(self, key, at, state, out):
        out(at - {t0})  # discarded when the callback raises
        if key == "bad":
            raise LookupError("no alarm for " + key)


topology.source("{timer_topic}", keyed=True).process(Alarm, name="alarm").to(
    "{out_topic}", value_serde="json"
)
"""


def _rng(v: object) -> str:
    return f"timestamp extractor returned {v}: not an int within Kafka's timestamp range [0, {MAX_TIMESTAMP}]"


def test_every_bad_kind_is_dead_lettered_once_with_its_reason_and_the_good_output_is_exact(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    json_topic, avro_topic, timer_topic = (
        unique_name("json"),
        unique_name("avro"),
        unique_name("tm"),
    )
    out_topic, app = unique_name("out"), unique_name("bad")
    big_config = {"max.message.bytes": str(SOURCE_MAX)}
    ensure_topics(
        kafka_admin,
        [
            TopicSpec(json_topic, 1, big_config),
            TopicSpec(avro_topic, 1),
            TopicSpec(timer_topic, 1),
            TopicSpec(out_topic, 1),
        ],
    )
    topology = tmp_path / "bad_topology.py"
    topology.write_text(
        TOPOLOGY.format(
            json_topic=json_topic,
            avro_topic=avro_topic,
            timer_topic=timer_topic,
            out_topic=out_topic,
            t0=T0,
        )
    )
    undecodable = b"\xff" * BIG
    deep = b"[" * 100_000
    digits = b"7" * 5000
    # (value, expected reason or None for a good record); key = offset as text
    json_records: list[tuple[bytes, str | None]] = [
        (b'{"n": 1, "t": %d}' % T0, None),
        (undecodable, "invalid JSON: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
        (deep, "invalid JSON: nested too deeply (100000 bytes): maximum recursion depth exceeded while decoding a JSON array from a unicode string"),
        (b'{"n": 2, "kind": "raise"}', "timestamp extractor failed: ZeroDivisionError: no time for this"),
        (b'{"n": 3, "kind": "none"}', _rng("None")),
        (b'{"n": 4, "kind": "str"}', _rng("'1700000000000'")),
        (b'{"n": 5, "kind": "float"}', _rng("1.5")),
        (b'{"n": 6, "kind": "huge"}', _rng(10**20)),
        (digits, "invalid JSON: integer of 5000 digits: Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits; use sys.set_int_max_str_digits() to increase the limit"),
        (b'{"n": 7, "t": %d}' % (T0 + 1), None),
    ]  # fmt: skip
    six_bytes = b"\x80\xda\xc4\x09\x00"  # a block of 10 000 000 nulls, then the end
    avro_records: list[tuple[bytes, str | None]] = [
        (b"\x06\x00", None),  # three nulls
        (six_bytes, "invalid Avro data: more than 65536 zero-byte array items"),
        (b"\x02\x00", None),  # one null
    ]
    p = make_producer(kafka_bootstrap, extra={"message.max.bytes": SOURCE_MAX})
    for topic, records in ((json_topic, json_records), (avro_topic, avro_records)):
        for i, (value, _reason) in enumerate(records):
            p.produce(topic, value, str(i).encode(), partition=0, timestamp=T0 + 1000 + i)
    # A user function raising (on_error="dead_letter"): the record as it entered the map.
    p.produce(json_topic, b'{"n": 8, "t": %d, "boom": true}' % T0, b"boom", partition=0)
    # A timer callback raising: timers at T0 + 15 (ok: emits 15) and T0 + 17 (bad).
    p.produce(timer_topic, b"{}", b"ok", partition=0, timestamp=T0 + 5)
    p.produce(timer_topic, b"{}", b"bad", partition=0, timestamp=T0 + 7)
    assert p.flush(60) == 0

    run = subprocess.run(
        [*CLI, "run", str(topology), "--bootstrap", kafka_bootstrap, "--app-id", app,
         "--bounded", "--store", f"file://{tmp_path}/store", "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=180, cwd=REPO,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]

    assert sorted(json.loads(r.value or b"") for r in read_all(kafka_bootstrap, out_topic)) == [
        1,
        1,
        3,
        7,
        15,
    ]
    expected = [
        (topic, i, value, reason, T0 + 1000 + i)
        for topic, records in ((json_topic, json_records), (avro_topic, avro_records))
        for i, (value, reason) in enumerate(records)
        if reason is not None
    ]
    got = []
    letters = read_all(kafka_bootstrap, f"{app}.dlq")
    (boom,) = [r for r in letters if r.key == b"boom"]
    assert (boom.value, dict(boom.headers)) == (
        b'{"n":8,"t":%d,"boom":true}' % T0,
        {
            "ks.error": b"operator 'number' raised RuntimeError: boom",
            "ks.topic": json_topic.encode(),
            "ks.partition": b"0",
            "ks.offset": b"-1",
            "ks.timestamp": b"%d" % T0,
            "ks.operator": b"number",
        },
    )
    (alarm,) = [r for r in letters if r.key == b"bad"]
    assert (alarm.value, dict(alarm.headers)) == (
        b'{"timer":"event","timestamp":%d}' % (T0 + 17),
        {
            "ks.error": b"operator 'alarm' raised LookupError: no alarm for bad "
            b"(on_timer, event-time timer at %d)" % (T0 + 17),
            "ks.topic": b"",
            "ks.partition": b"-1",
            "ks.offset": b"-1",
            "ks.timestamp": b"%d" % (T0 + 17),
            "ks.operator": b"alarm",
        },
    )
    for r in letters:
        if r is boom or r is alarm:
            continue
        h = dict(r.headers)
        assert r.key == h["ks.offset"], "the original key (the offset as text) is kept"
        assert "ks.truncated" not in h
        got.append(
            (
                (h["ks.topic"] or b"").decode(),
                int(h["ks.offset"] or b""),
                r.value,
                (h["ks.error"] or b"").decode(),
                int(h["ks.timestamp"] or b""),
            )
        )
    assert sorted(got, key=lambda g: (g[0], g[1])) == sorted(expected, key=lambda g: (g[0], g[1]))
    dlq_max = max_message_bytes(kafka_admin, [f"{app}.dlq"])
    assert dlq_max == SOURCE_MAX + HEADER_ROOM_BYTES


def test_a_dead_letter_the_topic_cannot_take_is_written_once_truncated(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("dlq-small")
    spec = dlq_topic_spec(app)
    ensure_topics(kafka_admin, [TopicSpec(spec.name, 1, {"max.message.bytes": str(200_000)})])
    w = DeadLetterWriter(app, kafka_bootstrap)
    big = bytes(range(256)) * 2000  # 512 000 bytes: over the topic's limit
    try:
        w.handle("src", 0, 41, 7, b"k", big, "invalid JSON: something")
        w.handle("src", 0, 42, 8, b"k2", b"small", "invalid JSON: other")
        w.flush()
        assert (w.count, w.truncated) == (2, 1)
    finally:
        w.close()
    got = read_all(kafka_bootstrap, spec.name)
    # (both were refused in one batch; the small one is written again unchanged)
    assert sorted((r.key, r.value, r.headers) for r in got) == [
        (
            b"k",
            big[:TRUNCATED_BYTES],
            [
                ("ks.error", b"invalid JSON: something"),
                ("ks.topic", b"src"),
                ("ks.partition", b"0"),
                ("ks.offset", b"41"),
                ("ks.timestamp", b"7"),
                ("ks.truncated", b"value 512000 -> 65536 bytes"),
            ],
        ),
        (
            b"k2",
            b"small",
            [
                ("ks.error", b"invalid JSON: other"),
                ("ks.topic", b"src"),
                ("ks.partition", b"0"),
                ("ks.offset", b"42"),
                ("ks.timestamp", b"8"),
            ],
        ),
    ]
