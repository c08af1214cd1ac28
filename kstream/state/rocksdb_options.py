"""RocksDB options of kstream's state: compaction, files, filters, writes.

Why each setting: the docstrings; the trade-offs are in docs/decisions.md.
"""

from __future__ import annotations

import rocksdict

#: Sorted runs (flushed files and merged runs) before universal compaction merges some.
SORTED_RUNS_TRIGGER = 8
#: Universal compaction rewrites the whole column family once its newer runs hold more
#: than this percentage of the oldest (largest) one: disk use stays below about twice
#: the compacted state, and deletions and overwritten values are dropped then.
MAX_SIZE_AMPLIFICATION_PERCENT = 100
#: The MANIFEST is rewritten from scratch past this size (it is copied whole into every
#: checkpoint and grows by ~150 bytes per flush or compaction).
MAX_MANIFEST_BYTES = 4 * 1024


def cf_options() -> rocksdict.Options:
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
    """
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
    opts.set_block_based_table_factory(table)
    # The same for the memtable: with delta snapshots it is flushed by its size, not at
    # every checkpoint, and a miss would search a skip list of up to its size.
    opts.set_memtable_whole_key_filtering(True)
    opts.set_memtable_prefix_bloom_ratio(0.02)
    return opts


def db_options() -> rocksdict.Options:
    opts = cf_options()
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
