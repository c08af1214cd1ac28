"""RocksDB options of kstream's state: compaction, files, filters, writes.

Why each setting: the docstrings; the trade-offs are in docs/decisions.md.
"""

from __future__ import annotations

import rocksdict

from kstream.state.rocksdb_resources import StateResources, default_resources

#: Sorted runs (flushed files and merged runs) before universal compaction merges some.
SORTED_RUNS_TRIGGER = 8
#: Universal compaction rewrites the whole column family once its newer runs hold more
#: than this percentage of the oldest (largest) one: disk use stays below about twice
#: the compacted state, and deletions and overwritten values are dropped then.
MAX_SIZE_AMPLIFICATION_PERCENT = 100
#: The MANIFEST is rewritten from scratch past this size (it is copied whole into every
#: checkpoint and grows by ~150 bytes per flush or compaction).
MAX_MANIFEST_BYTES = 4 * 1024
#: Bytes a column family's memtable holds before it becomes immutable and is flushed
#: (RocksDB's default: 64 MiB). A memtable grows as written, but its Bloom filter
#: (``MEMTABLE_BLOOM_RATIO`` of this) is allocated whole when the memtable is created:
#: at 64 MiB that was 1.3 MB for every table of every task, written to or not.
WRITE_BUFFER_BYTES = 8 * 1024 * 1024
#: A memtable takes memory in blocks of this size (RocksDB's default: an eighth of
#: ``WRITE_BUFFER_BYTES``), each counted against the worker's memtable budget when taken:
#: with 1 MiB blocks, 128 tasks that each wrote a few keys held the whole 128 MiB budget
#: and every write would flush a memtable.
ARENA_BLOCK_BYTES = 256 * 1024
#: The memtable's Bloom filter's size as a fraction of ``WRITE_BUFFER_BYTES``
#: (~10 bits a key for entries of ~60 bytes).
MEMTABLE_BLOOM_RATIO = 0.02
#: SST files a DB keeps open (RocksDB's default: every one, for ever); past it the
#: least recently used is closed and opened again when read.
MAX_OPEN_FILES = 256
#: The open SST files' cache in 2**this shards, each with its own lock (RocksDB's
#: default: 64 shards, ~25 KB per DB allocated at open): a task's DB is read by its own
#: thread (and queries, compactions now and then), so one shard has no contention.
TABLE_CACHE_SHARD_BITS = 0
#: The task's own tables (``task.watermarks``: input watermarks of snapshots taken
#: before the manifest held them; ``task.firing``: a firing's target while it runs in
#: slices) hold a few keys, read when the task starts: no memtable Bloom filter (170 KB
#: each, allocated whole with every memtable), and a column family only once written
#: (an empty one costs ~80 KB of RSS; most tasks never write either).
TASK_TABLE_PREFIX = "task."


def task_table(name: str) -> bool:
    """Whether ``name`` is one of the task's own tables (``TASK_TABLE_PREFIX``)."""
    return name.startswith(TASK_TABLE_PREFIX)


def cf_options(resources: StateResources | None = None, name: str = "") -> rocksdict.Options:
    """Universal (size-tiered) compaction, so an incremental checkpoint uploads little.

    Checkpoints upload only SST files the store does not hold yet. Leveled compaction
    merged every 8 flushed files into L1, and with changes spread over the key range
    every L1 file overlapped them: a task's whole state was rewritten and uploaded
    every 8th checkpoint. Universal compaction merges small new runs among themselves
    (a run joins a merge only if it is at most ``size_ratio`` % larger than the runs
    already picked), so the large old run is rewritten only by a full compaction when
    the newer runs reach ``MAX_SIZE_AMPLIFICATION_PERCENT`` of it. The price: up to
    about twice the disk of the compacted state, and deletions reclaimed only by those
    full compactions (see docs/decisions.md).

    The block cache is the worker's (``resources``, default: the process's), shared by
    every table of every task; so is the memtables' memory budget (``db_options``).
    ``name``: the table's; the task's own tables (``task_table``) get no memtable filter.
    """
    resources = resources or default_resources()
    opts = rocksdict.Options(raw_mode=True)
    opts.set_compaction_style(rocksdict.DBCompactionStyle.universal())
    uni = rocksdict.UniversalCompactOptions()
    uni.size_ratio = 1
    uni.min_merge_width = 2
    uni.max_size_amplification_percent = MAX_SIZE_AMPLIFICATION_PERCENT
    opts.set_universal_compaction_options(uni)
    opts.set_level_zero_file_num_compaction_trigger(SORTED_RUNS_TRIGGER)
    opts.set_target_file_size_base(16 * 1024 * 1024)
    # Whole-key Bloom filters (10 bits a key, ~1 % false positives): most window and
    # counter reads are of keys not written yet, and a miss would otherwise read a block
    # of every L0 file and of each level.
    table = rocksdict.BlockBasedOptions()
    table.set_bloom_filter(10, False)
    table.set_block_cache(resources.cache)
    opts.set_block_based_table_factory(table)
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES)
    opts.set_arena_block_size(ARENA_BLOCK_BYTES)
    # The same for the memtable: with delta snapshots it is flushed by its size, not at
    # every checkpoint, and a miss would search a skip list of up to its size.
    opts.set_memtable_whole_key_filtering(True)
    opts.set_memtable_prefix_bloom_ratio(0.0 if task_table(name) else MEMTABLE_BLOOM_RATIO)
    return opts


def db_options(resources: StateResources | None = None) -> rocksdict.Options:
    """The DB's options; they are also its ``default`` column family's, which holds no
    table: no memtable Bloom filter for it. Memtables count against the worker's budget
    (``resources.write_buffers``), open SST files are capped (``MAX_OPEN_FILES``) in a
    cache of one shard (``TABLE_CACHE_SHARD_BITS``)."""
    resources = resources or default_resources()
    opts = cf_options(resources)
    opts.set_memtable_prefix_bloom_ratio(0.0)
    opts.set_write_buffer_manager(resources.write_buffers)
    opts.set_max_open_files(MAX_OPEN_FILES)
    opts.set_table_cache_num_shard_bits(TABLE_CACHE_SHARD_BITS)
    opts.set_max_manifest_file_size(MAX_MANIFEST_BYTES)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    return opts


def write_options() -> rocksdict.WriteOptions:
    """No WAL: durability comes from snapshots, never from the live DB."""
    wo = rocksdict.WriteOptions()
    # A property at run time; rocksdict's stub wrongly declares a method.
    setattr(wo, "disable_wal", True)  # noqa: B010
    return wo
