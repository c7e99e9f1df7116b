"""Specializing user step functions for speed, without changing what they mean.

Model authors write ``s.count += 1`` and ``me.left -= 1``: readable, and
exactly what appears in docs. Executed through views, each of those is a
Python-level property call. This module rewrites such a function, once per
thread at compile time, so that ``s.count`` becomes ``s[3]`` and
``me.left`` becomes ``s[17]`` (a thread's locals live in the same flat state
list as the shared variables), ``me.name`` and ``me.index`` become
constants. The rewritten function receives the same mutable state list (a
view subclass of ``list``, so helpers called with ``s`` still work by name).

What it guarantees
------------------
*Same meaning, or no rewrite.* The rewrite is purely syntactic, so it is
sound only where every ``s`` and ``me`` in the body is the parameter.
:func:`unsafe_reason` proves that over the whole body, nested scopes
included (a comprehension's ``for s in ...``, ``except ... as s``, ``with
... as s``, a ``match`` capture, a nested ``def`` or ``lambda``...), and
anything it cannot prove makes :func:`specialize` return None: the caller
then keeps the original function and runs it through views. The same
analysis gives the footprint (the shared fields read and written), which
partial-order reduction and the live runtime's wakeups rely on; a function
that hands ``s`` to other code has an unknown footprint.

*Checked against the plain path.* :data:`ENABLED` switches the rewriter
off (``SAFEPREFETCH_SPECIALIZE=0``); CI runs the catalog tests that way once.
``tests/test_specialize.py`` compares both paths on every catalog model and
on hundreds of generated step functions (same states, same successors, same
traces, same errors), and runs steps through recording views to check that
every field a step touches is in its static footprint.

*Errors point at the user's code.* The rewritten function is compiled under
the user's file name with the user's line numbers, so a step that raises
shows the user's ``file:line`` and source line.

What is preserved: the function's globals, its default arguments, and its
closure variables (read once, after ``build`` has finished -- a model must
not rebind a captured variable after building, which no model has a reason
to do).
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
from typing import Any, Callable, Mapping

__all__ = ["ENABLED", "clone", "function_node", "specialize", "unsafe_reason", "uses_arg"]

#: Whether the compiler specializes step functions at all. Set SAFEPREFETCH_SPECIALIZE=0 to run
#: every user function through views only (slower, same meaning); read at each compile.
ENABLED = os.environ.get("SAFEPREFETCH_SPECIALIZE", "1") != "0"

_cache: dict[str, tuple[str, Any]] = {}  # file name -> (its text, its _ParsedFile)


def uses_arg(fn: Callable, position: int) -> bool:
    """Whether ``fn``'s positional parameter ``position`` is ever read in its body."""
    code = getattr(fn, "__code__", None)
    if inspect.ismethod(fn):
        position += 1  # a bound method's code has ``self`` first
    if code is None or position >= code.co_argcount:
        return True
    if _DYNAMIC & set(code.co_names):
        return True  # ``locals()``, ``eval("me.x")``: the parameter may be read by string
    name = code.co_varnames[position]
    return name in code.co_varnames[: code.co_argcount] and (
        name in _loaded_names(code) or name in code.co_cellvars)


def _loaded_names(code) -> set[str]:
    """The local names ``code`` reads. From 3.13 two loads can be one instruction (``LOAD_FAST_LOAD_FAST``,
    and ``STORE_FAST_LOAD_FAST``, whose second name is the one read): their argument is a pair of names.
    Read as one name, a pair hid a parameter read only there (``balances[me.src]`` right after
    ``balances = ...``), and the step ran with ``me`` None."""
    import dis

    names: set[str] = set()
    for ins in dis.get_instructions(code):
        op = ins.opname
        if "LOAD_FAST" not in op:
            continue
        if isinstance(ins.argval, tuple):
            names.update(ins.argval[1:] if op.startswith("STORE_") else ins.argval)
        else:
            names.add(ins.argval)
    return names


