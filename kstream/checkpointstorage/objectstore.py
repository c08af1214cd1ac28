"""Object-store checkpoint stores: ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://…``.

Built on obstore, the Python binding of the Rust ``object_store`` crate (the one
Apache Arrow, DataFusion and Delta Lake use): one small wheel with no Python
dependencies, the GIL released during transfers, retries with exponential backoff
and jitter, multipart uploads and the standard credential chains (environment,
profiles, instance metadata) of S3, GCS and Azure built in.

Configuration comes, in this order of precedence, from ``options`` (the CLI's
``--store-option key=value``), then from the standard environment the library
reads itself (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``, ``GOOGLE_SERVICE_ACCOUNT``, ``AZURE_STORAGE_ACCOUNT_NAME``, …).
Option keys are the library's configuration keys (``endpoint``, ``region``,
``access_key_id``, ``virtual_hosted_style_request``, …) plus those of
:data:`OWN_OPTIONS`, :data:`CLIENT_OPTIONS` and :data:`RETRY_OPTIONS`.

What the checkpoint path relies on (docs/design.md §12):

* every object is immutable and content-addressed or named once; writes are
  single atomic PUTs (multipart above ``part_size``, completed atomically);
* ``exclusive=True`` is a conditional PUT (``If-None-Match: *``), preceded by a
  HEAD so that servers which ignore the condition still refuse a visible object;
* ``list`` is used only by garbage collection and the ``checkpoints`` CLI;
* a missing object raises :class:`StoreError` caused by ``FileNotFoundError``,
  exactly like :class:`FileStore`, so a restore tells "missing" from "unreachable";
* ``touch`` is a no-op: objects cannot be re-timed without rewriting them. GC's
  grace period then counts from the upload; the uploader's heal step (see
  :mod:`kstream.snapshots.upload`) re-uploads a reused file GC deleted meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import from_url

from kstream.checkpointstorage.base import CheckpointStore, ObjectExists, ObjectNotFound, StoreError

_open: Any = from_url
SCHEMES = ("s3", "s3a", "gs", "az", "azure", "abfs", "abfss")

# kstream's own options (not the library's).
OWN_OPTIONS = {
    "concurrency": "parallel transfers of a worker's snapshot uploads and restores (default 8)",
    "part_size": "multipart part size in bytes; larger files are uploaded in parts (default 8 MiB)",
}
# HTTP client options (ClientConfig), passed through as strings.
CLIENT_OPTIONS = ("allow_http", "timeout", "connect_timeout", "pool_idle_timeout", "user_agent")
# Retry options: max_retries (int), retry_timeout (seconds), init_backoff/max_backoff (seconds).
RETRY_OPTIONS = ("max_retries", "retry_timeout", "init_backoff", "max_backoff")

DEFAULT_CONCURRENCY = 8
DEFAULT_PART_SIZE = 8 * 1024 * 1024
# Bounded so a dead store declines a checkpoint in about half a minute instead of
# hanging its upload for the library's default of three minutes.
DEFAULT_RETRY = {
    "max_retries": "6",
    "retry_timeout": "30",
    "init_backoff": "0.1",
    "max_backoff": "5",
}
DEFAULT_CLIENT = {"connect_timeout": "5s", "timeout": "120s"}


def is_object_store_url(url: str) -> bool:
    """Whether ``url`` names an object store this module opens."""
    return urlparse(url).scheme in SCHEMES


def parse_store_options(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["k=v", …]`` (the CLI's ``--store-option``) as a dict; ValueError naming a bad pair."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"store option {pair!r} is not key=value")
        out[key.strip().lower()] = value
    return out


def _seconds(key: str, value: str) -> timedelta:
    try:
        return timedelta(seconds=float(value))
    except ValueError as e:
        raise StoreError(f"store option {key}={value!r} is not a number of seconds") from e


def _int(key: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError as e:
        raise StoreError(f"store option {key}={value!r} is not an integer") from e
    if n < 1 and key != "max_retries":
        raise StoreError(f"store option {key}={value!r} must be at least 1")
    return n


# What the usual S3-compatible error codes mean for the user, and what to check.
_HINTS = {
    "SignatureDoesNotMatch": "the store refused the secret access key (check "
    "AWS_SECRET_ACCESS_KEY or --store-option secret_access_key=)",
    "InvalidAccessKeyId": "the store does not know the access key id (check "
    "AWS_ACCESS_KEY_ID or --store-option access_key_id=)",
    "AccessDenied": "the credentials may not access this bucket or prefix (check their policy)",
    "NoSuchBucket": "the bucket does not exist (create it, or fix the store URL)",
}


def failure_reason(e: Exception) -> str:
    """One line saying why an object-store call failed: the service's error code and what
    it means (:data:`_HINTS`), or that the endpoint could not be reached, else the
    library's first line."""
    text = str(e).strip()
    code = re.search(r"<Code>([^<]+)</Code>", text)
    status = re.search(r"status code: (\d{3} [A-Za-z ]+?):", text)
    if code is not None:
        what = f"{code.group(1)} ({status.group(1)})" if status else code.group(1)
        hint = _HINTS.get(code.group(1))
        return f"{what}: {hint}" if hint else what
    if "error sending request" in text:
        endpoint = re.search(r"(https?://[^/\s]+)", text)
        where = endpoint.group(1) if endpoint else "the store's endpoint"
        return f"cannot reach {where} (check the endpoint, AWS_ENDPOINT_URL or --store-option endpoint=)"
    return text.splitlines()[0] if text else type(e).__name__


