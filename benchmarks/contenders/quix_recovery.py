"""Quix Streams, workload 4's recovery side: the window-count job of workloads 2/3,
run until it is killed (``--forever``). The harness (``benchmarks/recovery.py``) builds
the state, kills it with SIGKILL, wipes its local state so it must restore from its
changelog topic, restarts it and times the first new output.
"""

from __future__ import annotations

import sys

from benchmarks.contenders import quix_window_count

if __name__ == "__main__":
    sys.argv.append("--forever")
    quix_window_count.main()
