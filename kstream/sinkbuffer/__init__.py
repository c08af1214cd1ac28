"""The exactly-once sink's write-ahead buffer, its blob format and its spill to local
disk past a memory budget (only :mod:`kstream.sinkbuffer.spill` does I/O)."""
