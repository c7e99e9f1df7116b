"""Inlining a model's step functions: a user function's body as statements over local variables.

What it guarantees
------------------
:func:`inline` turns one user function of a compiled step -- a guard, an
effect, a ``next`` function or an invariant, written against ``s`` and
``me`` -- into a list of statements that the code generator
(``codegen.py``) splices into a generated transition. In those statements

* ``s.x`` is the local variable holding shared field ``x``, ``me.y`` the
  one holding the thread's local ``y`` (``me.name`` and ``me.index`` are
  constants), the branch parameter is its constant name;
* the function's own locals are renamed with a prefix, so that the guard's
  ``k`` and the effect's ``k`` cannot meet;
* its closure variables and globals are read *once*, now, and bound in the
  generated module's namespace (the specializer does the same for closure
  variables: a model must not rebind them after building);
* constants are folded -- a comparison of the branch name with a constant, a
  closure's ``ordered`` or ``history`` flag, ``run_of[branch]`` -- and the
  branches that folding proves dead are dropped, so one guard written for
  five branches becomes five short straight-line guards;
* every ``return`` is moved to a tail position (the statements after an
  ``if`` that returns go into its ``else``), so the caller can give each
  return its own meaning: "not enabled" for a guard, "go to this label" for
  an effect.

A function this cannot do exactly is refused with :class:`NotInlinable`
(its reason says why), never approximated: the generator then leaves that
step to the machine's own ``fire``. It refuses whatever the specializer
refuses (``specialize.specialize`` returning None: the source is not what
was compiled, or ``s``/``me`` may not be the parameters everywhere), a bare
use of ``s`` or ``me`` (handing the state to other code), an attribute of
``s`` or ``me`` that is not a field, a ``return`` inside a loop, ``with`` or
``try``, a walrus, and a name that is neither local, closure, global nor
builtin.

Why trust it: it is checked, not believed. ``tests/test_codegen.py`` walks
every reachable state of every configuration of the prefetcher's sweeps and
asserts the generated transitions give exactly ``Machine.successors``; a
mutated inliner (a guard clause dropped) fails that test.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .specialize import clone, function_node, specialize

__all__ = ["Binder", "Inlined", "NotInlinable", "clone", "fold", "inline", "same_object", "simple_constant",
           "tail_returns", "terminates"]


class NotInlinable(Exception):
    """A function the inliner cannot turn into straight-line code exactly (the message says why)."""


_SIMPLE = (str, int, float, bool, type(None))
#: The shape of the generated code's own names (see codegen.py): never given to a captured value --
#: its locals (``S__x``, ``L3__k``, ``nxt__``, ``v__``), its parameter ``state``, its functions (``t0_...``).
_RESERVED = re.compile(r"^(?:[A-Z][0-9]*__|g_|[tef][0-9]+_)|^(?:state|nxt__|v__)$")


def simple_constant(value: Any) -> bool:
    """Whether ``value`` can be written as a literal with the same meaning (exact types only).

    "Same meaning" for what the folder *computes* with it (a comparison, a branch, a subscript): a
    literal is equal to the value. Whether the literal may *replace* the value in the code is
    :func:`same_object`'s question."""
    if type(value) in _SIMPLE:
        return True
    return type(value) is tuple and all(simple_constant(v) for v in value)


def same_object(value: Any) -> bool:
    """Whether a literal of ``value`` is the very object ``value``: only then may the code say the literal.

    An equal object is not enough where identity shows: ``x is NOBODY`` with a string sentinel, or a NaN
    (``nan != nan``) that a state tuple compares equal only because it holds the same object. So
    strings, floats and tuples stay names bound to the model's own objects; None, the bools and the
    small ints CPython caches (-5..256) are singletons."""
    return value is None or type(value) is bool or (type(value) is int and -5 <= value <= 256)


