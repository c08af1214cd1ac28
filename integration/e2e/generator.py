"""The crash tests' input: records produced in order at a steady rate from a thread.

Before the first late record the generator can wait for a gate (committed output),
so that the record is late for a watermark the job has already passed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from integration.e2e.harness import HarnessError
from kstream.kafka.clients import make_producer


@dataclass(frozen=True)
class InputRecord:
    """One record the generator writes. ``kind``: ok | late | bad (malformed)."""

    topic: str  # the real (renamed) topic
    partition: int
    key: bytes | None
    value: bytes
    ts: int
    kind: str = "ok"


class Generator(threading.Thread):
    """Produces ``records`` in order at ``rate`` records/s; before the first ``late``
    record it waits for ``late_gate()`` (with a deadline)."""

    def __init__(
        self,
        bootstrap: str,
        records: Sequence[InputRecord],
        rate: float,
        late_gate: Callable[[], bool] | None = None,
        late_gate_timeout: float = 90.0,
    ) -> None:
        super().__init__(daemon=True, name="e2e-generator")
        self.records = records
        self.rate = rate
        self.late_gate = late_gate
        self.late_gate_timeout = late_gate_timeout
        self.produced = 0
        self.error: BaseException | None = None
        self.finished_at: float | None = None
        self._producer = make_producer(bootstrap, extra={"linger.ms": 5})
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # reported by the test through .error
            self.error = e

    def _run(self) -> None:
        errors: list[str] = []

        def on_delivery(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))

        t0 = time.monotonic()
        gated = self.late_gate is None
        for i, r in enumerate(self.records):
            if self._halt.is_set():
                return
            if r.kind == "late" and not gated:
                self._producer.flush(30)
                deadline = time.monotonic() + self.late_gate_timeout
                assert self.late_gate is not None
                while not self.late_gate():
                    if time.monotonic() > deadline:
                        raise HarnessError("late-record gate did not open (no committed output)")
                    time.sleep(0.2)
                gated = True
                t0 = time.monotonic() - i / self.rate  # keep the pace from here
            due = t0 + i / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                self._halt.wait(delay)  # pacing the input, not synchronisation
            self._producer.produce(
                r.topic,
                r.value,
                r.key,
                partition=r.partition,
                timestamp=r.ts,
                on_delivery=on_delivery,
            )
            self._producer.poll(0)
            self.produced += 1
        left = self._producer.flush(30)
        if left or errors:
            raise HarnessError(f"generator: {left} undelivered, errors {errors[:3]}")
        self.finished_at = time.time()

    def halt(self) -> None:
        self._halt.set()