def clone(node: Any) -> Any:
    """A deep copy of an AST node (or a list of them): ``copy.deepcopy`` without its memo, several times faster."""
    if isinstance(node, list):
        return [clone(x) for x in node]
    if not isinstance(node, ast.AST):
        return node  # identifiers, constants: immutable
    # Fields as keywords: a node built without its required fields is deprecated from 3.13 (an error in 3.15).
    new = node.__class__(**{name: clone(value) for name, value in ast.iter_fields(node)})
    for name in node._attributes:
        if hasattr(node, name):
            setattr(new, name, getattr(node, name))
    return new


class _ParsedFile:
    """A source file's tree, with its lambdas by line and its ``def``s by name, in ``ast.walk`` order.

    One walk per file, not one per function looked up: generating a Prefetcher's transitions looks up
    every step function of every worker thread (hundreds with many workers), and walking the whole
    model file for each was a quarter of a first construction's time at 32 workers.
    """

    __slots__ = ("lambdas", "defs")

    def __init__(self, tree: ast.Module):
        self.lambdas: dict[int, list[ast.Lambda]] = {}
        self.defs: dict[str, list[ast.FunctionDef]] = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.Lambda):
                self.lambdas.setdefault(n.lineno, []).append(n)
            elif isinstance(n, ast.FunctionDef):
                self.defs.setdefault(n.name, []).append(n)


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
    # By the whole text: an edit that keeps the line count and the first line (then importlib.reload) must
    # not be answered from the old file's tree.
    text = "".join(lines)
    cached = _cache.get(filename)
    if cached is not None and cached[0] == text:
        parsed = cached[1]
    else:
        try:
            parsed = _ParsedFile(ast.parse(text))
        except SyntaxError:
            return None
        _cache[filename] = (text, parsed)
    first = code.co_firstlineno
    if fn.__name__ == "<lambda>":
        candidates = list(parsed.lambdas.get(first, ()))
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
    candidates = [n for n in parsed.defs.get(fn.__name__, ())
                  if n.lineno == first or (n.decorator_list and n.decorator_list[0].lineno == first)]
    return candidates[0] if len(candidates) == 1 else None


def _contains(node: ast.AST, line: int, col: int) -> bool:
    start = (node.lineno, node.col_offset)
    end = (node.end_lineno, node.end_col_offset)
    return start <= (line, col) <= end


#: Names whose call can reach a function's local variables without naming them (``locals()["s"]``,
#: ``eval("s.x")``): a function that uses any of them is not rewritten.
_DYNAMIC = frozenset({"eval", "exec", "locals", "vars", "globals", "compile", "breakpoint", "__import__"})


def unsafe_reason(node: ast.AST, params: tuple[str, ...]) -> str | None:
    """Why rewriting the function ``node`` (whose parameters are ``params``) could change its meaning, or None.

    The rewriter maps ``s.x`` to ``s[i]`` wherever the *name* ``s`` appears, so
    it is sound only if every ``s`` in the body is the parameter. That is
    proved here, conservatively, over the whole body, nested scopes included:

    * no binding of a parameter name anywhere -- an assignment, augmented or
      annotated assignment, ``for``, ``with ... as``, ``except ... as``, a
      walrus, a comprehension's target, a ``match`` capture (``case s:``,
      ``*s``, ``**s``), an import ``as s``, a ``global``/``nonlocal``, ``del``;
    * no nested function, lambda or class (their scopes could capture or
      shadow a parameter; rewriting through them is not worth the proof);
    * no ``match`` pattern that names a parameter at all (a value pattern
      ``case s.x:`` must stay a dotted name);
    * no ``del s.x`` (deleting an item would shift every index after it);
    * none of :data:`_DYNAMIC` (they reach locals by string).

    Anything else it cannot prove falls back to the plain path, which runs the
    original function through views: slower, never different.
    """
    names = set(params)
    for n in ast.walk(node if isinstance(node, ast.Lambda) else ast.Module(body=node.body, type_ignores=[])):
        if n is node:
            continue
        if isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return "a nested function, lambda or class"
        if isinstance(n, ast.Name):
            if n.id in names and not isinstance(n.ctx, ast.Load):
                return f"the parameter {n.id!r} is rebound or deleted"
            if n.id in _DYNAMIC:
                return f"it calls {n.id}()"
        elif isinstance(n, ast.ExceptHandler) and n.name in names:
            return f"'except ... as {n.name}' rebinds a parameter"
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name in names:
            return f"a match pattern captures {n.name!r}"
        elif isinstance(n, ast.MatchMapping) and n.rest in names:
            return f"a match pattern captures {n.rest!r}"
        elif isinstance(n, ast.match_case):
            if any(isinstance(x, ast.Name) and x.id in names for x in ast.walk(n.pattern)):
                return "a match pattern names a parameter"
        elif isinstance(n, ast.alias) and (n.asname or n.name.split(".")[0]) in names:
            return f"an import binds {n.asname or n.name!r}"
        elif isinstance(n, (ast.Global, ast.Nonlocal)) and names & set(n.names):
            return "a global or nonlocal declaration names a parameter"
        elif (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Del) and isinstance(n.value, ast.Name)
              and n.value.id in names):
            return "it deletes an attribute of a parameter"
    return None


