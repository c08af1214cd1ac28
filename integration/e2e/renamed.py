"""Load a topology file with its user topics renamed (unique names per test run)."""

from __future__ import annotations

import dataclasses
import runpy
from collections.abc import Mapping

from kstream.api.topology import Topology


def renamed(path: str, renames: Mapping[str, str]) -> Topology:
    """The ``topology`` of the file at ``path``, source and sink topics renamed per ``renames``."""
    topology = runpy.run_path(path)["topology"]
    assert isinstance(topology, Topology), f"{path} defines no topology"
    for node in topology.nodes:
        topic = getattr(node.spec, "topic", None)
        if isinstance(topic, str) and topic in renames:
            node.spec = dataclasses.replace(node.spec, topic=renames[topic])  # type: ignore[call-arg]
    return topology
