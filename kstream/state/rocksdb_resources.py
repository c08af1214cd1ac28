"""What every RocksDB instance of one worker process shares, so that a task costs no
thread and a bounded amount of memory however many tasks the worker owns.

Each task keeps its own DB (it snapshots, uploads and restores it alone); what grows
with the tasks is bounded here instead: one block cache, which the memtables of every
DB are charged to as well (one memory budget, ``memory`` bytes), and one pool of
threads that create the DBs' background checkpoints. RocksDB's own background threads
(flushes, compactions) are one pool per process already (its default environment).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import rocksdict

__all__ = [
    "CHECKPOINT_THREADS",
    "DEFAULT_STATE_MEMORY",
    "WRITE_BUFFER_SHARE",
    "StateResources",
    "default_resources",
]

#: The block cache of a worker's DBs together, memtables included (``--state-memory``).
DEFAULT_STATE_MEMORY = 256 * 1024 * 1024
#: Part of it the memtables may hold before the DB being written to flushes its own.
WRITE_BUFFER_SHARE = 0.5
#: Threads creating background checkpoints (a memtable flush, hard links, a few synced
#: files: mostly I/O waits) for every task of the worker; a task has at most one at a
#: time, and waits for it before it writes to its DB again.
CHECKPOINT_THREADS = 4


class StateResources:
    """The block cache, write-buffer budget and checkpoint threads of one worker's DBs.

    ``memory`` bounds the block cache and the memtables together (the memtables are
    charged to the cache; past ``WRITE_BUFFER_SHARE`` of it, the DB being written to
    flushes a memtable). Everything is allocated as used: an idle task costs its DB's
    fixed structures only. ``checkpoints()`` is the pool of ``checkpoint_threads``
    threads, started on first use.
    """

    def __init__(
        self, memory: int = DEFAULT_STATE_MEMORY, checkpoint_threads: int = CHECKPOINT_THREADS
    ) -> None:
        if memory <= 0:
            raise ValueError(f"state memory must be > 0 bytes, got {memory}")
        if checkpoint_threads < 1:
            raise ValueError(f"checkpoint threads must be >= 1, got {checkpoint_threads}")
        self.memory = memory
        self.checkpoint_threads = checkpoint_threads
        self.cache = rocksdict.Cache(memory)
        self.write_buffers = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            int(memory * WRITE_BUFFER_SHARE), False, self.cache
        )
        self._lock = threading.Lock()
        self._checkpoints: ThreadPoolExecutor | None = None

    def checkpoints(self) -> ThreadPoolExecutor:
        """The threads that create every DB's background checkpoints."""
        with self._lock:
            if self._checkpoints is None:
                self._checkpoints = ThreadPoolExecutor(
                    self.checkpoint_threads, thread_name_prefix="rocksdb-checkpoint"
                )
            return self._checkpoints

    def close(self) -> None:
        """Stop the checkpoint threads (after what they run); DBs must be closed first."""
        with self._lock:
            pool, self._checkpoints = self._checkpoints, None
        if pool is not None:
            pool.shutdown(wait=True)


_default: StateResources | None = None
_default_lock = threading.Lock()


def default_resources() -> StateResources:
    """The process's resources for DBs opened without their own (created on first use):
    a process's DBs share them unless told otherwise."""
    global _default
    with _default_lock:
        if _default is None:
            _default = StateResources()
        return _default
