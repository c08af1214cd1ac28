"""A partition's watermark offsets, asked of its leader, and the metadata request that
finds a leader (or controller) anew after a broker died.

librdkafka sends such requests to the broker its metadata cache names, and a client
that neither fetches nor produces on the partition has no reason to refresh that cache:
after a kill -9 of the leader every ask went to the dead broker and timed out, although
the cluster had elected a new leader within seconds (found by
``integration/test_cluster_chaos.py``: a worker starting then died at its first
watermark query).
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kstream.kafka.reachability import Backoff, Reachability

__all__ = ["RETRIABLE_OFFSET_ERRORS", "refresh_metadata", "watermark_offsets"]


RETRIABLE_OFFSET_ERRORS = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,  # a new topic this client's metadata does not know yet
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        # A request in flight on a broker handle that librdkafka replaced (the bootstrap
        # address's handle once the cluster's own brokers are known): asked again.
        KafkaError._DESTROY_BROKER,
        # A leader just elected (its broker's predecessor killed) whose high watermark
        # has not caught up yet (KIP-207): asked again in a moment.
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)


def watermark_offsets(
    consumer: Consumer,
    topic: str,
    partition: int,
    timeout: float = 30.0,
    *,
    reach: Reachability | None = None,
) -> tuple[int, int]:
    """(low, high) watermark of a partition, asked of its leader.

    Asked again on what passes: the leader of a new topic still being elected
    (NOT_LEADER_FOR_PARTITION for a moment after creation), and a leader that is gone.
    librdkafka asks the leader its metadata cache names, and a client that neither
    fetches nor produces on the partition has no reason to refresh that cache: after
    a kill -9 of the leader every ask goes to the dead broker and times out, although
    a new leader was elected seconds later. So each failed ask is followed by a
    metadata request for the topic.

    Without ``reach``: KafkaException past ``timeout``. With it (a process's view of
    the brokers, bounded by --max-outage): past ``timeout``, or at once when no broker
    answers the metadata request, an outage (one log line when it starts, one when
    it ends), and BrokerOutage once it outlasts the bound.
    """
    tp = TopicPartition(topic, partition)
    deadline = time.monotonic() + timeout
    backoff = Backoff(0.1, 2.0)
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                tp, timeout=min(5.0, max(1.0, deadline - time.monotonic())), cached=False
            )
        except KafkaException as e:
            err = e.args[0]
            if err.code() not in RETRIABLE_OFFSET_ERRORS:
                raise
            what = f"watermark offsets of {topic} [{partition}]: {err.str()}"
            answered = refresh_metadata(consumer, 5.0, topic)  # the leader may have moved
            if reach is None:
                if time.monotonic() > deadline:
                    raise
            elif not answered or time.monotonic() > deadline:
                reach.failed(what if answered else f"{what}; no metadata answer")
                reach.check()
            time.sleep(backoff.next())
            continue
        if reach is not None:
            reach.ok()
        return int(low), int(high)


def refresh_metadata(client: Any, timeout: float, topic: str | None = None) -> bool:
    """A metadata request (for ``topic``, else for all topics), so librdkafka learns the
    cluster's controller and the partitions' leaders anew; whether a broker answered.

    An admin client sends DescribeConfigs to the controller it last heard of, and while
    that broker is down every ask fails with "Timed out waiting for controller"; a
    consumer asks offsets of the leader in its cache (see ``watermark_offsets``)."""
    try:
        if topic is None:
            client.list_topics(timeout=timeout)
        else:
            client.list_topics(topic, timeout=timeout)
    except KafkaException:
        return False  # the next ask says what is wrong
    return True