class Binder:
    """The generated module's namespace: captured values under stable names, one name per object."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {}

    def bind(self, name: str, value: Any) -> str:
        """The module-level name holding ``value``: ``name`` itself when free or already ``value``.

        Names shaped like the generated code's own locals (``S__x``, ``L3__k``)
        get a ``g_`` in front, so a captured global can never meet one.
        """
        if _RESERVED.match(name):
            name = "g_" + name
        base, k = name, 1
        while name in self.namespace and self.namespace[name] is not value:
            k += 1
            name = f"{base}_{k}"
        self.namespace[name] = value
        return name


@dataclass
class Inlined:
    """A function body ready to splice: statements, and the fields it reads and writes."""

    body: list[ast.stmt]
    #: Shared field names read and written (by ``s.x``), thread locals read and written (``me.y``).
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    local_reads: set[str] = field(default_factory=set)
    local_writes: set[str] = field(default_factory=set)


def inline(fn: Callable, *, nparams: int, branch: Any, prefix: str, shared: Mapping[str, str],
           local: Mapping[str, str], constants: Mapping[str, Any], binder: Binder, index: Mapping[str, Any]) -> Inlined:
    """``fn``'s body over local variables (see the module doc).

    ``nparams``: how the model calls it -- 1 ``(s)``, 2 ``(s, me)``, 3 ``(s,
    me, b)`` -- and ``branch`` the constant passed for ``b``. ``shared`` and
    ``local`` map field names to the local variables holding them;
    ``constants`` are ``me.name`` and ``me.index``; ``index`` the
    specializer's arguments ``(shared_index, local_index)``, used only to ask
    it whether the function may be rewritten at all.
    """
    code = getattr(fn, "__code__", None)
    if code is None:
        raise NotInlinable(f"{fn!r} is not a Python function")
    if code.co_argcount != nparams or code.co_kwonlyargcount or code.co_flags & 0x0C:
        raise NotInlinable(f"{fn.__name__} takes {code.co_argcount} arguments; the model calls it with {nparams}")
    if code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):
        raise NotInlinable(f"{fn.__name__} is a generator or a coroutine")
    node = clone(_checked_node(fn, index, constants))
    if isinstance(node, ast.Lambda):
        body: list[ast.stmt] = [ast.Return(value=node.body)]
    else:
        body = list(node.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring
    params = code.co_varnames[:nparams]
    rn = _Rename(fn, params, prefix, shared, local, constants, branch, binder)
    rn.comprehension_names = _comprehension_names(body, rn)
    body = fold([rn.visit(st) for st in body], binder.namespace)  # (no locations needed: it becomes text)
    return Inlined(body, rn.reads, rn.writes, rn.local_reads, rn.local_writes)


#: code object -> its checked ``def``/``lambda`` node, or the reason it was refused. Functions are
#: new closures at every build, but their code objects are shared, and parsing their file is the
#: slow part of generating (what ``function_node`` does).
_NODES: dict[Any, Any] = {}


def _checked_node(fn: Callable, index: Mapping[str, Any], constants: Mapping[str, Any]) -> ast.AST:
    """``fn``'s source node, if the specializer may rewrite it (same source as compiled, s/me safe)."""
    code = fn.__code__
    got = _NODES.get(code)
    if got is None:
        if specialize(fn, index["shared"], index["local"], constants) is None:
            got = f"{fn.__name__}: the specializer cannot rewrite it (its source, or how it uses s/me)"
        else:
            got = function_node(fn) or f"{fn.__name__}: no source"
        if len(_NODES) > 4096:
            _NODES.clear()
        _NODES[code] = got
    if isinstance(got, str):
        raise NotInlinable(got)
    return got


