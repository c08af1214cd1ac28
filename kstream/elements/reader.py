"""Decoding of a task's input batches: serdes, timestamp extractor, timestamp checks.

A batch is decoded in one pass; only if anything in it fails is it decoded again
record by record to find which records fail and why. **This path cannot fail**
except by ``SerdeUnavailable`` (an outage of a service a serde needs, e.g. the schema
registry: it fails the task, never a record):
every other exception a serde or an extractor raises (``RecursionError``, ``MemoryError``
and user exceptions included) makes that record a failure with a reason, and so
does a timestamp that is not an ``int`` within Kafka's timestamp range
``[MIN_TIMESTAMP, MAX_TIMESTAMP]`` — an extractor returning ``None``, a string, a
float or ``10**20``, or a record without a Kafka timestamp. The caller sends
failures to the dead-letter topic.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from kstream.api.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from kstream.serde import Serde, SerdeError, SerdeUnavailable

__all__ = ["Reader", "describe_error"]

_REPR_CHARS = 100


def describe_error(e: BaseException) -> str:
    """``Type: message`` of ``e``, even when its ``__str__`` itself fails."""
    try:
        return f"{type(e).__name__}: {e}"
    except Exception:
        return f"{type(e).__name__} (its message could not be formatted)"


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
    return text if len(text) <= _REPR_CHARS else text[:_REPR_CHARS] + "..."


def _bad_timestamp(t: Any, extracted: bool) -> tuple[int | None, str]:
    """``(timestamp, "")`` for a valid timestamp, else ``(None, reason)``."""
    if isinstance(t, bool):
        valid = None
    else:
        try:
            valid = operator.index(t)  # int and int-like (numpy), never float or str
        except Exception:
            valid = None
    if valid is not None and MIN_TIMESTAMP <= valid <= MAX_TIMESTAMP:
        return valid, ""
    if not extracted and t is None:
        return None, "record has no timestamp and the source has no timestamp extractor"
    who = "timestamp extractor returned" if extracted else "record timestamp is"
    return None, (
        f"{who} {_short_repr(t)}: not an int within Kafka's timestamp range "
        f"[{MIN_TIMESTAMP}, {MAX_TIMESTAMP}]"
    )


class Reader:
    """Decodes one input topic's batches for the operator ``entry``."""

    def __init__(
        self,
        entry: Any,
        key_serde: Serde,
        value_serde: Serde,
        extractor: Callable[[Any, int], int] | None,
    ) -> None:
        self.entry = entry
        self.key_serde, self.value_serde = key_serde, value_serde
        self.kd = key_serde.deserialize
        self.vd = value_serde.deserialize
        self.kdm = key_serde.deserialize_many
        self.vdm = value_serde.deserialize_many
        self.extractor = extractor

    def decode(
        self, raw: Sequence[Sequence[Any]], fields: tuple[int, int, int] = (0, 1, 2)
    ) -> tuple[list[Any], list[Any], list[int], list[tuple[int, str]]]:
        """``(keys, values, timestamps, failures)`` from the ``fields`` (key, value,
        timestamp indexes) of each raw record; failures are ``(index, reason)``."""
        ex = self.extractor
        ki, vi, ti = fields
        try:
            keys = self.kdm([r[ki] for r in raw])
            values = self.vdm([r[vi] for r in raw])
            if ex is None:
                stamps = [r[ti] for r in raw]
                ok = None not in stamps
            else:
                stamps = [ex(v, r[ti]) for v, r in zip(values, raw, strict=True)]
                ok = all(type(t) is int for t in stamps)
            if ok and (
                not stamps or (min(stamps) >= MIN_TIMESTAMP and max(stamps) <= MAX_TIMESTAMP)
            ):
                return keys, values, stamps, []
        except SerdeUnavailable:
            raise  # an outage (e.g. the schema registry is down) fails the task
        except Exception:
            pass  # the slow path below finds which records fail and why
        return self._decode_each(raw, fields)

    def _decode_each(
        self, raw: Sequence[Sequence[Any]], fields: tuple[int, int, int]
    ) -> tuple[list[Any], list[Any], list[int], list[tuple[int, str]]]:
        kd, vd, ex = self.kd, self.vd, self.extractor
        ki, vi, ti = fields
        keys, values, stamps, failures = [], [], [], []
        for i, r in enumerate(raw):
            try:
                k = kd(r[ki])
            except SerdeUnavailable:
                raise
            except SerdeError as e:
                failures.append((i, f"key: {e}"))
                continue
            except Exception as e:
                failures.append((i, f"key serde {self.key_serde.name} failed: {describe_error(e)}"))
                continue
            try:
                v = vd(r[vi])
            except SerdeUnavailable:
                raise
            except SerdeError as e:
                failures.append((i, str(e)))
                continue
            except Exception as e:
                failures.append(
                    (i, f"value serde {self.value_serde.name} failed: {describe_error(e)}")
                )
                continue
            if ex is None:
                t, reason = _bad_timestamp(r[ti], extracted=False)
            else:
                try:
                    got = ex(v, r[ti])
                except Exception as e:
                    failures.append((i, f"timestamp extractor failed: {describe_error(e)}"))
                    continue
                t, reason = _bad_timestamp(got, extracted=True)
            if t is None:
                failures.append((i, reason))
                continue
            keys.append(k)
            values.append(v)
            stamps.append(t)
        return keys, values, stamps, failures
