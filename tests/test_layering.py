"""The package's layers: no import cycle between its packages, and the Layout of docs/architecture.md
section names every package and module of ``kstream/`` in the order calls go.

The import graph is read from the source (every ``import`` statement, also those
inside functions), at the level of that Layout's entries: a sub-package of
``kstream`` (``kstream/worker/``) or a top-level module (``kstream/job.py``); and
module by module: every module is named in its package's entry, and every import of
one module by another goes down the Layout (or stays in its package).
"""

from __future__ import annotations

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kstream"


def unit_of(module: str, package: Path) -> str | None:
    """The layout entry of a dotted name in the package (None: a name of the package's
    face, ``kstream/__init__.py``, which only holds the version)."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    if (package / parts[1] / "__init__.py").is_file():
        return f"{package.name}/{parts[1]}/"
    if (package / f"{parts[1]}.py").is_file():
        return f"{package.name}/{parts[1]}.py"
    return None


def imported_modules(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Dotted names of what ``module`` imports (``from a import b`` also counts ``a.b``:
    ``b`` may be a module)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                prefix = ".".join([*base, *([node.module] if node.module else [])])
            else:
                prefix = node.module or ""
            out.add(prefix)
            out |= {f"{prefix}.{a.name}" for a in node.names}
    return out


def import_graph(package: Path) -> dict[str, set[str]]:
    """Layout entry -> the entries it imports (itself left out)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        is_package = rel.name == "__init__"
        module = ".".join(rel.parts[:-1] if is_package else rel.parts)
        src = unit_of(module, package)
        if src is None:
            continue
        deps = graph.setdefault(src, set())
        tree = ast.parse(path.read_text(), str(path))
        for name in imported_modules(tree, module, is_package):
            if name.split(".")[0] != package.name:
                continue
            dst = unit_of(name, package)
            if dst is not None and dst != src:
                deps.add(dst)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its entries in order), or None."""
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as e:
        return list(e.args[1])
    return None


def layout_entries(readme: str, package: str) -> list[str]:
    """The ``kstream/...`` entries of the Layout of docs/architecture.md block, top to bottom."""
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    return re.findall(rf"(?<![\w/]){package}/[\w]+(?:/|\.py)", block)


def layout_texts(doc: str, package: str) -> dict[str, str]:
    """Each entry of the Layout block -> its text (up to the next entry)."""
    section = doc.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    found = list(re.finditer(rf"(?<![\w/]){package}/[\w]+(?:/|\.py)", block))
    ends = [m.start() for m in found[1:]] + [len(block)]
    return {m.group(0): block[m.end() : end] for m, end in zip(found, ends, strict=True)}


def modules_of(package: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of ``package`` (a package by its ``__init__``)."""
    out: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def unnamed_modules(package: Path, texts: dict[str, str]) -> list[str]:
    """Modules (not a package's ``__init__``) whose name their entry's text does not say."""
    missing = []
    for module, path in modules_of(package).items():
        entry = unit_of(module, package)
        if entry is None or entry.endswith(".py") or path.name == "__init__.py":
            continue
        if not re.search(rf"(?<![\w/]){path.stem}(?!\w)", texts.get(entry, "")):
            missing.append(f"{path.relative_to(package.parent)} (entry {entry})")
    return missing