class _Rewrite(ast.NodeTransformer):
    """``s.x`` -> ``s[i]`` and ``me.y`` -> ``s[j]`` (or a constant), recording the shared fields read and written.

    Only run on a function :func:`unsafe_reason` found nothing against: every
    ``s`` and ``me`` in it is then the parameter.
    """

    def __init__(self, s: str, me: str | None, shared: Mapping[str, int], local: Mapping[str, int],
                 constants: Mapping[str, Any]):
        self.s, self.me = s, me
        self.shared, self.local, self.constants = shared, local, constants
        self.reads: set[int] = set()
        self.writes: set[int] = set()
        self.writes_local = False  # a ``me.y`` stored or deleted: not in the shared footprint, still a write

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
                    if not isinstance(node.ctx, ast.Load):
                        self.writes_local = True
                    return self._index(self.local[node.attr], node)
                if node.attr in self.constants and isinstance(node.ctx, ast.Load):
                    return ast.copy_location(ast.Constant(self.constants[node.attr]), node)
        return node

    def _index(self, i: int, node: ast.Attribute) -> ast.AST:
        base = ast.Name(id=self.s, ctx=ast.Load())
        base._ours = True  # an access we made by name: its footprint is known
        sub = ast.Subscript(value=base, slice=ast.Constant(i), ctx=node.ctx)
        return ast.copy_location(sub, node)

    def visit_AugAssign(self, node):
        t = node.target
        if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == self.s
                and t.attr in self.shared):
            self.reads.add(self.shared[t.attr])  # x += 1 reads x too
        return self.generic_visit(node)


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
    if inspect.ismethod(fn):
        return None  # a bound method: its code's first parameter is ``self``, not the state
    if code.co_argcount < 1 or code.co_kwonlyargcount or code.co_flags & 0x0C:  # *args / **kwargs
        return None
    node = function_node(fn)
    if node is None:
        return None
    node = clone(node)  # the parsed tree is cached and shared: never rewrite it in place
    if not _same_code(fn, clone(node)):
        return None  # the source on disk is not what was compiled (edited since?)
    args = [a.arg for a in node.args.args]
    s_name = args[0]
    me_name = args[1] if len(args) > 1 else None
    if unsafe_reason(node, (s_name,) if me_name is None else (s_name, me_name)) is not None:
        return None
    if not isinstance(node, ast.Lambda) and node.decorator_list:
        return None
    rw = _Rewrite(s_name, me_name, shared, local, constants)
    if isinstance(node, ast.Lambda):
        body: list[ast.stmt] = [ast.Return(value=rw.visit(node.body))]
    else:
        body = [rw.visit(stmt) for stmt in node.body]
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
    # Whether it may write any field, a thread's local included: only a function that writes none may be
    # called on the state tuple itself (a guard or an invariant that counts its calls may not).
    new.__writes__ = bare or bool(rw.writes) or rw.writes_local
    return new, needs_me


