"""The slow store's shaping: only the store's replies go to the rate-limited class."""

from __future__ import annotations

from benchmarks.slowstore import FREE, LIMITED, UNSHAPE, shaping_commands


def test_only_packets_from_the_store_port_are_rate_limited() -> None:
    root, free, limited, flt = shaping_commands(9123, 40)
    # Unclassified packets (everything but the store's replies) go to the free class.
    assert root[root.index("default") + 1] == FREE.split(":")[1]
    assert free[free.index("classid") + 1] == FREE
    assert limited[limited.index("classid") + 1] == LIMITED
    assert limited[limited.index("rate") + 1] == limited[limited.index("ceil") + 1] == "40mbit"
    # The filter: source port 9123 exactly, into the limited class.
    assert flt[flt.index("sport") + 1 : flt.index("sport") + 3] == ["9123", "0xffff"]
    assert flt[flt.index("flowid") + 1] == LIMITED
    assert UNSHAPE[-1] == "root" and "del" in UNSHAPE