def module_imports(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (itself left out)."""
    modules = modules_of(package)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        names = imported_modules(tree, module, path.name == "__init__.py")
        graph[module] = {n for n in names if n in modules and n != module}
    return graph


def upward_imports(package: Path, entries: list[str]) -> list[str]:
    """Imports of one module by another from a package lower in ``entries`` to a higher one."""
    rank = {e: i for i, e in enumerate(entries)}
    out = []
    for src, deps in module_imports(package).items():
        a = unit_of(src, package)
        for dst in sorted(deps):
            b = unit_of(dst, package)
            if a is not None and b is not None and rank[b] < rank[a]:
                out.append(f"{src} imports {dst} ({b} is above {a})")
    return sorted(out)


def test_no_import_cycle_between_packages() -> None:
    graph = import_graph(PACKAGE)
    assert len(graph) > 15  # the walk found the package
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_the_readme_layout_names_every_package_and_module_in_the_order_calls_go() -> None:
    entries = layout_entries((ROOT / "docs" / "architecture.md").read_text(), "kstream")
    assert len(entries) == len(set(entries)), f"named twice: {entries}"
    on_disk = {
        f"kstream/{p.name}/" if p.is_dir() else f"kstream/{p.name}"
        for p in PACKAGE.iterdir()
        if (p.is_dir() and (p / "__init__.py").is_file())
        or (p.suffix == ".py" and p.name != "__init__.py")
    }
    assert set(entries) == on_disk, (
        f"not in the Layout of docs/architecture.md: {sorted(on_disk - set(entries))}; "
        f"in it but not in kstream/: {sorted(set(entries) - on_disk)}"
    )
    rank = {e: i for i, e in enumerate(entries)}
    upward = sorted(
        f"{src} imports {dst}"
        for src, deps in import_graph(PACKAGE).items()
        for dst in deps
        if rank[dst] < rank[src]
    )
    assert not upward, "calls must go down the Layout of docs/architecture.md list:\n" + "\n".join(
        upward
    )


def test_the_layout_names_every_module_in_its_package_entry() -> None:
    texts = layout_texts((ROOT / "docs" / "architecture.md").read_text(), "kstream")
    assert len(texts) > 15
    missing = unnamed_modules(PACKAGE, texts)
    assert not missing, "modules the Layout of docs/architecture.md does not name:\n" + "\n".join(
        missing
    )


def test_every_import_between_modules_goes_down_the_layout() -> None:
    entries = layout_entries((ROOT / "docs" / "architecture.md").read_text(), "kstream")
    graph = module_imports(PACKAGE)
    assert sum(len(d) for d in graph.values()) > 300  # the walk found the imports
    upward = upward_imports(PACKAGE, entries)
    assert not upward, "module imports up the Layout of docs/architecture.md:\n" + "\n".join(upward)


# ---- the checks themselves can fail ----------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "kstream" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "kstream"


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path: Path) -> None:
    pkg = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a/__init__.py": "",
            "a/x.py": "from kstream.b import y\n",
            "b/__init__.py": "",
            "b/y.py": "def f():\n    from ..c import z\n",
            "c/__init__.py": "from . import z\n",
            "c/z.py": "def g():\n    import kstream.a.x\n",
            "names.py": "",
        },
    )
    graph = import_graph(pkg)
    assert graph["kstream/c/"] == {"kstream/a/"}  # relative, package and in-function imports
    cycle = find_cycle(graph)
    assert cycle is not None and set(cycle) == {"kstream/a/", "kstream/b/", "kstream/c/"}
    graph["kstream/c/"].clear()
    assert find_cycle(graph) is None


def test_layout_entries_are_read_from_the_layout_block_in_order() -> None:
    readme = (
        "# x\n\nkstream/before/\n\n## Layout\n\ntext kstream/prose/\n\n```\n"
        "kstream/cli/  the command\n"
        "kstream/job.py  a job   kstream/names.py  names (not kstream.names.x)\n"
        "```\n\n## Next\n\n```\nkstream/after/\n```\n"
    )
    assert layout_entries(readme, "kstream") == [
        "kstream/cli/",
        "kstream/job.py",
        "kstream/names.py",
    ]


def test_a_module_its_entry_does_not_name_and_an_upward_module_import_are_found(
    tmp_path: Path,
) -> None:
    pkg = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a/__init__.py": "",
            "a/named.py": "from kstream.b import low\n",
            "a/unnamed.py": "",
            "b/__init__.py": "",
            "b/low.py": "def f():\n    from ..a import named\n",
            "b/sub/__init__.py": "",
            "b/sub/deep.py": "",
        },
    )
    doc = (
        "# x\n\n## Layout\n\n```\nkstream/a/  named (not unnamedx or a/unnamed)\n"
        "kstream/b/  low, sub: deep\n```\n"
    )
    texts = layout_texts(doc, "kstream")
    assert texts == {
        "kstream/a/": "  named (not unnamedx or a/unnamed)\n",
        "kstream/b/": "  low, sub: deep\n",
    }
    assert unnamed_modules(pkg, texts) == ["kstream/a/unnamed.py (entry kstream/a/)"]
    assert module_imports(pkg)["kstream.a.named"] == {"kstream.b", "kstream.b.low"}
    assert upward_imports(pkg, ["kstream/a/", "kstream/b/"]) == [
        "kstream.b.low imports kstream.a (kstream/a/ is above kstream/b/)",
        "kstream.b.low imports kstream.a.named (kstream/a/ is above kstream/b/)",
    ]
    assert upward_imports(pkg, ["kstream/b/", "kstream/a/"]) == [
        "kstream.a.named imports kstream.b (kstream/b/ is above kstream/a/)",
        "kstream.a.named imports kstream.b.low (kstream/b/ is above kstream/a/)",
    ]