class ObjectStore(CheckpointStore):
    """A checkpoint store in an S3 bucket (or GCS / Azure container) under a prefix."""

    def __init__(self, url: str, options: Mapping[str, str] | None = None) -> None:
        parsed = urlparse(url)
        if parsed.scheme not in SCHEMES or not parsed.netloc:
            raise StoreError(
                f"{url!r} is not an object store URL (s3://bucket/prefix, gs://bucket/prefix, "
                f"az://container/prefix)"
            )
        self.url = url.rstrip("/")
        opts = {k.lower(): v for k, v in (options or {}).items()}
        self.concurrency = _int("concurrency", opts.pop("concurrency", str(DEFAULT_CONCURRENCY)))
        self.part_size = _int("part_size", opts.pop("part_size", str(DEFAULT_PART_SIZE)))
        if self.part_size < 5 * 1024 * 1024:
            raise StoreError(f"store option part_size={self.part_size} is below S3's 5 MiB minimum")
        retry = {**DEFAULT_RETRY, **{k: opts.pop(k) for k in RETRY_OPTIONS if k in opts}}
        client: dict[str, Any] = {
            **DEFAULT_CLIENT,
            **{k: opts.pop(k) for k in CLIENT_OPTIONS if k in opts},
        }
        endpoint = opts.get("endpoint") or opts.get("aws_endpoint") or ""
        if not endpoint and parsed.scheme.startswith("s3"):
            endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
        if endpoint.startswith("http://") and "allow_http" not in client:
            client["allow_http"] = True  # a plain-http endpoint was asked for explicitly
        retry_config: dict[str, Any] = {
            "max_retries": _int("max_retries", retry["max_retries"]),
            "retry_timeout": _seconds("retry_timeout", retry["retry_timeout"]),
            "backoff": {
                "init_backoff": _seconds("init_backoff", retry["init_backoff"]),
                "max_backoff": _seconds("max_backoff", retry["max_backoff"]),
                "base": 2,
            },
        }
        try:
            # Keys and values are checked by the library (typed there per scheme).
            self._store = _open(
                self.url, config=opts or None, client_options=client, retry_config=retry_config
            )
        except Exception as e:  # the library says which key or value is wrong
            raise StoreError(f"cannot open checkpoint store {self.url}: {e}") from e

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"

    # ------------------------------------------------------------------ errors

    def _fail(self, op: str, path: str, e: Exception) -> StoreError:
        if isinstance(e, FileNotFoundError):
            err = ObjectNotFound(f"{self.url}/{path} does not exist", object=f"{self.url}/{path}")
            err.__cause__ = e
            return err
        return StoreError(f"{op} {self.url}/{path} failed: {failure_reason(e)}")

    # ------------------------------------------------------------------ writes

    def put_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        if exclusive:
            # 1. A visible object is refused even by servers that ignore If-None-Match;
            # 2. the conditional PUT closes the race where the store enforces it.
            if self.exists(path):
                raise ObjectExists(f"{self.url}/{path} already exists")
            try:
                obstore.put(self._store, path, data, mode="create")
            except (AlreadyExistsError, PreconditionError) as e:
                raise ObjectExists(f"{self.url}/{path} already exists") from e
            except Exception as e:
                raise self._fail("writing", path, e) from e
            return
        try:
            obstore.put(self._store, path, data)
        except Exception as e:
            raise self._fail("writing", path, e) from e

    def put_file(self, path: str, local: Path) -> None:
        try:
            size = local.stat().st_size
            with open(local, "rb") as f:
                obstore.put(
                    self._store,
                    path,
                    f,
                    use_multipart=size > self.part_size,
                    chunk_size=self.part_size,
                    max_concurrency=4,
                )
        except OSError as e:
            if isinstance(e, FileNotFoundError) and not local.exists():
                raise StoreError(f"uploading {local} to {self.url}/{path}: {e}") from e
            raise self._fail("uploading", path, e) from e
        except Exception as e:
            raise self._fail("uploading", path, e) from e

    # ------------------------------------------------------------------ reads

    def get_bytes(self, path: str) -> bytes:
        try:
            return bytes(obstore.get(self._store, path).bytes())
        except Exception as e:
            raise self._fail("reading", path, e) from e

    def get_file(self, path: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=local.parent, prefix=f".tmp-{local.name}-")
        try:
            with os.fdopen(fd, "wb") as out:
                result = obstore.get(self._store, path)
                for chunk in result.stream(min_chunk_size=1 << 20):
                    out.write(chunk)
            os.replace(tmp, local)
        except Exception as e:
            raise self._fail("downloading", path, e) from e
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _head(self, path: str) -> Any:
        try:
            return obstore.head(self._store, path)
        except Exception as e:
            raise self._fail("reading metadata of", path, e) from e

    def exists(self, path: str) -> bool:
        try:
            self._head(path)
        except StoreError as e:
            if isinstance(e.__cause__, FileNotFoundError):
                return False
            raise
        return True

    def size(self, path: str) -> int:
        return int(self._head(path)["size"])

    def mtime(self, path: str) -> float:
        return float(self._head(path)["last_modified"].timestamp())

    def list(self, prefix: str) -> list[str]:
        """Every object under ``prefix``; used by garbage collection only."""
        try:
            out = [
                meta["path"]
                for chunk in obstore.list(self._store, prefix.strip("/") or None)
                for meta in chunk
            ]
        except Exception as e:
            raise self._fail("listing", prefix, e) from e
        # Drop "directory" entries: some servers (S3Proxy's filesystem backend, consoles
        # creating "folder/" markers) list a prefix of other objects as an object itself.
        parents = {p.rsplit("/", i)[0] for p in out for i in range(1, p.count("/") + 1)}
        return sorted(p for p in out if p not in parents)

    # ------------------------------------------------------------------ deletes

    def delete(self, path: str) -> None:
        try:
            obstore.delete(self._store, path)
        except FileNotFoundError:
            return
        except Exception as e:
            raise self._fail("deleting", path, e) from e

    def touch(self, path: str) -> None:
        """A no-op: see the module docstring (GC grace counts from the upload)."""
