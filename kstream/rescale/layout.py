"""Where the record key sits in each stateful operator's tables, and which state is not
keyed (rescaling: :mod:`kstream.rescale`).

Every table of an operator is ``<operator id>.<suffix>`` (:mod:`kstream.plan.operators`)
and its keys are tuples (:mod:`kstream.state.keys`) whose layout the operator chooses.
The record key is one component of that tuple, at a fixed index per operator kind and
table suffix:

=============  ==========================================  =====================
kind           table: key layout                            record key at
=============  ==========================================  =====================
window         ``acc`` (fixed): ``(end, start, key)``       2
window         ``sessions``: ``(key, start)``               0
window         ``timers``: ``(end, key, start)`` (sessions)
               or ``(end, key)`` (sliding)                  1
window         ``buffer``/``excluded`` (sliding): ``(key, t)`` 0
window         ``gc`` (sliding): ``(t + span, key, t)``     1
rolling        ``acc``: ``(key,)``                          0
process        ``s.<state>``: ``(key[, map key])``          0
process        ``ttl``: ``(expires, state, key[, map key])``  2
process        ``et``/``pt`` timers: ``(timestamp, key)``   1
join_table     ``table``: ``(key,)``                        0
join_window    ``left``/``right``: ``(key, t)``             0
join_window    ``left_un``/``right_un``: ``(key, t, j)``    0
join_window    ``left_exp``/``right_exp``: ``(t, key)``     1
=============  ==========================================  =====================

Not keyed: ``meta`` (the operator's watermark ``("wm",)``, a sliding window's count
of ``excluded`` entries ``("excluded",)``, a firing in progress ``firing.*``) is
merged (:func:`merge_meta`); ``schemas`` (the Avro schema history of typed state) is
the same kind of record in every task and is copied to every new task. Anything else
is refused: a table or meta entry this module does not know cannot be split soundly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["COPY", "META", "RescaleError", "key_index", "merge_meta"]

COPY = -1  # the table is copied whole to every new task
META = -2  # the operator's non-keyed bookkeeping: merged (merge_meta)

_KEY_AT: dict[str, dict[str, int]] = {
    "window": {
        "acc": 2,
        "sessions": 0,
        "timers": 1,
        "buffer": 0,
        "excluded": 0,
        "gc": 1,
    },
    "rolling": {"acc": 0},
    "process": {"ttl": 2, "et": 1, "pt": 1},
    "join_table": {"table": 0},
    "join_window": {
        "left": 0,
        "right": 0,
        "left_un": 0,
        "right_un": 0,
        "left_exp": 1,
        "right_exp": 1,
    },
}


class RescaleError(ValueError):
    """State that cannot be rescaled as asked; the message names the operator or stage
    and what to do."""


def key_index(operator: str, kind: str, suffix: str) -> int:
    """Where the record key is in the keys of table ``<operator>.<suffix>`` of an
    operator of ``kind`` (an index, ``COPY`` or ``META``); RescaleError if unknown."""
    if suffix == "meta":
        return META
    if suffix == "schemas":
        return COPY
    if kind == "process" and suffix.startswith("s."):
        return 0
    at = _KEY_AT.get(kind, {}).get(suffix)
    if at is None:
        raise RescaleError(
            f"operator {operator!r} ({kind}): its table {suffix!r} is not known keyed state, "
            f"so it cannot be split between tasks (rescaling refused; keep the partition counts)"
        )
    return at


def merge_meta(
    operator: str, tasks: Iterable[tuple[str, Mapping[tuple[Any, ...], Any]]]
) -> dict[tuple[Any, ...], Any]:
    """The ``meta`` entries every new task of ``operator`` starts with, from the old tasks'
    ``(task, entries)``: the lowest watermark (no pending window, session or timer of
    a task behind the others is skipped: firing scans from the operator's watermark;
    none when a task has none: it never advanced);
    ``excluded`` is recounted by the caller. RescaleError for a firing in progress or
    an entry this module does not know."""
    wm: int | None = None
    unset = False  # a task whose operator never advanced: its watermark is the lowest
    for task, entries in tasks:
        unset = unset or ("wm",) not in entries
        for key, value in entries.items():
            name = str(key[0]) if key else ""
            if name == "wm":
                wm = int(value) if wm is None else min(wm, int(value))
            elif name == "excluded":
                continue
            elif name.startswith("firing."):
                raise RescaleError(
                    f"operator {operator!r} was firing windows/timers in slices in task {task} "
                    f"when this state was taken: take the savepoint again (kstream savepoint "
                    f"--stop) and rescale that one"
                )
            else:
                raise RescaleError(
                    f"operator {operator!r}: its non-keyed entry {key!r} (task {task}) cannot "
                    f"be split between tasks (rescaling refused; keep the partition counts)"
                )
    return {} if wm is None or unset else {("wm",): wm}
