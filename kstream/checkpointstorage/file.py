"""``file://`` checkpoint store: a local directory, possibly a shared volume."""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import tempfile
import uuid
from pathlib import Path

from kstream.checkpointstorage.base import CheckpointStore, ObjectExists, ObjectNotFound, StoreError


class FileStore(CheckpointStore):
    """``file://`` store: a local directory, possibly a shared volume."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.url = f"file://{self.root}"

    def _path(self, path: str) -> Path:
        # Lexical, no resolve(): the store builds every path below its root itself, and
        # resolving (an lstat per component) was the largest cost of uploads and
        # retention passes. ".." and absolute paths are refused.
        norm = posixpath.normpath(path) if path else "."
        if norm.startswith("/") or norm == ".." or norm.startswith("../"):
            raise StoreError(f"path {path!r} escapes the store root {self.root}")
        return self.root if norm == "." else self.root / norm

    def _tmp_for(self, target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        return target.parent / f".tmp-{target.name}-{uuid.uuid4().hex}"

    def put_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        target = self._path(path)
        tmp = self._tmp_for(target)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if exclusive:
                # link() fails if the target exists: an atomic create-exclusive.
                try:
                    os.link(tmp, target)
                except FileExistsError as e:
                    raise ObjectExists(f"{self.url}/{path} already exists") from e
            else:
                os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def put_file(self, path: str, local: Path) -> None:
        target = self._path(path)
        tmp = self._tmp_for(target)
        try:
            shutil.copyfile(local, tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def get_bytes(self, path: str) -> bytes:
        try:
            return self._path(path).read_bytes()
        except FileNotFoundError as e:
            raise ObjectNotFound(
                f"{self.url}/{path} does not exist", object=f"{self.url}/{path}"
            ) from e

    def get_file(self, path: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=local.parent, prefix=f".tmp-{local.name}-")
        os.close(fd)
        try:
            try:
                shutil.copyfile(self._path(path), tmp)
            except FileNotFoundError as e:
                raise ObjectNotFound(
                    f"{self.url}/{path} does not exist", object=f"{self.url}/{path}"
                ) from e
            os.replace(tmp, local)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def exists(self, path: str) -> bool:
        return self._path(path).is_file()

    def size(self, path: str) -> int:
        try:
            return self._path(path).stat().st_size
        except FileNotFoundError as e:
            raise ObjectNotFound(
                f"{self.url}/{path} does not exist", object=f"{self.url}/{path}"
            ) from e

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.is_dir():
            return []
        out = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.startswith(".tmp-"):
                    continue  # an upload in progress is never an object
                out.append(str(Path(dirpath, name).relative_to(self.root)))
        return sorted(out)

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(path).unlink()

    def mtime(self, path: str) -> float:
        try:
            return self._path(path).stat().st_mtime
        except FileNotFoundError as e:
            raise ObjectNotFound(
                f"{self.url}/{path} does not exist", object=f"{self.url}/{path}"
            ) from e

    def touch(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.utime(self._path(path))
