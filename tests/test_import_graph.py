"""The import graph of piegpu: no cycles, and imports point one way down the layers of DESIGN.md.

    eta -> kernel -> targets -> runtime -> model -> samplers -> inferlets -> textgen -> server/cli/bench

Built from the source with `ast`, so nothing is imported: every `import piegpu.x`,
`from piegpu.x import y` and relative import counts, at module level or inside a
function (an import in a function is still a dependency, only a later one), and inside
`if TYPE_CHECKING:` too. Only import statements count: modules named by strings for
importlib (the target table in piegpu/targets.py) are not edges.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "piegpu"

# Lowest layer first. A module may import its own layer and the layers below it, never one
# above. Entries are paths relative to the repository root: a folder (ending in "/") holds
# every module under it. Every module of piegpu/ must fall in exactly one layer.
LAYERS = (
    ("base", ("piegpu/errors.py", "piegpu/dtypes.py", "piegpu/paths.py",
              "piegpu/targets.py")),  # the target table: renderers and runners named by strings, loaded lazily
    ("eta", ("piegpu/eta/", "piegpu/ptir/")),  # Pie's PTIR containers: another encoding of eta programs
    ("kernel", ("piegpu/kernel/",)),  # with the channel buffer layout that the runtime and the shaders share
    ("targets", ("piegpu/wgsl/", "piegpu/spirv/", "piegpu/metal/", "piegpu/cuda/", "piegpu/stablehlo/")),
    ("runtime", ("piegpu/runtime/",)),
    ("model", ("piegpu/model/",)),
    ("samplers", ("piegpu/samplers/",)),
    ("inferlets", ("piegpu/inferlets/",)),
    ("textgen", ("piegpu/textgen/",)),  # the user-facing Model, Generation, batches, the token-level core
    ("entry", ("piegpu/server/", "piegpu/cli/", "piegpu/bench/",
               "piegpu/__init__.py", "piegpu/__main__.py")),
)


@dataclass(frozen=True)
class Edge:
    """One import statement: `src` imports `dst` at `path`:`line`, in function `function` ("" at module level)."""

    src: str
    dst: str
    path: str
    line: int
    function: str = ""
    type_only: bool = False  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        where = f" in {self.function}()" if self.function else ""
        return f"{self.path}:{self.line}{where} imports {self.dst}" + (" (under TYPE_CHECKING)" if self.type_only
                                                                       else "")


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


@lru_cache(maxsize=None)
def modules() -> dict:
    """Dotted module name -> file, for every .py file under piegpu/."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _existing(name: str) -> str:
    """The module an import of `name` loads: `name` itself, or the nearest enclosing module that exists."""
    mods = modules()
    while name not in mods and "." in name:
        name = name.rpartition(".")[0]
    return name


