"""Replayed coordinator messages: recognised by their stamp and skipped (issue 37).

Every signed coordinator message carries a *stamp* inside its signature: the
coordinator's epoch (its incarnation) and, since this rule, a sequence number that
the coordinator raises with every message it writes (``"seq"``, from 1 per epoch).
A copy of a genuine signed message written back to ``<app>.control`` by any client
verifies — the signature covers the bytes, not the offset — so the signature alone
cannot tell a replay; the stamp's order can:

* genuine messages appear on the (one-partition, totally ordered) topic in strictly
  increasing stamp order: one coordinator writes its sequence in order, one
  transaction after the other; a successor first fences its predecessor
  (``init_transactions``: no later write of the old epoch can commit), then reads the
  topic to its end and takes an epoch above every epoch it read;
* compaction removes records but never reorders the survivors, and the record with
  the highest stamp is the newest coordinator record of its key, so it survives;
* hence a signed message whose stamp is not above the highest stamp a reader has
  accepted is a copy of an earlier one (of this or an older epoch, any type): every
  reader — coordinator or worker — skips it, logs and counts it, and acts on nothing.

A message of a newer epoch is a successor's (the coordinator that reads one it did
not write stands down), never a replay: nobody but a coordinator holding the key can
sign a new stamp.

Messages written before this rule (no ``"seq"``: ``Stamp.seq`` is None) are accepted
while their epoch is the newest seen — within such an epoch copies cannot be told
from originals, as before — and skipped once a newer epoch has been read (the first
coordinator after an upgrade starts one).
"""

from __future__ import annotations

from typing import NamedTuple


class Stamp(NamedTuple):
    """A signed message's coordinator epoch and sequence number (None: written before
    sequence numbers)."""

    epoch: int
    seq: int | None


class ReplayGuard:
    """The newest stamp accepted so far; ``admit`` says whether a stamp is newer."""

    def __init__(self) -> None:
        self.last: Stamp | None = None
        self.replayed = 0  # stamps refused as replays

    def admit(self, stamp: Stamp) -> bool:
        """True (and remembered) if ``stamp`` is above every stamp admitted before."""
        last = self.last
        if last is None or stamp.epoch > last.epoch:
            newer = True
        elif stamp.epoch < last.epoch:
            newer = False
        elif stamp.seq is None or last.seq is None:
            # Within a pre-sequence epoch nothing orders its messages; a sequenced
            # message never shares its epoch with unsequenced ones (one coordinator).
            newer = stamp.seq is None and last.seq is None
        else:
            newer = stamp.seq > last.seq
        if newer:
            self.last = stamp
        else:
            self.replayed += 1
        return newer