class _Rename(ast.NodeTransformer):
    """``s.x`` -> field local, ``me.y`` -> thread local or constant, ``b`` -> branch, locals -> prefixed, free -> bound."""

    def __init__(self, fn: Callable, params: tuple[str, ...], prefix: str, shared: Mapping[str, str],
                 local: Mapping[str, str], constants: Mapping[str, Any], branch: Any, binder: Binder):
        code = fn.__code__
        self.fn, self.prefix, self.shared, self.local, self.constants = fn, prefix, shared, local, constants
        self.s = params[0]
        self.me = params[1] if len(params) > 1 else None
        self.b = params[2] if len(params) > 2 else None
        self.branch, self.binder = branch, binder
        self.locals = set(code.co_varnames[len(params):]) | set(code.co_cellvars)
        cells = fn.__closure__ or ()
        try:
            self.free = {n: c.cell_contents for n, c in zip(code.co_freevars, cells)}
        except ValueError:
            raise NotInlinable(f"{fn.__name__}: an empty closure cell") from None
        self.bound: dict[str, str] = {}
        self.reads: set[str] = set()
        self.writes: set[str] = set()
        self.local_reads: set[str] = set()
        self.local_writes: set[str] = set()
        self.comprehension_names: set[str] = set()

    def _target(self, node: ast.Attribute) -> ast.AST:
        """``s.x`` / ``me.y`` as a Name (or a constant), recording the access."""
        owner, attr, ctx = node.value.id, node.attr, node.ctx  # type: ignore[attr-defined]
        load = isinstance(ctx, ast.Load)
        if owner == self.s:
            if attr not in self.shared:
                raise NotInlinable(f"{self.fn.__name__}: s.{attr} is not a shared variable")
            (self.reads if load else self.writes).add(attr)
            return ast.copy_location(ast.Name(id=self.shared[attr], ctx=ctx), node)
        if attr in self.local:
            (self.local_reads if load else self.local_writes).add(attr)
            return ast.copy_location(ast.Name(id=self.local[attr], ctx=ctx), node)
        if attr in self.constants and load:
            return self._value_of(attr, self.constants[attr], node)
        raise NotInlinable(f"{self.fn.__name__}: me.{attr} is not a local of this thread")

    def _value_of(self, hint: str, value: Any, node: ast.AST) -> ast.AST:
        """A value the generator knows (the branch taken, ``me.name``): a literal only when the literal is that
        very object (:func:`same_object`), else a name bound to it, so ``b is GOT`` keeps its meaning (a
        branch name with a space is not interned: its literal would be another string). The folder still
        folds it: it reads bound names' values."""
        if same_object(value):
            return ast.copy_location(ast.Constant(value), node)
        return ast.copy_location(ast.Name(id=self.binder.bind(hint, value), ctx=ast.Load()), node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        t = node.target
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == self.s:
            self.reads.add(t.attr)  # x += 1 reads x too
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == self.me:
            self.local_reads.add(t.attr)
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id in (self.s, self.me):
            return self._target(node)
        return self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> ast.AST:
        raise NotInlinable(f"{self.fn.__name__}: an assignment expression (:=)")

    def visit_Delete(self, node: ast.Delete) -> ast.AST:
        raise NotInlinable(f"{self.fn.__name__}: a del statement")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        name = node.id
        if name in (self.s, self.me):
            raise NotInlinable(f"{self.fn.__name__}: uses {name!r} other than by attribute")
        if name == self.b and self.b is not None:
            if not isinstance(node.ctx, ast.Load):
                raise NotInlinable(f"{self.fn.__name__}: rebinds its branch parameter")
            return self._value_of("branch", self.branch, node)
        if name in self.locals or name in self.comprehension_names:
            return ast.copy_location(ast.Name(id=self.prefix + name, ctx=node.ctx), node)
        if not isinstance(node.ctx, ast.Load):
            raise NotInlinable(f"{self.fn.__name__}: assigns the non-local {name!r}")
        if name not in self.bound:
            self.bound[name] = self.binder.bind(name, self._value(name))
        return ast.copy_location(ast.Name(id=self.bound[name], ctx=ast.Load()), node)

    def _value(self, name: str) -> Any:
        if name in self.free:
            return self.free[name]
        g = self.fn.__globals__
        if name in g:
            return g[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise NotInlinable(f"{self.fn.__name__}: {name!r} is not defined")

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Global,
                             ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await)):
            raise NotInlinable(f"{self.fn.__name__}: a nested function, class, global or yield")
        if isinstance(node, (ast.Match, ast.Import, ast.ImportFrom)) or (
                isinstance(node, ast.ExceptHandler) and node.name is not None):
            # They bind names as identifier strings, not Name nodes, which the renaming would miss.
            raise NotInlinable(f"{self.fn.__name__}: a match statement, an import or 'except ... as'")
        return super().generic_visit(node)


