"""What an operator of the logical graph is: a typed, frozen *spec* on a ``Node``.

Every operator kind is one :class:`OpSpec` subclass: its parameters are its typed
fields, and class-level flags say how the planner treats it — nothing outside the
spec compares a kind's name. A spec's runtime class registers itself for the spec
(:func:`kstream.operators.core.implements`), so an operator is its spec (next to
the DSL method that adds it, :mod:`kstream.api.stream`) plus its runtime class.

``kind`` is the operator's persistent name: it is part of default stable operator
ids (``stage1.window0``), of the state descriptions checkpoints carry and of the
plan fingerprint — never rename one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from kstream.serde import Serde

__all__ = ["Node", "OpSpec", "TopicInput"]


@dataclass(frozen=True)
class OpSpec:
    """One operator kind's parameters (subclasses add typed fields)."""

    kind: ClassVar[str]
    stateful: ClassVar[bool] = False
    """Keeps state under a stable operator id (and makes its stage stateful)."""
    keyed_output: ClassVar[bool | None] = None
    """True: the output is partitioned by its key; None: keyed as its inputs are."""
    ends_stage: ClassVar[bool] = False
    """Its readers read its repartition topic, in a later stage (``key_by``)."""
    needs_consumer: ClassVar[bool] = True
    """False for operators whose output may go nowhere (sinks, tables read by joins)."""
    unkeyed_input: ClassVar[str | None] = None
    """Set on operators that need keyed inputs: the planner's message when one is not,
    formatted with ``kind``, ``name`` (the operator's) and ``input`` (the input's)."""

    def params(self) -> dict[str, Any]:
        """The parameters by name (what the plan fingerprint hashes)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def output_keyed(self, inputs_keyed: bool) -> bool:
        """Whether the output is partitioned by its key, given whether all inputs are."""
        return inputs_keyed if self.keyed_output is None else self.keyed_output

    def problem(self, name: str) -> str | None:
        """What keeps operator ``name`` from running as built, in words (None: nothing)."""
        return None

    def state_description(self) -> dict[str, Any]:
        """What its state means beyond its kind and key serde (stateful operators), in
        the order checkpoints describe it (see :mod:`kstream.plan.operators`)."""
        return {}


@dataclass(frozen=True)
class TopicInput(OpSpec):
    """A user topic the stage reads (a stream source or a changelog table)."""

    changelog: ClassVar[bool] = False
    topic: str
    key_serde: Serde
    value_serde: Serde


@dataclass(eq=False)
class Node:
    """One operator of the logical graph: its ``spec`` and where its inputs come from.

    ``parents`` are ``(node, port)`` pairs; port 0 is the main output, port 1 a
    window's late-record side output (a join's: port 1 late left, port 2 late right
    records).
    """

    id: int
    name: str
    spec: OpSpec
    parents: list[tuple[Node, int]] = field(default_factory=list)
    named: bool = False  # the user gave ``name=`` (a stateful operator's stable id)

    @property
    def kind(self) -> str:
        """The operator kind's persistent name (``spec.kind``)."""
        return self.spec.kind

    @property
    def params(self) -> MappingProxyType[str, Any]:
        """The spec's parameters, read-only (change a node with ``dataclasses.replace``
        of its ``spec``)."""
        return MappingProxyType(self.spec.params())

    def __repr__(self) -> str:
        return f"Node({self.id}, {self.kind}, {self.name!r})"


class GraphBuilder(Protocol):
    """What a stream needs of its topology: adding a node fed by ``parents`` (node,
    port); :class:`kstream.api.topology.Topology` is the one implementation."""

    def _add(
        self, spec: OpSpec, parents: list[tuple[Node, int]], name: str | None = None
    ) -> Node: ...
