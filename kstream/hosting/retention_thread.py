"""The coordinator's retention, off its loop: one thread deletes what no checkpoint needs.

Retention after a completion reads the new checkpoint's metadata and manifests (what it
read before is cached across runs: ``RetentionCache``, kept by the caller) and deletes
files (on a local disk 5-10 ms an unlink, on S3 a request each): tens of
milliseconds the coordinator's loop used to spend before it read the next
acknowledgement or sent the next trigger. Flink's checkpoint cleaner runs
asynchronously too. Requests made while a run is in progress coalesce into one more
run with the latest ``retained``: retention is idempotent and only ever catches up.
The concurrency argument is :mod:`kstream.snapshots.retention`'s (uploads run in other
processes at the same time already); the coordinator's own writes (metadata of newer
checkpoints) can only make a run keep more.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class RetentionThread:
    """Runs ``apply(retained)`` on one daemon thread, started at the first request."""

    def __init__(self, apply: Callable[[int], None]) -> None:
        self._apply = apply
        self._cond = threading.Condition()
        self._pending: int | None = None
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def request(self, retained: int) -> None:
        """Run retention keeping ``retained`` checkpoints soon (after the current run)."""
        with self._cond:
            if self._closed:
                raise RuntimeError("retention thread closed")
            self._pending = retained
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="retention", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def idle(self, timeout: float | None = None) -> bool:
        """Wait until no run is pending or running; False when ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Finish the requested runs (at most ``timeout`` seconds), then stop the thread.

        A run still going after that is left to the daemon thread: what it has not
        deleted yet is garbage the next coordinator's retention finds again.
        """
        if not self.idle(timeout):
            log.warning("retention still running after %.0f s; left unfinished", timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                retained, self._pending = self._pending, None
                self._busy = True
            try:
                self._apply(retained)
            except Exception:  # an unexpected bug must not stop later runs
                log.exception("retention (keep %d) failed", retained)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
