"""Specializing user step functions for speed, without changing what they mean.

Model authors write ``s.count += 1`` and ``me.left -= 1``: readable, and
exactly what appears in docs. Executed through views, each of those is a
Python-level property call. This module rewrites such a function, once per
thread at compile time, so that ``s.count`` becomes ``s[3]`` and
``me.left`` becomes ``s[17]`` (a thread's locals live in the same flat state
list as the shared variables), ``me.name`` and ``me.index`` become
constants. The rewritten function receives the same mutable state list (a
view subclass of ``list``, so helpers called with ``s`` still work by name).

What is preserved: the function's globals, its default arguments, and its
closure variables (read once, after ``build`` has finished -- a model must
not rebind a captured variable after building, which no model has a reason
to do). Anything the rewriter is not sure about -- no source available,
``s`` or ``me`` rebound inside the function, a nested function or lambda that
captures them -- makes it return None, and the caller keeps the original
function with views. The two paths are interchangeable, and checked to be:
``tests/test_model_fire_parts.py`` explores every catalog model with
specialization on and off (:data:`ENABLED`) and compares every reachable
state and verdict.
"""

from __future__ import annotations

import ast
import copy
import inspect
import linecache
import os
from typing import Any, Callable, Mapping

__all__ = ["ENABLED", "function_node", "specialize", "uses_arg"]

#: Whether the compiler specializes step functions at all. Set SAFEPREFETCH_SPECIALIZE=0 to run
#: every user function through views only (slower, same meaning); read at each compile.
ENABLED = os.environ.get("SAFEPREFETCH_SPECIALIZE", "1") != "0"

_cache: dict[tuple, Any] = {}


def uses_arg(fn: Callable, position: int) -> bool:
    """Whether ``fn``'s positional parameter ``position`` is ever read in its body."""
    code = getattr(fn, "__code__", None)
    if code is None or position >= code.co_argcount:
        return True
    name = code.co_varnames[position]
    return name in code.co_varnames[: code.co_argcount] and (
        name in _loaded_names(code) or name in code.co_cellvars)


def _loaded_names(code) -> set[str]:
    import dis

    return {ins.argval for ins in dis.get_instructions(code) if ins.opname.startswith("LOAD_FAST")}


def function_node(fn: Callable) -> ast.AST | None:
    """The ``def`` or ``lambda`` node ``fn`` was compiled from, or None when it cannot be told for sure."""
    code = fn.__code__
    try:
        filename = inspect.getsourcefile(fn)
    except TypeError:
        return None
    if not filename:
        return None
    linecache.checkcache(filename)  # the file may have changed since it was first read
    lines = linecache.getlines(filename)
    if not lines:
        return None
    key = (filename, len(lines), lines[0] if lines else "")
    tree = _cache.get(key)
    if tree is None:
        try:
            tree = ast.parse("".join(lines))
        except SyntaxError:
            return None
        _cache[key] = tree
    first = code.co_firstlineno
    if fn.__name__ == "<lambda>":
        candidates = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == first]
        if len(candidates) > 1:
            # Disambiguate by where the body's first instruction sits.
            pos = [p for p in code.co_positions() if p[0] is not None and p[2] is not None]
            if not pos:
                return None
            line, _, col, _ = pos[-1]
            inner = [n for n in candidates if _contains(n.body, line, col)]
            if len(inner) != 1:
                # nested lambdas: take the innermost
                inner.sort(key=lambda n: (n.body.lineno, n.body.col_offset), reverse=True)
                if not inner:
                    return None
            candidates = inner[:1]
        if len(candidates) != 1:
            return None
        node = candidates[0]
        if [a.arg for a in node.args.args] != list(code.co_varnames[: code.co_argcount]):
            return None
        return node
    candidates = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef,)) and n.name == fn.__name__
                  and (n.lineno == first or (n.decorator_list and n.decorator_list[0].lineno == first))]
    return candidates[0] if len(candidates) == 1 else None


