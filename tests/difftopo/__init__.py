"""Generated topologies for differential testing (issue 37, deliverable 6).

``grammar``: a topology as plain data (``Graph``), built into a ``Topology`` under a
topic prefix and printed as the DSL code a user would write. ``strategies``: the
hypothesis strategies that generate graphs and their inputs. ``compare``: running a
graph with ``kstream.testing.run_topology`` and reducing outputs to what is
deterministic (multisets of ``(key, value)`` per sink).
"""
