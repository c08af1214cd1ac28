"""Run one command and record its rusage: ``python -m benchmarks.spawn RUSAGE_JSON -- ARGV...``.

Why a separate small process: on Linux a child's ``ru_maxrss`` starts at its
parent's peak RSS at fork time (the kernel keeps the pre-exec high-water mark), so a
contender forked by the harness — which holds verification data — would report the
harness's memory. Forked from this fresh, small interpreter instead, the contender's
peak RSS is its own. The rusage (contender and the descendants it waited for) is
written to RUSAGE_JSON; the exit code is passed through.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python -m benchmarks.spawn RUSAGE_JSON -- ARGV...\n")
        return 2
    out, cmd = Path(argv[0]), argv[2:]
    # SIGTERM to the process group reaches the child too; this process outlives it to
    # record the rusage. (A handler, not SIG_IGN: ignored signals survive exec.)
    signal.signal(signal.SIGTERM, lambda *_: None)
    proc = subprocess.Popen(cmd)
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    out.write_text(
        json.dumps({"cpu_s": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss, "code": code})
    )
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
