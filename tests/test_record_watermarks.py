"""Where a source batch is cut for per-record watermarks (``watermark_cuts``, pure)."""

from __future__ import annotations

from kstream.elements.events import MAX_TS, MIN_TS
from kstream.runtime.recordwatermarks import watermark_cuts

asked: list[int] = []


def no_others() -> int:
    asked.append(1)
    return MAX_TS


def test_in_order_and_bounded_disorder_make_no_cut_and_do_not_ask_for_the_others() -> None:
    asked.clear()
    assert watermark_cuts([1, 2, 5, 9], 0, MIN_TS, no_others, MIN_TS) == (9, [])
    assert watermark_cuts([10, 7, 12], 5, MIN_TS, no_others, MIN_TS) == (7, [])
    assert asked == []
    # The partition's watermark never goes back.
    assert watermark_cuts([1, 2], 0, 50, no_others, MIN_TS) == (50, [])


def test_a_record_behind_the_watermark_cuts_the_batch_before_it() -> None:
    # 20 is behind 30's watermark: advance to 30 before record 2; 25 then is behind 40.
    wm, cuts = watermark_cuts([30, 40, 20, 50, 25], 0, MIN_TS, no_others, MIN_TS)
    assert (wm, cuts) == (50, [(2, 40), (4, 50)])


def test_the_other_inputs_cap_the_cut_and_a_reached_watermark_makes_none() -> None:
    # Another input at 35 caps the task watermark: 20 is behind 35, not 40.
    assert watermark_cuts([30, 40, 20], 0, MIN_TS, lambda: 35, MIN_TS) == (40, [(2, 35)])
    # The task is at 40 already: nothing to advance to.
    assert watermark_cuts([30, 40, 20], 0, MIN_TS, no_others, 40) == (40, [])
    # A record behind only its partition's watermark but not the capped task's: no cut.
    assert watermark_cuts([30, 40, 20], 0, MIN_TS, lambda: 10, MIN_TS) == (40, [])
