"""A measurement: the generated transitions over a mutable fixed layout instead of a rebuilt tuple.

Issue 16 asked for the state as "a small fixed layout, not a rebuilt tuple,
where that is faster". The runtime keeps the state immutable: a step
builds a new tuple (and a new tuple of slots when it writes one), so that a
step is one store of a finished value, which no interrupt can split, and
the record and the conformance check hold states that never change. This
module measures what that costs, without writing the protocol again: it
rewrites the generator's own output (``CompiledMachine.source``) with an
AST transform into transitions that update a list in place,

* ``state[i] = value`` for each field the step changes, instead of a new
  18-field tuple with every other field copied over;
* ``slots[k] = value`` on a list of slots, instead of ``_set``'s new tuple;

and ``ceiling_report`` times them (K4, and K5 compiled by Cython) beside the
tuple transitions (K1, K2), checked to reach the same state first.
:func:`check_against` compares the rewrite with the generated transitions
in every reachable state of a machine (tests/test_live_layout.py), so a
figure is never a measurement of different code.

It is a measurement only: no runtime calls these. In place, a step is many
stores, and a KeyboardInterrupt between two of them would leave half a step
in the state: adopting the layout means making every transition an
interrupt-free region, which this does not do.
"""

from __future__ import annotations

import ast
from typing import Any, Callable

__all__ = ["MutableTransitions", "check_against", "mutable_transitions"]


class _InPlace(ast.NodeTransformer):
    """``X = _set(X, k, v)`` becomes ``X[k] = v``; ``nxt__ = (e0, ..., en)`` becomes stores of the changed fields."""

    def visit_Assign(self, node: ast.Assign) -> Any:
        target, v = node.targets[0] if len(node.targets) == 1 else None, node.value
        if not isinstance(target, ast.Name):
            return node
        if (isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "_set"
                and isinstance(v.args[0], ast.Name) and v.args[0].id == target.id):
            store = ast.Subscript(ast.Name(target.id, ast.Load()), v.args[1], ast.Store())
            return ast.copy_location(ast.Assign(targets=[store], value=v.args[2]), node)
        if target.id == "nxt__" and isinstance(v, ast.Tuple):
            out: list[ast.stmt] = []
            for i, e in enumerate(v.elts):
                unchanged = (isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name) and e.value.id == "state"
                             and isinstance(e.slice, ast.Constant) and e.slice.value == i)
                if not unchanged:
                    store = ast.Subscript(ast.Name("state", ast.Load()), ast.Constant(i), ast.Store())
                    out.append(ast.Assign(targets=[store], value=e))
            out.append(ast.Assign(targets=[ast.Name("nxt__", ast.Store())], value=ast.Name("state", ast.Load())))
            return [ast.copy_location(o, node) for o in out]
        return node


class MutableTransitions:
    """The rewritten transitions: ``firsts[(thread, pc)]`` and ``ones[(thread, pc)]`` as the generated ones,
    over a list state whose ``list_fields`` hold lists (``to_list``/``to_tuple`` convert)."""

    def __init__(self, source: str, namespace: dict, firsts: dict, ones: dict, list_fields: tuple[int, ...]):
        self.source, self.namespace, self.firsts, self.ones = source, namespace, firsts, ones
        self.list_fields = list_fields

    def to_list(self, state: tuple) -> list:
        return [list(x) if i in self.list_fields else x for i, x in enumerate(state)]

    def to_tuple(self, state: list) -> tuple:
        return tuple(tuple(x) if i in self.list_fields else x for i, x in enumerate(state))


def _list_fields(tree: ast.Module) -> tuple[int, ...]:
    """The state fields some step updates with ``_set`` (loaded as ``S__x = state[i]``, then ``_set(S__x...)``
    directly or through an alias ``L__y = S__x``)."""
    fields: set[int] = set()
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        origin: dict[str, int] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name, v = node.targets[0].id, node.value
                if (isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and v.value.id == "state"
                        and isinstance(v.slice, ast.Constant)):
                    origin[name] = v.slice.value
                elif isinstance(v, ast.Name) and v.id in origin:
                    origin[name] = origin[v.id]
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_set"
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in origin):
                fields.add(origin[node.args[0].id])
    return tuple(sorted(fields))


def mutable_transitions(cm: Any, compiled: Callable[[str, dict], Any] | None = None) -> MutableTransitions:
    """The in-place rewrite of ``cm``'s transitions, run as Python, or as the module ``compiled(source,
    namespace)`` returns (its free names bound from the generated module's namespace)."""
    tree = ast.parse(cm.source)
    fields = _list_fields(tree)
    tree = ast.fix_missing_locations(_InPlace().visit(tree))
    source = ast.unparse(tree)
    base = next(g for table in cm.steps for g in table.values()).first.__globals__
    if compiled is None:
        ns = dict(base)
        exec(compile(source, f"<in-place rewrite of {cm.filename}>", "exec"), ns)  # noqa: S102 - our own output
        get: Callable[[str], Any] = ns.__getitem__
    else:
        module = compiled(source, base)
        ns = vars(module)
        get = ns.__getitem__
    steps = {(t, pc): g for t, table in enumerate(cm.steps) for pc, g in table.items()}
    return MutableTransitions(source, ns, {k: get(g.first.__name__) for k, g in steps.items()},
                              {k: tuple(get(f.__name__) for f in g.ones) for k, g in steps.items()}, fields)


def check_against(cm: Any, mt: MutableTransitions, init: tuple | None = None, max_states: int = 200_000) -> int:
    """Every state reachable from ``init`` (``cm.machine``'s own by default): the rewrite gives what the generated transitions give, for
    every thread's step and branch (None, the same successor, or the same violation); the states checked.
    Raises AssertionError naming the first difference."""
    from .._dsl.violations import StepViolation

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, (StepViolation, Exception)) or isinstance(b, (StepViolation, Exception)):
            return type(a) is type(b) and str(a) == str(b)
        if hasattr(a, "kind") and hasattr(b, "kind"):  # Broken
            return a.kind == b.kind and a.message == b.message and a.state == mt.to_tuple(b.state)
        if isinstance(b, list):
            return a == mt.to_tuple(b)
        if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == 2 and isinstance(b[1], list):
            return a[0] == b[0] and a[1] == mt.to_tuple(b[1])
        return a == b

    m = cm.machine
    start = m.init if init is None else init
    seen, frontier = {start}, [start]
    while frontier:
        state = frontier.pop()
        for (t, pc), first in mt.firsts.items():
            if state[m.pc_index[t]] != pc:
                continue
            want, got = cm.steps[t][pc].first(state), first(mt.to_list(state))
            if not same(want, got):
                raise AssertionError(f"thread {t} at {pc!r} in {state}: generated {want!r}, in place {got!r}")
            for bi, (one_g, one_m) in enumerate(zip(cm.steps[t][pc].ones, mt.ones[t, pc])):
                w1, g1 = one_g(state), one_m(mt.to_list(state))
                if not same(w1, g1):
                    raise AssertionError(f"thread {t} at {pc!r} branch {bi} in {state}: generated {w1!r}, "
                                         f"in place {g1!r}")
                if type(w1) is tuple and w1 not in seen:
                    if len(seen) >= max_states:
                        raise AssertionError(f"more than {max_states} states: use a smaller configuration")
                    seen.add(w1)
                    frontier.append(w1)
    return len(seen)
