"""FileStore: atomic and exclusive writes, listing ignores partial writes, path safety."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kstream.checkpointstorage.base import ObjectExists, StoreError
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.objectstore import ObjectStore
from kstream.checkpointstorage.urls import open_store


def test_put_get_list_delete_roundtrip(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put_bytes("app/tasks/t0/chk-1.json", b"{}")
    src = tmp_path.parent / f"{tmp_path.name}-src.bin"
    src.write_bytes(b"sst-bytes")
    store.put_file("app/shared/abc", src)
    assert store.get_bytes("app/shared/abc") == b"sst-bytes"
    assert store.size("app/shared/abc") == 9
    assert store.list("app") == ["app/shared/abc", "app/tasks/t0/chk-1.json"]
    assert store.list("app/shared") == ["app/shared/abc"]
    assert store.list("nothing") == []
    out = tmp_path.parent / f"{tmp_path.name}-out.bin"
    store.get_file("app/shared/abc", out)
    assert out.read_bytes() == b"sst-bytes"
    store.delete("app/shared/abc")
    store.delete("app/shared/abc")  # absent: not an error
    assert not store.exists("app/shared/abc")
    with pytest.raises(StoreError, match="does not exist"):
        store.get_bytes("app/shared/abc")


def test_exclusive_write_never_overwrites(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put_bytes("app/checkpoints/chk-1.json", b"first", exclusive=True)
    with pytest.raises(ObjectExists):
        store.put_bytes("app/checkpoints/chk-1.json", b"second", exclusive=True)
    assert store.get_bytes("app/checkpoints/chk-1.json") == b"first"
    assert store.list("app/checkpoints") == ["app/checkpoints/chk-1.json"]  # no temp left


def test_partial_writes_are_invisible_and_paths_cannot_escape(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    (tmp_path / "app" / "tasks").mkdir(parents=True)
    (tmp_path / "app" / "tasks" / ".tmp-chk-2.json-123").write_bytes(b'{"half')
    assert store.list("app") == []
    assert not store.exists("app/tasks/chk-2.json")
    with pytest.raises(StoreError, match="escapes"):
        store.put_bytes("../outside", b"x")


def test_touch_refreshes_mtime_for_gc_grace(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put_bytes("app/shared/x", b"x")
    past = time.time() - 3600
    os.utime(tmp_path / "app/shared/x", (past, past))
    assert store.mtime("app/shared/x") == pytest.approx(past)
    store.touch("app/shared/x")
    assert time.time() - store.mtime("app/shared/x") < 60
    store.touch("app/shared/absent")  # no error, creates nothing
    assert not store.exists("app/shared/absent")


def test_open_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_store(f"file://{tmp_path}"), FileStore)
    opened = open_store(str(tmp_path))
    assert isinstance(opened, FileStore) and opened.root == tmp_path.resolve()
    s3 = open_store(
        "s3://bucket/prefix",
        {
            "endpoint": "http://127.0.0.1:9",
            "region": "x",
            "access_key_id": "t",
            "secret_access_key": "t",
        },
    )
    assert isinstance(s3, ObjectStore) and s3.url == "s3://bucket/prefix"
    with pytest.raises(StoreError, match="use s3://bucket/prefix"):
        open_store("ftp://host/dir")
    with pytest.raises(StoreError, match="apply to object stores"):
        open_store(str(tmp_path), {"region": "x"})


def test_paths_are_checked_lexically(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for bad in ("../x", "/etc/passwd", "app/../../x", ".."):
        with pytest.raises(StoreError, match="escapes"):
            store.get_bytes(bad)
    store.put_bytes("app/./shared/../shared/x", b"x")
    assert store.list("app") == ["app/shared/x"]
    assert store.get_bytes("app/shared/x") == b"x"
