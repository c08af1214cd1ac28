"""Raw pipe: consume→produce the bytes unchanged, in batches — the practical physical
limit of a single Python process on this broker (no decode, no work per record)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.contenders.rawloop import run_raw
from benchmarks.workloads import contender_parser


def pipe(msgs: list[Any], produce: Callable[..., None]) -> int:
    """Forward every message's key and value."""
    for m in msgs:
        produce(m.value(), m.key())
    return len(msgs)


def main() -> None:
    a = contender_parser(__doc__ or "").parse_args()
    run_raw("raw_pipe", a.bootstrap, a.input, a.output, a.group, a.end_offsets, pipe).emit()


if __name__ == "__main__":
    main()