class _Imports(ast.NodeVisitor):
    def __init__(self, name: str, path: Path):
        self.name, self.path = name, path
        self.package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        self.functions: list = []
        self.type_only = False
        self.edges: list = []

    def _add(self, dst: str, node) -> None:
        edge = Edge(self.name, dst, _rel(self.path), node.lineno, ".".join(self.functions), self.type_only)
        if dst != self.name and dst in modules() and edge not in self.edges:
            self.edges.append(edge)

    def _function(self, node) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _function

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
            saved, self.type_only = self.type_only, True
            for child in node.body:
                self.visit(child)
            self.type_only = saved
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "piegpu" or alias.name.startswith("piegpu."):
                self._add(_existing(alias.name), node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            parts = self.package.split(".")
            base = ".".join(parts[:len(parts) - (node.level - 1)])
            mod = f"{base}.{node.module}" if node.module else base
        else:
            mod = node.module or ""
            if mod != "piegpu" and not mod.startswith("piegpu."):
                return
        for alias in node.names:
            sub = f"{mod}.{alias.name}"  # `from pkg import submodule` loads the submodule
            self._add(sub if sub in modules() else _existing(mod), node)


@lru_cache(maxsize=None)
def edges() -> tuple:
    """Every import edge between piegpu modules."""
    out = []
    for name, path in modules().items():
        visitor = _Imports(name, path)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        out.extend(visitor.edges)
    return tuple(out)


def strongly_connected(graph: dict) -> list:
    """Tarjan's strongly connected components (iterative), each a sorted list of nodes."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


def shortest_cycle(start: str, graph: dict, within: set) -> list:
    """The shortest path start -> ... -> start inside `within` (breadth first)."""
    prev = {start: None}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph.get(v, ())):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return path[::-1] + [start]
            if w in within and w not in prev:
                prev[w] = v
                queue.append(w)
    raise AssertionError(f"{start} is on no cycle")


def cycles() -> list:
    """(one shortest cycle as its edges, every module of the cycle's strongly connected component)."""
    graph: dict = {m: set() for m in modules()}
    first: dict = {}
    for e in edges():
        graph[e.src].add(e.dst)
        first.setdefault((e.src, e.dst), e)
    found = []
    for comp in strongly_connected(graph):
        if len(comp) > 1:
            path = shortest_cycle(comp[0], graph, set(comp))
            found.append(([first[a, b] for a, b in zip(path, path[1:])], comp))
    return found


def layer_of(name: str) -> int:
    """The index in LAYERS of module `name` (AssertionError unless exactly one layer holds it)."""
    rel = _rel(modules()[name])
    hits = [i for i, (_, entries) in enumerate(LAYERS) for entry in entries
            if rel == entry or (entry.endswith("/") and rel.startswith(entry))]
    assert len(hits) == 1, (f"{rel} is in {len(hits)} layers of LAYERS in {_rel(Path(__file__))}: "
                            "add it to exactly one")
    return hits[0]


def upward_imports() -> list:
    """Every edge from a lower layer to a higher one."""
    return [e for e in edges() if layer_of(e.dst) > layer_of(e.src)]


# ---- tests -------------------------------------------------------------------------------

def test_the_graph_sees_every_kind_of_import():
    """The parser is not vacuous: absolute, relative, submodule and in-function imports are all edges."""
    mods = modules()
    assert {"piegpu", "piegpu.eta", "piegpu.eta.ops", "piegpu.errors", "piegpu.cli"} <= set(mods)
    got = {(e.src, e.dst) for e in edges()}
    assert ("piegpu.eta.ops", "piegpu.errors") in got  # from ..errors import ValidationError
    assert ("piegpu.samplers", "piegpu.samplers.chain") in got  # from .chain import ... in a package __init__
    assert any(e.function for e in edges()), "no import inside a function was found"
    assert all(e.dst in mods and e.src in mods and e.src != e.dst for e in edges())


def test_no_import_cycles():
    found = cycles()
    lines = []
    for cycle, component in found:
        lines.append(" -> ".join([cycle[0].src] + [e.dst for e in cycle]))
        lines.extend(f"    {e}" for e in cycle)
        if len(component) > len(cycle):
            lines.append(f"    (more cycles among {', '.join(component)})")
    if found:
        pytest.fail(f"{len(found)} import cycle(s) in piegpu/, each with the import statements that close it:\n"
                    + "\n".join(lines), pytrace=False)


def test_every_module_has_one_layer():
    for name in modules():
        layer_of(name)


def test_imports_point_down_the_layers():
    bad = upward_imports()
    names = [n for n, _ in LAYERS]
    lines = [f"{names[layer_of(e.src)]} -> {names[layer_of(e.dst)]}: {e}" for e in bad]
    if bad:
        pytest.fail(f"{len(bad)} import(s) point up the layers {' -> '.join(names)} (DESIGN.md; the table is "
                    f"LAYERS in {_rel(Path(__file__))}):\n" + "\n".join(lines), pytrace=False)


def test_modules_stay_small():
    """No module of piegpu/ over 450 lines: a longer one holds more than one thing."""
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 450}
    assert not long, f"modules over 450 lines: {long}. Fix: split them by what they hold"


def test_few_modules_loose_at_the_top():
    """At most 6 modules directly in piegpu/: everything else lives in a package named for its floor."""
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= 6, f"{len(loose)} modules loose at the top of piegpu/: {loose}"
