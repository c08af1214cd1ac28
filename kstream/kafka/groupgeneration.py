"""The group generation in librdkafka's serialized consumer-group metadata (what a
transaction's offsets are sent with, and what fences a member the group removed)."""

from __future__ import annotations

import struct


def group_generation(group_metadata: bytes) -> int | None:
    """Generation id from librdkafka's serialized consumer-group metadata, if readable.

    The layout (``CGMDv2:`` then a native int32 generation) is librdkafka's; the
    Python client exposes no accessor. An unknown layout yields None, never a guess.
    """
    prefix = b"CGMDv2:"
    if not group_metadata.startswith(prefix) or len(group_metadata) < len(prefix) + 4:
        return None
    (gen,) = struct.unpack_from("=i", group_metadata, len(prefix))
    return gen if gen >= 0 else None
