"""The control-message signing key in the checkpoint store: ``<app>/control.key``.

32 random bytes, created exclusively by the first coordinator of an app and never
changed; whoever can read the store can verify (and sign) coordinator messages,
whoever can only write to Kafka cannot. Read by workers to verify what they act on.
"""

from __future__ import annotations

import contextlib
import os

from kstream.checkpointstorage.base import CheckpointStore, ObjectExists, StoreError
from kstream.checkpointstorage.layout import control_key_path

KEY_BYTES = 32


def load_key(store: CheckpointStore, app_id: str) -> bytes | None:
    """The app's key, or None while no coordinator created it (or it is unreadable)."""
    try:
        key = store.get_bytes(control_key_path(app_id))
    except StoreError:
        return None
    return key if len(key) == KEY_BYTES else None


def ensure_key(store: CheckpointStore, app_id: str) -> bytes:
    """The app's key, created now if it does not exist (StoreError if the store fails)."""
    key = load_key(store, app_id)
    if key is not None:
        return key
    # Another coordinator may create it first (ObjectExists): then theirs is used.
    with contextlib.suppress(ObjectExists):
        store.put_bytes(control_key_path(app_id), os.urandom(KEY_BYTES), exclusive=True)
    key = load_key(store, app_id)
    if key is None:
        raise StoreError(f"{store.url}/{control_key_path(app_id)} is not a {KEY_BYTES}-byte key")
    return key


class ControlKey:
    """The app's key as readers need it: loaded from the store once it exists, then kept."""

    def __init__(self, store: CheckpointStore, app_id: str) -> None:
        self.store, self.app_id = store, app_id
        self._key: bytes | None = None

    def get(self) -> bytes | None:
        if self._key is None:
            self._key = load_key(self.store, self.app_id)
        return self._key
