"""Why a task keeps its own RocksDB (docs/decisions.md, "A DB per task, its costs per
worker"): the binding cannot move one task's files out of a shared DB into another.

These pin rocksdict's behaviour the decision rests on. When one fails, rocksdict gained
what one DB per worker needs (per-task files out of a shared DB, ingested elsewhere):
revisit the decision and issue 41 item 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import rocksdict

REVISIT = "rocksdict changed: revisit 'A DB per task' in docs/decisions.md (issue 41 item 2)"


def _db(path: Path) -> tuple[rocksdict.Rdict, rocksdict.Rdict]:
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    db = rocksdict.Rdict(str(path), opts)
    return db, db.create_column_family("task-1.counts", rocksdict.Options(raw_mode=True))


def test_live_files_do_not_say_which_column_family_holds_them(tmp_path: Path) -> None:
    db, table = _db(tmp_path / "worker")
    for i in range(100):
        table[i.to_bytes(4, "big")] = b"v"
    table.flush()
    files = db.live_files()
    db.close()
    assert len(files) == 1, files
    assert not any("family" in key for key in files[0]), REVISIT


def test_a_file_rocksdb_wrote_cannot_be_ingested_into_another_db(tmp_path: Path) -> None:
    db, table = _db(tmp_path / "worker-a")
    for i in range(100):
        table[i.to_bytes(4, "big")] = b"v"
    table.flush()
    name = db.live_files()[0]["name"].lstrip("/")
    rocksdict.Checkpoint(db).create_checkpoint(str(tmp_path / "snapshot"))
    db.close()
    other, into = _db(tmp_path / "worker-b")
    options = rocksdict.IngestExternalFileOptions()
    options.set_allow_global_seqno(True)
    try:
        into.ingest_external_file([str(tmp_path / "snapshot" / name)], options)
    except Exception as e:  # rocksdict raises a bare Exception
        assert "External file version not found" in str(e), e
    else:
        pytest.fail(REVISIT)
    finally:
        other.close()
