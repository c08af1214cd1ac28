"""Dead-letter writer on a real broker: exact headers, counts, FAIL mode."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from integration.edge_tools import read_all
from kstream.config import OnBadRecord
from kstream.kafka.clients import AdminClient, ensure_topics
from kstream.kafka.dlq import BadRecordError, DeadLetterWriter, dlq_topic_spec

pytestmark = pytest.mark.integration


def test_dead_letters_carry_original_bytes_and_exact_headers(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("dlq")
    ensure_topics(kafka_admin, [dlq_topic_spec(app)])
    w = DeadLetterWriter(app, kafka_bootstrap)
    try:
        w.handle(
            "orders",
            3,
            1234,
            1_700_000_000_001,
            b"k1",
            b"\xff\xfe",
            "invalid JSON: Expecting value",
        )
        w.handle("payments", 0, 0, None, None, b"v", "not valid UTF-8")
        w.handle("orders", 1, 9, 5, b"k3", None, "Avro: EOF")
        w.flush()
        assert w.count == 3
        assert dict(w.by_topic) == {"orders": 2, "payments": 1}
    finally:
        w.close()
    got = read_all(kafka_bootstrap, f"{app}.dlq")
    assert [(r.key, r.value, r.headers) for r in got] == [
        (
            b"k1",
            b"\xff\xfe",
            [
                ("ks.error", b"invalid JSON: Expecting value"),
                ("ks.topic", b"orders"),
                ("ks.partition", b"3"),
                ("ks.offset", b"1234"),
                ("ks.timestamp", b"1700000000001"),
            ],
        ),
        (
            None,
            b"v",
            [
                ("ks.error", b"not valid UTF-8"),
                ("ks.topic", b"payments"),
                ("ks.partition", b"0"),
                ("ks.offset", b"0"),
                ("ks.timestamp", b"-1"),
            ],
        ),
        (
            b"k3",
            None,
            [
                ("ks.error", b"Avro: EOF"),
                ("ks.topic", b"orders"),
                ("ks.partition", b"1"),
                ("ks.offset", b"9"),
                ("ks.timestamp", b"5"),
            ],
        ),
    ]


def test_fail_mode_raises_with_the_record_position_and_writes_nothing(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("dlq-fail")
    ensure_topics(kafka_admin, [dlq_topic_spec(app)])
    w = DeadLetterWriter(app, kafka_bootstrap, OnBadRecord.FAIL)
    with pytest.raises(
        BadRecordError, match=r"cannot decode record orders\[2\]@77: bad bytes"
    ) as exc:
        w.handle("orders", 2, 77, 1, b"k", b"v", "bad bytes")
    assert (exc.value.topic, exc.value.partition, exc.value.offset, exc.value.reason) == (
        "orders",
        2,
        77,
        "bad bytes",
    )
    w.flush()
    assert w.count == 0
    assert read_all(kafka_bootstrap, f"{app}.dlq") == []