def _contains(node: ast.AST, line: int, col: int) -> bool:
    start = (node.lineno, node.col_offset)
    end = (node.end_lineno, node.end_col_offset)
    return start <= (line, col) <= end


class _Rewrite(ast.NodeTransformer):
    def __init__(self, s: str, me: str | None, shared: Mapping[str, int], local: Mapping[str, int],
                 constants: Mapping[str, Any]):
        self.s, self.me = s, me
        self.shared, self.local, self.constants = shared, local, constants
        self.unsafe = False
        self.reads: set[int] = set()
        self.writes: set[int] = set()

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.value, ast.Name):
            name = node.value.id
            if name == self.s and node.attr in self.shared:
                i = self.shared[node.attr]
                (self.reads if isinstance(node.ctx, ast.Load) else self.writes).add(i)
                return self._index(i, node)
            if self.me is not None and name == self.me:
                if node.attr in self.local:
                    return self._index(self.local[node.attr], node)
                if node.attr in self.constants and isinstance(node.ctx, ast.Load):
                    return ast.copy_location(ast.Constant(self.constants[node.attr]), node)
        return node

    def _index(self, i: int, node: ast.Attribute) -> ast.AST:
        base = ast.Name(id=self.s, ctx=ast.Load())
        base._ours = True  # an access we made by name: its footprint is known
        sub = ast.Subscript(value=base, slice=ast.Constant(i), ctx=node.ctx)
        return ast.copy_location(sub, node)

    def _check_target(self, target: ast.AST) -> None:
        for n in ast.walk(target):
            if isinstance(n, ast.Name) and n.id in (self.s, self.me) and isinstance(n.ctx, ast.Store):
                self.unsafe = True

    def visit_Assign(self, node):
        for t in node.targets:
            self._check_target(t)
        return self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._check_target(node.target)
        t = node.target
        if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == self.s
                and t.attr in self.shared):
            self.reads.add(self.shared[t.attr])  # x += 1 reads x too
        return self.generic_visit(node)

    def visit_NamedExpr(self, node):
        self._check_target(node.target)
        return self.generic_visit(node)

    def visit_For(self, node):
        self._check_target(node.target)
        return self.generic_visit(node)

    def visit_Lambda(self, node):
        self.unsafe = True  # a nested lambda could capture s/me; keep it simple
        return node

    def visit_FunctionDef(self, node):
        self.unsafe = True
        return node

    visit_AsyncFunctionDef = visit_FunctionDef


def specialize(fn: Callable, shared: Mapping[str, int], local: Mapping[str, int],
               constants: Mapping[str, Any]) -> tuple[Callable, bool] | None:
    """Rewrite ``fn(s, me, ...)`` to index the flat state directly.

    Returns ``(new_fn, needs_me)`` -- ``needs_me`` is False when the rewritten
    body no longer mentions ``me`` at all, so the caller may pass None for it
    -- or None when ``fn`` cannot be rewritten safely.
    """
    code = getattr(fn, "__code__", None)
    if code is None or code.co_flags & 0x20 or code.co_flags & 0x80:  # generators / coroutines
        return None
    if code.co_argcount < 1 or code.co_kwonlyargcount or code.co_flags & 0x0C:  # *args / **kwargs
        return None
    node = function_node(fn)
    if node is None:
        return None
    node = copy.deepcopy(node)  # the parsed tree is cached and shared: never rewrite it in place
    if not _same_code(fn, copy.deepcopy(node)):
        return None  # the source on disk is not what was compiled (edited since?)
    args = [a.arg for a in node.args.args]
    s_name = args[0]
    me_name = args[1] if len(args) > 1 else None
    rw = _Rewrite(s_name, me_name, shared, local, constants)
    if isinstance(node, ast.Lambda):
        body_expr = rw.visit(node.body)
        if rw.unsafe:
            return None
        body: list[ast.stmt] = [ast.Return(value=body_expr)]
    else:
        if node.decorator_list:
            return None
        body = [rw.visit(stmt) for stmt in node.body]
        if rw.unsafe:
            return None
    needs_me = me_name is not None and any(
        isinstance(n, ast.Name) and n.id == me_name for stmt in body for n in ast.walk(stmt))
    freevars = code.co_freevars
    closure = fn.__closure__ or ()
    try:
        cells = {name: cell.cell_contents for name, cell in zip(freevars, closure)}
    except ValueError:  # an empty cell: defined after the function was used
        return None
    factory = _factory(fn, node, body)
    if factory is None:
        return None
    new = factory(*(cells[n] for n in freevars))
    new.__defaults__ = fn.__defaults__
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__wrapped__ = fn
    bare = any(isinstance(n, ast.Name) and n.id == s_name and not getattr(n, "_ours", False)
               for stmt in body for n in ast.walk(stmt))
    # What the function reads and writes of the shared state, by field index; None if it
    # hands `s` to other code (then anything may be touched).
    new.__footprint__ = None if bare else (frozenset(rw.reads), frozenset(rw.writes))
    return new, needs_me


