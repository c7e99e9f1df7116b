"""The package's layering and sizes, read from the source with ``ast``.

No upward import, no import cycle; and modules and functions small enough
to read (see "Sizes" below).

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
LAYERS = ["_dsl", "models", "_check", "_runtime", "_prefetcher", "_tools", "_interleave", "_harness", "_cli",
          "public"]

#: Known upward imports, each waiting for the change that removes it (keep this empty).
PENDING: set[tuple[str, str]] = set()
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


# -- Sizes ----------------------------------------------------------------------------------------
#
# A module over MODULE_LINES lines, or a function over FUNCTION_LINES lines (its docstring not
# counted; nested functions count in their outer one, which a reader reads whole), is too long to
# read in one sitting -- unless its docstring says why it must be, in a paragraph that starts with
# SIZE_WHY. Every module of the package is measured; the subpackages in SIZE_ENFORCED must comply.

#: Subpackages (names under ``safeprefetch/``) whose sizes are enforced. Add yours once it is split.
SIZE_ENFORCED = ["_check", "_dsl", "_runtime", "_prefetcher", "_tools", "_interleave", "_harness", "_cli"]
MODULE_LINES = 600
FUNCTION_LINES = 80
#: How a docstring says why its module or function is longer than the limit.
SIZE_WHY = "Why long:"


def function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the end of the body, less the docstring's."""
    lines = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def oversized(path: Path) -> list[str]:
    """Every module or function of ``path`` over its limit without a "why" in its docstring."""
    text = path.read_text()
    tree = ast.parse(text, str(path))
    rel = path.relative_to(PACKAGE.parent)
    out = []
    lines = len(text.splitlines())
    if lines > MODULE_LINES and SIZE_WHY not in (ast.get_docstring(tree) or ""):
        out.append(f"{rel}: {lines} lines (limit {MODULE_LINES})")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = function_lines(node)
            if n > FUNCTION_LINES and SIZE_WHY not in (ast.get_docstring(node) or ""):
                out.append(f"{rel}:{node.lineno} {node.name}(): {n} lines (limit {FUNCTION_LINES})")
    return out


def size_report() -> dict[str, list[str]]:
    """Oversized modules and functions of the whole package, by subpackage (``""`` for top-level modules)."""
    report: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        sub = parts[0] if len(parts) > 1 else ""
        found = oversized(path)
        if found:
            report.setdefault(sub, []).extend(found)
    return report


def test_enforced_subpackages_exist():
    for sub in SIZE_ENFORCED:
        assert (PACKAGE / sub / "__init__.py").is_file(), sub


def test_modules_and_functions_stay_readable_in_the_enforced_subpackages():
    report = size_report()
    bad = [line for sub in SIZE_ENFORCED for line in report.get(sub, [])]
    assert not bad, "too long, and the docstring does not say why (" + SIZE_WHY + " ...):\n" + "\n".join(bad)


def test_the_size_check_has_teeth(tmp_path, monkeypatch):
    """A long function is reported unless its docstring says why; so is a long module."""
    pkg = tmp_path / "safeprefetch"
    (pkg / "_check").mkdir(parents=True)
    (pkg / "_check" / "__init__.py").write_text("")
    body = "".join(f"    x{i} = {i}\n" for i in range(FUNCTION_LINES))
    (pkg / "_check" / "long.py").write_text(f"def long():\n{body}\n\ndef excused():\n"
                                            f'    """Excused.\n\n    {SIZE_WHY} one table, read top down."""\n{body}')
    (pkg / "_check" / "big.py").write_text("x = 1\n" * (MODULE_LINES + 1))
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    found = size_report()["_check"]
    assert any("long.py:1 long()" in line for line in found)
    assert not any("excused" in line for line in found)
    assert any(line.startswith("safeprefetch/_check/big.py:") for line in found)
