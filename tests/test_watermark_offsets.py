"""``watermark_offsets`` asks again on what passes (no broker: a consumer stand-in)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from kstream.kafka.clients import KafkaError, KafkaException, watermark_offsets


class _Consumer:
    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked = 0

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.asked += 1
        a = self.answers.pop(0)
        if isinstance(a, KafkaError):
            raise KafkaException(a)
        return cast(tuple[int, int], a)


@pytest.mark.parametrize(
    "passing",
    [KafkaError._DESTROY_BROKER, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._TRANSPORT],
)
def test_an_error_that_passes_is_asked_again(passing: int) -> None:
    c = _Consumer(KafkaError(passing), (3, 9))
    assert watermark_offsets(cast(Any, c), "t", 0, timeout=10.0) == (3, 9)
    assert c.asked == 2


def test_any_other_error_is_raised_at_once() -> None:
    c = _Consumer(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), (3, 9))
    with pytest.raises(KafkaException):
        watermark_offsets(cast(Any, c), "t", 0, timeout=10.0)
    assert c.asked == 1