def _factory(fn: Callable, node: ast.AST, body: list[ast.stmt]) -> Callable | None:
    """Compile ``body`` as ``fn``'s twin inside a factory whose parameters are ``fn``'s free variables.

    Calling the factory with the closure's values gives the new function, with
    ``fn``'s globals; None if the body does not compile.
    """
    code = fn.__code__
    args = [a.arg for a in node.args.args]
    freevars = code.co_freevars
    fdef = _funcdef(fn.__name__ if fn.__name__.isidentifier() else "step", args, body)
    factory = _funcdef("__factory__", list(freevars),
                       [fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))])
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    try:
        compiled = compile(module, f"<specialized {code.co_filename}:{code.co_firstlineno}>", "exec")
    except (SyntaxError, ValueError):
        return None
    namespace: dict[str, Any] = {}
    exec(compiled, fn.__globals__, namespace)
    return namespace["__factory__"]


def _same_code(fn: Callable, node: ast.AST) -> bool:
    """Whether ``node``, compiled the way we compile rewrites, gives ``fn``'s own bytecode."""
    if isinstance(node, ast.Lambda):
        body: list[ast.stmt] = [ast.Return(value=node.body)]
    else:
        body = node.body
    factory = _factory(fn, node, body)
    if factory is None:
        return False
    twin = factory(*([None] * len(fn.__code__.co_freevars)))
    a, b = fn.__code__, twin.__code__
    return (a.co_code == b.co_code and a.co_names == b.co_names and a.co_varnames == b.co_varnames
            and a.co_freevars == b.co_freevars)


def _funcdef(name: str, args: list[str], body: list[ast.stmt]) -> ast.FunctionDef:
    node = ast.FunctionDef(
        name=name,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in args], vararg=None, kwonlyargs=[],
                           kw_defaults=[], kwarg=None, defaults=[]),
        body=body, decorator_list=[], returns=None)
    if "type_params" in ast.FunctionDef._fields:  # Python 3.12+
        node.type_params = []
    return node


def bare_uses(fn: Callable, position: int = 0) -> bool:
    """Whether a specialized ``fn`` still uses its parameter ``position`` other than by subscript."""
    code = fn.__code__
    name = code.co_varnames[position]
    node = function_node(getattr(fn, "__wrapped__", fn))
    if node is None:
        return True
    import dis

    ins = list(dis.get_instructions(code))
    for k, i in enumerate(ins):
        if i.opname.startswith("LOAD_FAST") and i.argval == name:
            nxt = ins[k + 1] if k + 1 < len(ins) else None
            if nxt is None or nxt.opname != "LOAD_CONST":
                return True
            after = ins[k + 2] if k + 2 < len(ins) else None
            if after is None or after.opname not in ("BINARY_SUBSCR", "STORE_SUBSCR"):
                return True
    return False

