"""The sink blob's layout: versions, frame and record structs, column modes (pure constants)."""

from __future__ import annotations

import struct
import sys
from array import array
from operator import itemgetter

# --------------------------------------------------------------------------- blob format
#
# Little-endian, CRC-protected. Every version shares the frame
#
#   magic b"KSWB" | version u8 | ntopics u16 | (len u16, utf-8)*ntopics |
#   nepochs u32 | nepochs epochs | crc32 u32 of everything before it
#
# and epochs must have strictly increasing checkpoint ids. Encoding writes
# version 2; decoding reads versions 1 and 2 (snapshots taken before 2).
#
# Version 2: columnar, so encoding and decoding are a few C-level operations per
# column, not Python work per record. Per epoch:
#
#   checkpoint_id i64 | nrecords u32 |
#   topic index column (u16) | partition column (i32) |
#   key length column (i32) | key_bytes u64 | keys, concatenated |
#   value length column (i32) | value_bytes u64 | values, concatenated |
#   timestamp column (i64) |
#   nheadered u32 | per record with headers, by increasing record index:
#     record_index u32, nheaders u16 (>= 1),
#     per header: name_len u16, value_len i32 (-1: null), name, value
#
# An integer column of the epoch's n records is a mode byte and a payload:
#
#   0 NONE   every value is None               no payload
#   1 CONST  all n equal, none is None         the value
#   2 FULL   none is None                      n values
#   3 NULLS  some are None                     n values (0 where None), nnull u32,
#                                              nnull u32 record indexes, increasing
#
# None is recorded by position, never by a sentinel value: every i64 is a valid
# timestamp and every i32 a valid partition. A null key or value has a null
# length and no bytes; the lengths add up exactly to key_bytes / value_bytes.
# Topics are never null (mode CONST or FULL). Empty header lists are stored as
# None, as in version 1.
#
# Version 3: segmented, for a buffer that spilled to disk
# (:mod:`kstream.sinkbuffer.spill`): written as a stream from the spill files, never
# decoded as a whole. Per epoch:
#
#   checkpoint_id i64 | nsegments u32 |
#   per segment: nrecords u32 | length u64 | a version-2 blob of one epoch (id 0)
#
# Each segment carries its own CRC besides the frame's; it is decoded when it is
# published, one at a time.
#
# Version 1: row-wise. Per epoch: checkpoint_id i64, nrecords u32,
#   per record: flags u8, topic_index u16, partition i32, key_len u32,
#               value_len u32, timestamp i64, nheaders u16, key, value,
#               per header: name_len u16, value_len i32 (-1: null), name, value
#   flags: 1 partition set, 2 key set, 4 value set, 8 timestamp set, 16 headers set.

MAGIC = b"KSWB"
VERSION = 2
REC = struct.Struct("<BHiIIqH")
HDR = struct.Struct("<Hi")
HEADERED = struct.Struct("<IH")
EPOCH = struct.Struct("<qI")
SEGMENT = struct.Struct("<IQ")
U8 = struct.Struct("<B")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
F_PART, F_KEY, F_VALUE, F_TS, F_HEADERS = 1, 2, 4, 8, 16
NONE, CONST, FULL, NULLS = 0, 1, 2, 3
MODE = [bytes([m]) for m in range(4)]
FIELDS = [itemgetter(i) for i in range(6)]  # topic, partition, key, value, ts, headers
SWAP = sys.byteorder != "little"  # array items are native order; the blob's are little


def _typecode(candidates: str, size: int) -> str:
    """The ``array`` typecode among ``candidates`` whose items have ``size`` bytes."""
    for code in candidates:
        if array(code).itemsize == size:
            return code
    raise ImportError(f"no {size}-byte array typecode among {candidates!r} on this platform")


A_U16 = _typecode("H", 2)
A_U32 = _typecode("IL", 4)
A_I32 = _typecode("il", 4)
A_I64 = _typecode("ql", 8)
