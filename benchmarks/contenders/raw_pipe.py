"""Raw pipe: consume→produce the bytes unchanged, in batches, with no per-record callback —
the cheapest correct loop of a single Python process on this broker (the ceiling row)."""

from __future__ import annotations

from typing import Any

from benchmarks.contenders.rawloop import Output, consume_error, run_raw
from benchmarks.workloads import contender_parser


def pipe(msgs: list[Any], out: Output) -> int:
    """Forward every message's key and value."""
    send = out.send
    for m in msgs:
        if m.error() is not None:
            raise consume_error("raw_pipe", m)
        try:
            send(m.value(), m.key())
        except BufferError:
            out.produce(m.value(), m.key())
    return len(msgs)


def main() -> None:
    a = contender_parser(__doc__ or "").parse_args()
    run_raw("raw_pipe", a.bootstrap, a.input, a.output, a.group, a.end_offsets, pipe).emit()


if __name__ == "__main__":
    main()
