"""Work in steps: a generator that yields between slices of its work (each a fraction of
a millisecond) and returns its result, so that one thread can do it between other things
without ever making them wait for more than a slice (the query sidecar opens snapshots
between its answers: :mod:`kstream.query.pinned`)."""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")

Steps = Generator[None, None, T]
"""Work in steps, returning a ``T``."""


def drain(steps: Steps[T]) -> T:
    """Do all the steps now; their result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
