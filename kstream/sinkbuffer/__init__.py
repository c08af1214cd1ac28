"""The exactly-once sink's write-ahead buffer and its blob format (pure: no I/O)."""