def _comprehension_names(body: list[ast.stmt], rn: "_Rename") -> set[str]:
    """Names a comprehension binds; refused when one is also used outside every comprehension as a non-local.

    Such a name is renamed like a local everywhere, which is exact inside the
    comprehensions and would turn the outer global into an unbound local.
    """
    scopes = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
    bound: set[str] = set()
    for n in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(n, ast.comprehension):
            bound |= {x.id for x in ast.walk(n.target) if isinstance(x, ast.Name)}
    if not bound:
        return bound
    # The names each use resolves outside every comprehension that encloses it: in the function's scope
    # (a local or a global). A comprehension's first iterable is evaluated in the enclosing scope; the rest
    # of it sees its own targets and the enclosing comprehensions' ones.
    # The function's own locals come from the tree, the same on every Python (3.12+ lists the targets of
    # inlined comprehensions among ``co_varnames``).
    outside: set[str] = set()
    stores: set[str] = set()
    stack: list[tuple[ast.AST, frozenset]] = [(n, frozenset()) for n in body]
    while stack:
        n, seen = stack.pop()
        if isinstance(n, scopes):
            stack.append((n.generators[0].iter, seen))
            inner = seen | {x.id for g in n.generators for x in ast.walk(g.target) if isinstance(x, ast.Name)}
            rest: list[ast.AST] = [g.target for g in n.generators] + [g.iter for g in n.generators[1:]]
            rest += [c for g in n.generators for c in g.ifs]
            rest += [n.key, n.value] if isinstance(n, ast.DictComp) else [n.elt]
            stack.extend((c, inner) for c in rest)
            continue
        if isinstance(n, ast.Name) and n.id not in seen:
            outside.add(n.id)
            if not seen and not isinstance(n.ctx, ast.Load):
                stores.add(n.id)
        stack.extend((c, seen) for c in ast.iter_child_nodes(n))
    clash = (bound & outside) - (stores | set(rn.fn.__code__.co_varnames[:rn.fn.__code__.co_argcount]))
    clash |= bound & {rn.s, rn.me, rn.b}
    if clash:
        raise NotInlinable(f"{rn.fn.__name__}: a comprehension binds {sorted(x for x in clash if x)}, "
                           "a name used outside it too")
    return bound


# -- constant folding -----------------------------------------------------------------------------

_CMP: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_BIN: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
}


class _Fold(ast.NodeTransformer):
    """Fold what the captured values decide; see :func:`fold`."""

    def __init__(self, values: Mapping[str, Any]):
        self.values = values

    def _const(self, node: ast.AST) -> tuple[bool, Any]:
        if isinstance(node, ast.Constant):
            return True, node.value
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in self.values:
            v = self.values[node.id]
            if simple_constant(v):
                return True, v
        return False, None

    def _lit(self, value: Any, like: ast.AST) -> ast.AST:
        return ast.copy_location(ast.Constant(value), like)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        ok, v = self._const(node)
        return self._lit(v, node) if ok and same_object(v) else node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        vals = [self._const(x) for x in (node.left, *node.comparators)]
        if all(ok for ok, _ in vals) and all(type(op) in _CMP for op in node.ops):
            result = True
            try:
                for op, (_, a), (_, b) in zip(node.ops, vals, vals[1:]):
                    result = _CMP[type(op)](a, b)
                    if not result:
                        break
            except Exception:  # noqa: BLE001 - e.g. `None < 4`, on a path the code may never take: left as is
                return node
            return self._lit(bool(result), node)
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        (oa, a), (ob, b) = self._const(node.left), self._const(node.right)
        if oa and ob and type(node.op) in _BIN and type(a) is type(b) and type(a) in (int, str):
            return self._lit(_BIN[type(node.op)](a, b), node)
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        ok, v = self._const(node.operand)
        if ok and isinstance(node.op, ast.Not):
            return self._lit(not v, node)
        if ok and isinstance(node.op, ast.USub) and type(v) is int and same_object(-v):
            return self._lit(-v, node)
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        keep: list[ast.AST] = []
        is_and = isinstance(node.op, ast.And)
        for i, v in enumerate(node.values):
            ok, c = self._const(v)
            last = i == len(node.values) - 1
            if ok and not last:
                if bool(c) != is_and:  # `False and ...` / `True or ...`: this operand is the value
                    keep.append(v)
                    break
                continue  # `True and x` is x; `False or x` is x
            keep.append(v)
            if ok:
                break
        if len(keep) == 1:
            return keep[0]
        node.values = keep
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        ok, c = self._const(node.test)
        if ok:
            return node.body if c else node.orelse
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name) and node.value.id in self.values:
            ok, key = self._const(node.slice)
            container = self.values[node.value.id]
            if ok and type(container) in (dict, tuple, str):
                try:
                    v = container[key]
                except (KeyError, IndexError, TypeError):
                    return node  # raises at run time, as it would have
                if simple_constant(v) and same_object(v):
                    return self._lit(v, node)
        return node


