"""The package's layering, read from the source with ``ast``: no upward import, no import cycle.

Each subpackage is a layer, and a module may import only from its own layer
or a lower one. The public modules sit on top (they re-export), except
``safeprefetch.model``, the DSL's public face, which is the DSL's layer.
``safeprefetch.models`` is the catalog (installed from ``models/``): its
models import the public DSL and, for the reference prefetcher, the
prefetcher's protocol. Imports inside functions count too: a lazy import is
still a dependency.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "safeprefetch"

#: Lowest first. A module may import from its own layer and the layers before it. The catalog
#: (``models``) is written in the public DSL only, so it sits right above it; the live Prefetcher
#: compiles the catalog's reference model.
LAYERS = ["_dsl", "models", "_check", "_runtime", "_prefetcher", "_tools", "_harness", "_cli", "public"]

#: Known upward imports, each waiting for the change that removes it (keep this empty).
PENDING: set[tuple[str, str]] = {
    ("safeprefetch._check.distributed", "safeprefetch._tools.catalog"),
    ("safeprefetch._check.strategies", "safeprefetch._tools.catalog"),
}
PUBLIC_IN_LAYER = {"safeprefetch.model": "_dsl"}
MODULES: set[str] = set()


def module_name(path: Path) -> str:
    if path.is_relative_to(ROOT / "models"):
        rel = path.relative_to(ROOT / "models").with_suffix("")
        parts = ["safeprefetch", "models", *rel.parts]
    else:
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(name: str) -> str:
    if name in PUBLIC_IN_LAYER:
        return PUBLIC_IN_LAYER[name]
    parts = name.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return parts[1]
    return "public"


def sources() -> dict[str, Path]:
    files = list(PACKAGE.rglob("*.py")) + list((ROOT / "models").glob("*.py"))
    return {module_name(p): p for p in files}


def imports(name: str, path: Path) -> set[str]:
    """Every safeprefetch module ``name`` imports (resolved; at module level or inside functions)."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("safeprefetch")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("safeprefetch"):
                continue
            names = {f"{target}.{alias.name}" for alias in node.names}
            submodules = names & MODULES
            out |= submodules  # ``from pkg import module`` depends on the module, not the package
            if names - submodules:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    global MODULES
    mods = sources()
    MODULES = set(mods)
    g = {}
    for name, path in mods.items():
        g[name] = {m for m in imports(name, path) if m in mods and m != name}
    return g


def test_every_module_is_in_a_layer():
    for name in sources():
        assert layer_of(name) in LAYERS, name


def test_no_module_imports_from_a_higher_layer():
    bad = []
    for name, deps in graph().items():
        mine = LAYERS.index(layer_of(name))
        for dep in deps:
            if name.startswith(dep + ".") and dep.count(".") <= 1:
                continue  # a package's own __init__ (a docstring)
            if LAYERS.index(layer_of(dep)) > mine and (name, dep) not in PENDING:
                bad.append(f"{name} ({layer_of(name)}) imports {dep} ({layer_of(dep)})")
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycle():
    g = graph()
    # Tarjan's strongly connected components, iteratively: any component of two or more is a cycle.
    index, low, on, stack, comps = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(g[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    comps.append(comp)

    for v in sorted(g):
        if v not in index:
            visit(v)
    cycles = [sorted(c) for c in comps if len(c) > 1]
    assert not cycles, cycles


@pytest.mark.parametrize("bad, good", [("safeprefetch._dsl.x imports safeprefetch._runtime.kernel", None)])
def test_the_checker_has_teeth(bad, good, tmp_path, monkeypatch):
    """A module that imports upward is reported (checked on a throwaway package tree)."""
    pkg = tmp_path / "safeprefetch"
    (pkg / "_dsl").mkdir(parents=True)
    (pkg / "_runtime").mkdir()
    (tmp_path / "models").mkdir()
    for p in (pkg, pkg / "_dsl", pkg / "_runtime"):
        (p / "__init__.py").write_text("")
    (pkg / "_dsl" / "x.py").write_text("from .._runtime import kernel\n")
    (pkg / "_runtime" / "kernel.py").write_text("")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    with pytest.raises(AssertionError, match=r"safeprefetch._dsl.x \(_dsl\) imports safeprefetch._runtime.kernel"):
        test_no_module_imports_from_a_higher_layer()
