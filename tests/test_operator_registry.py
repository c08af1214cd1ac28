"""The typed operator registry: every operator spec has one runtime class, and the
planner and graph building dispatch on specs, never on an operator's kind name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kstream.api.spec import OpSpec
from kstream.operators.core import _RUNTIME, Build, build_operator
from kstream.runtime.graph import OPERATOR_MODULES
from kstream.state.memory import MemoryBackend

ROOT = Path(__file__).resolve().parent.parent / "kstream"
SPEC_DISPATCH = [
    *sorted((ROOT / "plan").glob("*.py")),
    ROOT / "runtime" / "graph.py",
    ROOT / "job.py",
    ROOT / "testing.py",
]


def concrete_specs(cls: type[OpSpec] = OpSpec) -> set[type[OpSpec]]:
    """kstream's spec classes that name an operator kind (not the shared bases)."""
    subs = {c for c in cls.__subclasses__() if c.__module__.startswith("kstream.")}
    return {c for s in subs for c in concrete_specs(s) | {s} if "kind" in vars(c)}


def test_every_operator_spec_has_exactly_one_registered_runtime_class() -> None:
    assert OPERATOR_MODULES  # the runtime operator modules are imported, so registered
    specs = concrete_specs()
    assert {s.kind for s in specs} >= {"source", "table", "map", "peek", "key_by", "window"}
    assert set(_RUNTIME) == specs
    assert len({s.kind for s in specs}) == len(specs)  # kind names are unique


def test_a_spec_without_a_runtime_class_is_a_one_line_error() -> None:
    from dataclasses import dataclass
    from typing import ClassVar

    @dataclass(frozen=True)
    class Unregistered(OpSpec):
        kind: ClassVar[str] = "unregistered"

    build = Build("u", "u", MemoryBackend(), {}, [], None)
    with pytest.raises(
        TypeError, match=r"decorate its runtime class with @implements\(Unregistered\)"
    ):
        build_operator(Unregistered(), build)


def kind_comparisons_and_params(tree: ast.AST) -> list[int]:
    """Lines that compare something's ``.kind`` or read something's ``.params``."""
    lines = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare):
            sides = [n.left, *n.comparators]
            if any(isinstance(x, ast.Attribute) and x.attr == "kind" for x in sides):
                lines.append(n.lineno)
        elif (  # x.params[...], x.params.get
            isinstance(n, ast.Subscript | ast.Attribute)
            and isinstance(n.value, ast.Attribute)
            and n.value.attr == "params"
        ):
            lines.append(n.lineno)
    return sorted(set(lines))


def test_the_check_finds_kind_dispatch() -> None:
    code = 'if n.kind == "window":\n    x = n.params["spec"]\nif n.kind in ("a", "b"): pass\n'
    code += 'y = n.params.get("topic")\nz = describe(n.kind, n.spec.params())\n'
    assert kind_comparisons_and_params(ast.parse(code)) == [1, 2, 3, 4]


@pytest.mark.parametrize("path", SPEC_DISPATCH, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_dispatch_on_an_operator_kind_name(path: Path) -> None:
    """``node.kind`` (the persistent name: ids, descriptions, messages) and
    ``node.params`` remain as read-only views; these modules dispatch on the spec."""
    assert kind_comparisons_and_params(ast.parse(path.read_text(), str(path))) == []