def _block(stmts: list[ast.stmt], values: Mapping[str, Any]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for st in stmts:
        if isinstance(st, ast.If):
            st.test = _Fold(values).visit(st.test)
            ok, c = _Fold(values)._const(st.test)
            if ok:
                out.extend(_block(st.body if c else st.orelse, values))
                if out and terminates([out[-1]]):
                    break
                continue
            st.body = _block(st.body, values) or [ast.Pass()]
            st.orelse = _block(st.orelse, values)
        elif isinstance(st, ast.While):
            st.test = _Fold(values).visit(st.test)
            ok, c = _Fold(values)._const(st.test)
            if ok and not c:
                out.extend(_block(st.orelse, values))
                continue
            st.body = _block(st.body, values) or [ast.Pass()]
            st.orelse = _block(st.orelse, values)
        elif isinstance(st, (ast.For, ast.With, ast.Try)):
            for name in ("body", "orelse", "finalbody"):
                if hasattr(st, name):
                    setattr(st, name, _block(getattr(st, name), values))
            if isinstance(st, ast.Try):
                for h in st.handlers:
                    h.body = _block(h.body, values) or [ast.Pass()]
            if isinstance(st, ast.For):
                st.iter = _Fold(values).visit(st.iter)
            if isinstance(st, ast.With):
                st.items = [_Fold(values).visit(i) for i in st.items]
            st.body = st.body or [ast.Pass()]
        else:
            st = _Fold(values).visit(st)
        out.append(st)
        if terminates([st]):
            break  # dead code after a return or raise
    return out


def fold(stmts: list[ast.stmt], values: Mapping[str, Any]) -> list[ast.stmt]:
    """``stmts`` with constants folded and the branches they decide dropped, and dead code after a return cut.

    ``values`` are the captured values by bound name; only exact ``str``,
    ``int``, ``float``, ``bool``, ``None`` and tuples of them are folded (a
    named int such as a slot state keeps its name).
    """
    return _block(stmts, values)


def terminates(stmts: list[ast.stmt]) -> bool:
    """Whether every path through ``stmts`` ends in a ``return`` or ``raise``."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return terminates(last.body) and terminates(last.orelse)
    return False


def _has_return(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Return) for n in ast.walk(node))


def tail_returns(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """``stmts`` rewritten so that every path ends in a ``return`` (or ``raise``), each at a tail position.

    The statements after an ``if`` that returns on some path go into each of
    its branches that does not; a function that falls off its end returns
    None. A return inside a loop, ``with`` or ``try`` cannot be moved and is
    refused (:class:`NotInlinable`).
    """
    out: list[ast.stmt] = []
    for i, st in enumerate(stmts):
        if isinstance(st, (ast.Return, ast.Raise)):
            out.append(st)
            return out
        if isinstance(st, ast.If) and _has_return(st):
            rest = stmts[i + 1:]
            body = st.body if terminates(st.body) else st.body + clone(rest)
            orelse = st.orelse if terminates(st.orelse) else st.orelse + clone(rest)
            out.append(ast.If(test=st.test, body=tail_returns(body), orelse=tail_returns(orelse)))
            return out
        if _has_return(st):
            raise NotInlinable(f"a return inside a {type(st).__name__.lower()} statement")
        out.append(st)
    out.append(ast.Return(value=None))
    return out
