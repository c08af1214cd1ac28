"""Progress of long work (restores, downloads, `kstream dev produce`) as periodic log lines.

One line at most every ``every`` seconds: done/total items and bytes, percentage,
rate and ETA; a closing line if the work took longer than one period. Short work
logs nothing extra.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


class Progress:
    """Counts ``items`` (files, records) and bytes of work of known or unknown size."""

    def __init__(
        self,
        what: str,
        *,
        items: str = "files",
        total_items: int | None = None,
        total_bytes: int | None = None,
        every: float = 2.0,
        log: logging.Logger | None = None,
        emit: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.items = items
        self.total_items = total_items
        self.total_bytes = total_bytes
        self.every = every
        self.clock = clock
        self._emit = emit or (log or logging.getLogger("kstream.progress")).info
        self.done_items = 0
        self.done_bytes = 0
        self._start = clock()
        self._next = self._start + every
        self.lines = 0

    def advance(self, items: int = 1, nbytes: int = 0) -> None:
        """``items`` more done, ``nbytes`` more bytes; logs when a period has passed."""
        self.done_items += items
        self.done_bytes += nbytes
        now = self.clock()
        if now >= self._next:
            self._next = now + self.every
            self._line(now, final=False)

    def finish(self) -> None:
        """The closing line, if any progress line was written."""
        if self.lines:
            self._line(self.clock(), final=True)

    def _line(self, now: float, *, final: bool) -> None:
        elapsed = max(now - self._start, 1e-9)
        parts = [f"{self.done_items}" + (f"/{self.total_items}" if self.total_items else "")]
        parts[0] += f" {self.items}"
        if self.total_bytes:
            pct = 100.0 * self.done_bytes / self.total_bytes
            parts.append(f"{_size(self.done_bytes)} of {_size(self.total_bytes)} ({pct:.0f}%)")
        elif self.done_bytes:
            parts.append(_size(self.done_bytes))
        if self.done_bytes:
            parts.append(f"{_size(self.done_bytes / elapsed)}/s")
        else:
            parts.append(f"{self.done_items / elapsed:.0f} {self.items}/s")
        if final:
            parts.append(f"done in {elapsed:.1f}s")
        else:
            eta = self._eta(elapsed)
            if eta is not None:
                parts.append(f"ETA {eta:.0f}s")
        self.lines += 1
        self._emit(f"{self.what}: {', '.join(parts)}")

    def _eta(self, elapsed: float) -> float | None:
        if self.total_bytes and self.done_bytes:
            return elapsed * (self.total_bytes - self.done_bytes) / self.done_bytes
        if self.total_items and self.done_items:
            return elapsed * (self.total_items - self.done_items) / self.done_items
        return None
