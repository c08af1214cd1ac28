"""kstream, workload 4's recovery side: the window-count job of workloads 2/3, run until it
is killed (``--forever``), with checkpoints every ``--commit-interval`` seconds into a
file checkpoint store next to ``--state-dir`` (see ``kstreamapp.store_dir``).

kstream does not commit consumer-group offsets in checkpointed mode: the harness
(``benchmarks/recovery.py``) knows the state is checkpointed when the store's latest
completed checkpoint covers the end offsets of every input partition.
"""

from __future__ import annotations

import sys

from benchmarks.contenders import kstream_window_count

if __name__ == "__main__":
    sys.argv.append("--forever")
    kstream_window_count.main()