def _factory(fn: Callable, node: ast.AST, body: list[ast.stmt]) -> Callable | None:
    """Compile ``body`` as ``fn``'s twin inside a factory whose parameters are ``fn``'s free variables.

    Calling the factory with the closure's values gives the new function, with
    ``fn``'s globals; None if the body does not compile. The twin is compiled
    under ``fn``'s own file name, and every rewritten node keeps the line of
    the source it came from, so a traceback through it names the user's file
    and line, and shows the user's source line.
    """
    code = fn.__code__
    args = [a.arg for a in node.args.args]
    freevars = code.co_freevars
    name = fn.__name__ if fn.__name__.isidentifier() else "step"
    while name in freevars or name in args:
        # The twin's own name is a local of the factory: a free variable of that name (a lambda closing
        # over ``step``) would see the twin instead of its captured value.
        name = f"_{name}_"
    fdef = _funcdef(name, args, body)
    factory = _funcdef("__factory__", list(freevars),
                       [fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))])
    for made in (fdef, factory, factory.body[-1]):
        ast.copy_location(made, node)
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    try:
        compiled = compile(module, code.co_filename, "exec")
    except (SyntaxError, ValueError):
        return None
    namespace: dict[str, Any] = {}
    exec(compiled, fn.__globals__, namespace)
    return namespace["__factory__"]


def _same_code(fn: Callable, node: ast.AST) -> bool:
    """Whether ``node``, compiled the way we compile rewrites, gives ``fn``'s own code.

    The comparison is of instructions by name and argument, not of raw bytes:
    the twin is compiled in a module of its own, where a call of an imported
    module's function (``contextlib.nullcontext(x)``) takes the method-call
    form, while the original module, which holds the ``import``, compiled an
    attribute load. Those two forms (and the jump offsets their cache entries
    shift) are the same code.
    """
    if isinstance(node, ast.Lambda):
        body: list[ast.stmt] = [ast.Return(value=node.body)]
    else:
        body = node.body
    factory = _factory(fn, node, body)
    if factory is None:
        return False
    twin = factory(*([None] * len(fn.__code__.co_freevars)))
    a, b = fn.__code__, twin.__code__
    return (a.co_names == b.co_names and a.co_varnames == b.co_varnames and a.co_freevars == b.co_freevars
            and _instructions(a) == _instructions(b))


def _instructions(code) -> list[tuple[str, Any]]:
    """``code``'s instructions as ``(name, argument)``, method-call forms folded, jumps by instruction index.

    The NULL pushed for a call is dropped in both forms: from 3.12 the method form is a LOAD_ATTR
    that pushes it itself, and the attribute form a LOAD_ATTR and a PUSH_NULL (after it on 3.13).
    """
    import dis

    ins = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "PUSH_NULL")]
    where = {i.offset: k for k, i in enumerate(ins)}
    out = []
    for i in ins:
        name = "LOAD_ATTR" if i.opname == "LOAD_METHOD" else i.opname
        arg = where.get(i.argval, i.argval) if i.opcode in dis.hasjrel or i.opcode in dis.hasjabs else i.argval
        if isinstance(arg, type(code)):
            arg = _instructions(arg)
        elif name in ("LOAD_CONST", "RETURN_CONST"):
            # By type and repr, not ==: 10**20 == 1e20, 1 == True == 1.0 and 0.0 == -0.0, and a source edited
            # from one to the other must not pass for the code that was compiled.
            arg = (type(arg), repr(arg))
        out.append((name, arg))
    return out


def _funcdef(name: str, args: list[str], body: list[ast.stmt]) -> ast.FunctionDef:
    node = ast.FunctionDef(
        name=name,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in args], vararg=None, kwonlyargs=[],
                           kw_defaults=[], kwarg=None, defaults=[]),
        body=body, decorator_list=[], returns=None)
    if "type_params" in ast.FunctionDef._fields:  # Python 3.12+
        node.type_params = []
    return node
