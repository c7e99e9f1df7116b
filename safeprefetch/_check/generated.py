"""The explorer's expansion written out as code for one machine, and optionally compiled to C.

What it guarantees
------------------
*The same search, faster.* :func:`expansion` writes, for one compiled
machine, a module over the machine's generated transitions
(:mod:`.._dsl.codegen`, the same ones the live runtime runs):
``X__fill(state, buf)`` appends every successor of ``state`` in the
canonical order (thread by thread, branch by branch:
``Machine.successors``'s order); ``X__expand_state`` stores each successor
in ``parents`` unless known and queues it in ``nxt`` if new, dispatching on
each thread's program counter with no step-table lookup and no generic step
path; and ``X__chunk(level, start, stop, parents, nxt, max_states)`` runs
it over ``level[start:stop]``: the plain BFS's inner loop, written out. (The
``X__`` and ``G__`` names are of a shape the code generator never gives to
a model's value, so a model helper called ``fill`` or ``len`` stays the
model's.) The explorer
(:mod:`.explorer`) hands every state the generated loop does not finish to
its own plain code, so what the search concludes is decided in one place.

*It stops before anything that is not routine.* ``X__chunk`` returns the
position of the first state it did not expand, and touches nothing of that
state, when the state has no successor (a terminal state: the verdict's
business), when a successor is not a state (a step violation, or a
:class:`~.._dsl.codegen.Broken` successor that fails a folded invariant),
when the state's successors might pass the state cap, or when its expansion
raised. Those go through the plain expander, which reports them exactly as
a plain search would -- with the same trace, message and ``file:line``.

*Why trust it.* The module is generated from the checked transitions, which
translation validation proves equal to ``Machine.successors``
(``tests/test_codegen.py``); ``tests/test_generated_explorer.py`` checks
the written-out expansion against ``Machine.successors`` on every reachable
state of every catalog model, and every search against the plain one
(states, transitions, verdict, trace, depth): the catalog, a slice of the
prefetcher's sweep, runs, autotune and 200 Hypothesis-generated models on
the Python flavour, six configurations and the adversarial review's models
(``tests/test_generated_explorer_attacks.py``) on the compiled one. One
assumption is the model's, not
ours: the generator builds the model again from its configuration, so a
build that reads anything else (a module global changed after ``compile``)
would give it other functions than the machine's. The explorer does not
trust that: it checks the expansion's successors against the machine's on
every state of the first 256 it hands the expansion (counted from when the
expansion took over, which under ``auto`` is at 50,000 states) and on one in
every 1024 after (:func:`agrees`), and on a disagreement throws the search
away and runs it again plain, saying why. That is a check, not a proof: a
build that differs only in states the sample misses goes unnoticed.

Flavours
--------
``generated``: the module as Python, always available. ``compiled``: the
same module compiled by Cython to a C extension (``pip install
safeprefetch[speed]``, and a C compiler), the way SPIN compiles ``pan.c``:
the transitions become C functions over a typed state tuple, the model's
small helper functions (``_set``, ``next_slot``) are compiled with them
(:func:`_helpers`), and the BFS loop calls them directly. A build takes a
few seconds and is cached by the source's hash and a description of every
value it binds by name (``SAFEPREFETCH_CACHE``, default
``~/.cache/safeprefetch``), so a configuration is built once. Each search
binds those names in a loaded instance that it alone holds, and gives it
back when it is over (:mod:`.extension`): two searches at once, in
threads, never compute with each other's values, even where the
description cannot tell the values apart.
Cython compiles Python's semantics, with two exceptions found so far: ``x
in (a, b)`` over a literal container is compiled to ``x == a or x == b``,
with no identity test, so a NaN sentinel is not found in it; and a chained
comparison with an ``in`` (``x in t == True``) crashed the process. The
module therefore hands those operands to the comparison through a call that
Cython cannot see into (:func:`_hide_literal_containers`). The differential tests
check that the compiled module computes what the Python one does, rather
than assume it.

When it applies
---------------
Only where the plain search is the same loop: breadth first over the full
store, with no reduction or with symmetry (each successor canonicalised
through the reduction's own function); a model built by ``Model.compile``
(the generator builds it again); every invariant folded into the
transitions (or none declared); no spurious wakeups (their "stuck" rule
needs the plain expander). Steps the generator refuses (the primitives) are
called through the machine's own ``fire``, with the invariants checked on
their successors. Anything else runs the plain search, and
:func:`why_not` says why.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import os
import re
import textwrap
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from .._dsl.codegen import Broken, CompiledMachine, compile_transitions
from .._dsl.machine import Machine
from .._dsl.model import ModelError
from .extension import Build, CompileUnavailable, build as build_extension, cython_available
from .extension import release as release_extension, start as start_extension

__all__ = ["ENGINES", "CompileUnavailable", "Expansion", "agrees", "cython_available", "default_engine", "expansion",
           "start_build", "why_not"]

#: ``auto``: the generated expansion where it applies, else plain; ``plain``: the machine's step
#: functions; ``generated``: the expansion as Python; ``compiled``: the expansion compiled by Cython.
ENGINES = ("auto", "plain", "generated", "compiled")


def default_engine() -> str:
    """``SAFEPREFETCH_ENGINE`` (one of :data:`ENGINES`), read at each search; ``auto`` if unset."""
    value = os.environ.get("SAFEPREFETCH_ENGINE", "auto").strip().lower() or "auto"
    if value not in ENGINES:
        raise ModelError(f"SAFEPREFETCH_ENGINE must be one of {', '.join(ENGINES)}, not {value!r}")
    return value


@dataclass(frozen=True)
class Expansion:
    """One machine's written-out expansion: the functions a search calls, and how it was made."""

    #: ``generated`` (Python) or ``compiled`` (a Cython extension).
    engine: str
    #: ``fill(state, buf)``: append every successor of ``state`` to the list ``buf``, in canonical order.
    fill: Callable[[tuple, list], Any]
    #: ``chunk(level, start, stop, parents, nxt, max_states) -> (position, transitions)``; see the module doc.
    chunk: Callable[..., tuple[int, int]]
    #: The module's source (Python, or Cython for ``compiled``).
    source: str
    #: Seconds spent writing the module, and compiling it (0 when the build came from the cache).
    seconds: float
    build_seconds: float = 0.0
    #: The extension's path (``compiled``), else None.
    path: str | None = None
    #: The loaded instance this expansion holds (``compiled``), until :meth:`release` gives it back.
    held: list = field(default_factory=list, compare=False, repr=False)

    def release(self) -> None:
        """The search is over: give the compiled instance back, for a later search to bind and use.
        Idempotent, and shared with copies made by ``dataclasses.replace``."""
        try:
            module = self.held.pop()
        except IndexError:
            return
        release_extension(module)


def agrees(machine: Machine, fill: Callable[[tuple, list], Any], state: tuple) -> bool:
    """Whether ``fill`` gives ``state`` exactly ``Machine.successors``'s successors, in order.

    A :class:`~.._dsl.codegen.Broken` successor must be the machine's successor and break an invariant;
    None (a refused step's successor that breaks one) likewise; a violation must be the same kind and
    message. The explorer asks this of one state in every chunk it hands the expansion: the generator
    builds the model again, and a build that reads anything but its configuration would give other
    functions than the machine's -- the check catches that instead of trusting it.
    """
    want = [n for _c, n in machine.successors(state)]
    got: list = []
    try:
        fill(state, got)
    except (Exception, SystemExit):  # noqa: BLE001 - the plain expander raises it too, and reports it properly
        return True
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if w.__class__ is tuple:
            if g.__class__ is tuple:
                if g != w:
                    return False
            elif g is None or isinstance(g, Broken):
                if (g is not None and g.state != w) or not machine.invariant_violation(w):
                    return False
            else:
                return False
        elif type(g) is not type(w) or (getattr(g, "kind", None), getattr(g, "message", None)) != (
                getattr(w, "kind", None), getattr(w, "message", None)):
            return False
    return True


def why_not(machine: Machine, reduce: str, compiled: CompiledMachine | None = None) -> str | None:
    """Why the generated expansion cannot run this search (None when it can)."""
    if reduce not in ("none", "symmetry", "all"):
        return f"reduce={reduce!r}"
    if machine.model is None:
        return "the machine was not compiled from a Model class (the generator builds the model again)"
    if any(machine.spurious_pcs):
        return "spurious wakeups (their stuck rule needs the plain expander)"
    if compiled is not None and machine.invariants and not compiled.invariants_folded:
        return "an invariant the generator could not fold into the transitions"
    return None


def expansion(machine: Machine, engine: str = "generated", canon: Callable[[tuple], tuple] | None = None,
              compiled: CompiledMachine | None = None, build: bool = True) -> Expansion | None:
    """Write (and for ``engine="compiled"``, build) the expansion of ``machine``.

    ``canon`` (symmetry's canonical representative) is applied to every
    successor state before it is stored. Raises :class:`CompileUnavailable`
    for ``compiled`` without Cython or a C compiler, and ModelError when the
    expansion does not apply (:func:`why_not`). With ``build=False``, a
    ``compiled`` expansion comes only from this process or the cache: None
    when it would have to be built.
    """
    if engine not in ("generated", "compiled"):
        raise ModelError(f"unknown expansion engine {engine!r} (known: generated, compiled)")
    t0 = time.perf_counter()
    cm = compiled if compiled is not None else compile_transitions(machine, machine.model)
    reason = why_not(machine, "none", cm)
    if reason is not None:
        raise ModelError(f"the generated expansion does not apply: {reason}")
    w = _Writer(machine, cm, canon, typed=engine == "compiled")
    source = w.module()
    if engine == "generated":
        ns = dict(w.namespace)
        filename = f"<safeprefetch explore {machine.name}>"
        exec(compile(source, filename, "exec"), ns)  # noqa: S102 - our own generated code
        return Expansion("generated", ns["X__fill"], ns["X__chunk"], source, time.perf_counter() - t0)
    got = build_extension(source, w.digest_extra(), build)
    if got is None:
        return None
    module, path, built = got  # an instance this expansion alone holds: its bindings stay its own
    for name, value in w.namespace.items():
        setattr(module, name, value)
    return Expansion("compiled", module.X__fill, module.X__chunk, source, time.perf_counter() - t0 - built, built, path,
                     [module])


def start_build(machine: Machine, canon: Callable[[tuple], tuple] | None = None,
                compiled: CompiledMachine | None = None) -> Build | None:
    """Start building ``machine``'s compiled expansion in a child process and return at once (see
    :func:`.extension.start`): None when it is already built; the running build if this process is
    building it already. Once the build is done,
    ``expansion(machine, "compiled", canon=canon, build=False)`` loads it."""
    cm = compiled if compiled is not None else compile_transitions(machine, machine.model)
    reason = why_not(machine, "none", cm)
    if reason is not None:
        raise ModelError(f"the generated expansion does not apply: {reason}")
    w = _Writer(machine, cm, canon, typed=True)
    return start_extension(w.module(), w.digest_extra())


class _Writer:
    """Writes the expansion module of one machine from its generated transitions."""

    def __init__(self, machine: Machine, cm: CompiledMachine, canon: Callable | None, typed: bool):
        self.m, self.cm, self.canon, self.typed = machine, cm, canon, typed
        #: What the module's free names are bound to (set as globals after it is loaded).
        self.namespace: dict[str, Any] = {}
        first = next((g for table in cm.steps for g in table.values()), None)
        self.generated_ns: dict[str, Any] = first.ones[0].__globals__ if first is not None else {}

    def bind(self, name: str, value: Any) -> str:
        self.namespace[name] = value
        return name

    def module(self, python_callable: bool = False) -> str:
        """Helpers, transitions, search loops (``python_callable``: plain ``def`` transitions and firsts, no loops)."""
        tree = ast.parse(self.cm.source)
        transitions = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("t")]
        defined = {n.name for n in transitions}
        used = {n.id for fn in transitions for n in ast.walk(fn) if isinstance(n, ast.Name)} - defined
        # A helper named like a builtin is not copied in: it would shadow the builtin for this module's
        # own loops too. It stays the model's Python function, bound under a reserved name below.
        copyable = {n for n in used if not hasattr(builtins, n)}
        helpers, bound = _helpers(self.generated_ns, copyable) if self.typed else ({}, {})
        for name, value in bound.items():
            self.bind(name, value)
        if self.typed and _hide_literal_containers(transitions, helpers):
            self.bind("X__opaque", _opaque)
        for name in list(helpers):  # called only directly, with its arity: a C function, called as one
            if _only_called(name, transitions, helpers[name]):
                helpers[name] = _as_cdef(helpers[name])
        shadowing: dict[str, str] = {}
        for name in sorted(used - set(helpers)):
            if name not in self.generated_ns:
                continue
            value = self.generated_ns[name]
            builtin = getattr(builtins, name, _ABSENT)
            if builtin is value:
                continue  # the builtin itself stays a builtin, which Cython calls directly (len, all, tuple)
            if builtin is not _ABSENT:
                # The model's module shadows a builtin: bound under a name of the reserved shape, so this
                # module's own loops (len, type, tuple, Exception) still mean the builtins.
                shadowing[name] = self.bind(f"G__{name}", value)
            else:
                self.bind(name, value)
        for fn in transitions:
            for node in ast.walk(fn):
                if isinstance(node, ast.Name) and node.id in shadowing:
                    node.id = shadowing[node.id]
        parts = [ast.unparse(fn) for fn in transitions]
        parts += [ast.unparse(n) for n in tree.body if python_callable and isinstance(n, ast.FunctionDef) and n.name[0] == "f"]
        if self.typed and not python_callable:
            # The generator's own reads of the state (``state[K]``, K a constant below the state's length,
            # which X__fill and X__expand_state check once per state) need no bounds check; the model's
            # code keeps Python's indexing (see the header).
            parts = [_GET_ITEM.sub(r"(<object>PyTuple_GET_ITEM(state, \1))",
                                   p.replace(f"def {fn.name}(state):", f"cdef object {fn.name}(tuple state):", 1))
                     for p, fn in zip(parts, transitions)]
        loops = [] if python_callable else [self._fill(), self._expand_state(), self._chunk()]  # bind: after
        head = []
        if self.typed:
            # No boundscheck/wraparound shortcuts: the model's own code may index with -1 or out of range, and
            # must then do what Python does (wrap, or raise IndexError for the plain expander to report).
            head.append("# cython: language_level=3, binding=False, annotation_typing=False")
            head += [] if python_callable else ["from cpython.tuple cimport PyTuple_GET_ITEM"]
            head += [f"{name} = None" for name in sorted(self.namespace)]
        return "\n\n".join(["\n".join(head)] + [h for _n, h in sorted(helpers.items())] + parts + loops) + "\n"

    def _dispatch(self, emit: list[str], indent: str) -> list[str]:
        """Every successor of ``state``, in canonical order, each bound to ``n`` and followed by ``emit``."""
        m, cm = self.m, self.cm
        lines = []
        for t, table in enumerate(m.tables):
            lines.append(f"{indent}pc = state[{m.pc_index[t]}]" if not self.typed else
                         f"{indent}pc = <object>PyTuple_GET_ITEM(state, {m.pc_index[t]})")
            kw = "if"
            for k, pc in enumerate(sorted(table)):
                lines.append(f"{indent}{kw} pc == {pc!r}:")
                kw = "elif"
                g = cm.steps[t].get(pc)
                if g is None:  # refused: the machine's own fire, with the invariants checked on its successors
                    fire = self.bind(f"X__fire_{t}_{k}", table[pc])
                    lines += [f"{indent}    for b__, n in {fire}(state):",
                              f"{indent}        if X__invariant is not None and n.__class__ is tuple and X__invariant(n):",
                              f"{indent}            n = None  # not a state: the plain expander reports it"]
                    lines += [f"{indent}        {e}" for e in emit]
                    continue
                for one in g.ones:
                    lines += [f"{indent}    n = {one.__name__}(state)", f"{indent}    if n is not None:"]
                    lines += [f"{indent}        {e}" for e in emit]
        return lines

    def _length_check(self, indent: str) -> str:
        """The compiled module reads the state by unchecked constant indices: a state of another length
        never gets that far (an exception here sends the state to the plain expander)."""
        n = len(self.m.init)
        return f"{indent}if len(state) != {n}:\n{indent}    raise ValueError('a state of {n} fields was expected')"

    def _fill(self) -> str:
        """``fill(state, buf)``: the successors as a list (what the tests compare with ``Machine.successors``)."""
        self.bind("X__invariant", self.m.invariant_violation if self.m.invariants else None)
        self.bind("X__canon", self.canon)
        lines = ["def X__fill(state, buf):"]
        if self.typed:
            lines = ["def X__fill(tuple state, list buf):", "    cdef object n, pc", self._length_check("    ")]
        lines += self._dispatch(["buf.append(n)"], "    ")
        return "\n".join(lines)

    def _expand_state(self) -> str:
        """``X__expand_state(state, parents, nxt, max_states)``: store and queue every successor of ``state``;
        the number of successors, or -1 (with nothing of the state left behind) when the state is not routine."""
        canon = ["n = X__canon(n)"] if self.canon is not None else []
        is_tuple = "type(n) is tuple" if self.typed else "n.__class__ is tuple"
        emit = [f"if not ({is_tuple}):", "    return X__undo(parents, nxt, mark)", "trans += 1"] + canon + [
            "k = len(parents)", "parents.setdefault(n, state)", "if len(parents) != k:",
            "    if k >= max_states:", "        del parents[n]", "        return X__undo(parents, nxt, mark)",
            "    nxt.append(n)"]
        if self.typed:
            lines = ["cdef Py_ssize_t X__expand_state(tuple state, dict parents, list nxt, Py_ssize_t max_states):",
                     "    cdef Py_ssize_t trans = 0, k, mark = len(nxt)",
                     "    cdef object n, pc"]
        else:
            lines = ["def X__expand_state(state, parents, nxt, max_states):", "    trans, mark = 0, len(nxt)"]
        lines += ["    try:"] + ([self._length_check("        ")] if self.typed else []) + self._dispatch(emit, "        ") + [
            "    except (Exception, SystemExit):",  # sys.exit in a step: the plain expander reports it
            "        return X__undo(parents, nxt, mark)",
            "    return trans if trans else -1"]
        undo = ["", "", ("cdef Py_ssize_t X__undo(dict parents, list nxt, Py_ssize_t mark):" if self.typed
                         else "def X__undo(parents, nxt, mark):"),
                "    for n in nxt[mark:]:", "        del parents[n]", "    del nxt[mark:]", "    return -1"]
        return "\n".join(lines + undo)

    def _chunk(self) -> str:
        if self.typed:
            head = ("def X__chunk(list level, Py_ssize_t start, Py_ssize_t stop, dict parents, list nxt,\n"
                    "          Py_ssize_t max_states):\n"
                    "    cdef Py_ssize_t i = start, got, trans = 0\n")
        else:
            head = ("def X__chunk(level, start, stop, parents, nxt, max_states):\n"
                    "    i, trans = start, 0\n")
        return head + (
            "    while i < stop:\n"
            "        got = X__expand_state(level[i], parents, nxt, max_states)\n"
            "        if got < 0:\n"
            "            return i, trans\n"
            "        trans += got\n"
            "        i += 1\n"
            "    return i, trans\n")

    def digest_extra(self) -> str:
        """What the source does not show but the module's behaviour depends on: every value bound by name,
        described by what it is (a constant's repr, a function's code and closure), not by its address, so
        equal configurations share one build, in every process, and different ones seldom do (and may:
        each search binds its own instance, see :func:`_describe`)."""
        return "\n".join(f"{name}={_describe(value)}" for name, value in sorted(self.namespace.items()))


def _describe(value: Any, depth: int = 3) -> str:
    """What ``value`` is, for the cache key: equal descriptions for values that behave alike, across
    processes where possible; a value it cannot describe is described by its identity (so it never
    shares a module with another). An object with fields met past ``depth`` is described by its kind
    alone: by its identity, the machine's own step objects (a primitive step's site and layout) made the
    key of every model with a lock, a semaphore or a condition differ in every process, which built it
    again each time and left each build in the cache. Two configurations that then share a module are
    safe: every search binds the module's names in an instance of its own (``extension.py``)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return repr(value)
    if isinstance(value, (tuple, list)) and depth:
        return f"{type(value).__name__}({', '.join(_describe(v, depth - 1) for v in value)})"
    if isinstance(value, (set, frozenset)):  # sorted: a set's order (and its repr) differs between processes
        return f"{type(value).__name__}({', '.join(sorted(_describe(v, max(depth - 1, 0)) for v in value))})"
    if isinstance(value, dict) and depth:
        return "dict(" + ", ".join(f"{_describe(k, 0)}: {_describe(v, depth - 1)}" for k, v in value.items()) + ")"
    fn = getattr(value, "__func__", value)  # a bound method: its function (and its owner's type)
    code = getattr(fn, "__code__", None)
    if code is not None:
        cells = [_describe(c.cell_contents, depth - 1) if depth else _kind(c.cell_contents)
                 for c in (getattr(fn, "__closure__", None) or ()) if _has_contents(c)]
        consts = [repr(c) for c in code.co_consts if not hasattr(c, "co_code")]
        return f"fn:{code.co_qualname}:{code.co_code.hex()}:{consts}:{cells}"
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a repr that raises says nothing; the identity does
        return f"{kind}:id{id(value)}"
    if " at 0x" not in text:  # a sentinel or a value that prints what it is
        return f"{kind}:{text}"
    fields = getattr(value, "__dict__", None)
    if fields is None:
        slots = [n for k in type(value).__mro__ for n in getattr(k, "__slots__", ())]
        if slots:
            fields = {n: getattr(value, n, None) for n in slots}
    if fields is not None and depth:  # an object that prints its address: its fields say what it is
        return f"{kind}:{_describe(fields, depth - 1)}"
    if fields is not None:  # fields, but no depth left to say them: its kind, the same in every process
        return kind
    return f"{kind}:id{id(value)}"


def _kind(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _helpers(ns: dict[str, Any], names: set[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """Source for the model's helper functions the transitions call by name, for Cython to compile with them.

    A helper qualifies when it is a plain function whose source can be read and
    which defines no nested scope of its own; its free names (globals and
    closure cells) are bound by unique names, so the compiled copy sees the
    same objects. Others stay Python functions, called from the C code.
    """
    out: dict[str, str] = {}
    bound: dict[str, Any] = {}
    for name in sorted(names):
        fn = ns.get(name)
        if not isinstance(fn, types.FunctionType) or fn.__code__.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
            continue
        try:
            node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        except (OSError, TypeError, SyntaxError, IndexError):
            continue
        if not isinstance(node, ast.FunctionDef) or node.decorator_list or _has_scope(node):
            continue
        a = node.args
        if a.defaults or a.kw_defaults or a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
            continue  # a default is evaluated when the module loads, before its names are bound
        local = set(fn.__code__.co_varnames)
        cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
        free: dict[str, str] = {}
        values: dict[str, Any] = {}
        ok = True
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id not in local:
                if isinstance(n.ctx, ast.Load):
                    if n.id in cells:
                        value = cells[n.id]
                    elif n.id in fn.__globals__:
                        value = fn.__globals__[n.id]
                    elif hasattr(builtins, n.id):
                        continue
                    else:
                        ok = False
                        break
                    unique = free.setdefault(n.id, f"H__{name}__{n.id}")
                    values[unique] = value
                    n.id = unique
                else:
                    ok = False
                    break
        if not ok:
            continue
        node.name = name
        out[name] = ast.unparse(node)
        bound.update(values)
    return out, bound


def _opaque(value: Any) -> Any:
    return value


def _hide_literal_containers(transitions: list[ast.FunctionDef], helpers: dict[str, str]) -> bool:
    """Wrap every literal container an ``in`` or ``not in`` tests (``x in (a, b)``) in a call to ``X__opaque``,
    in the transitions and in the helpers' sources; whether any was found.

    Cython compiles ``x in (a, b)`` as ``x == a or x == b``, without the identity test Python's ``in``
    makes first: a NaN sentinel (``reading in (MISSING, None)``), or any value not equal to itself, was not
    found, and the compiled search said "ok" where the plain one found a deadlock. Through a call Cython
    cannot see into, the container is an object, and ``in`` is Python's. A chained comparison with an
    ``in`` in it (``x in t == True``) has every operand after the first so wrapped: Cython 3.3's code for
    it crashed the process (SIGSEGV). Each wrapped operand is still evaluated when, and only if, Python
    would evaluate it.
    """
    found = False
    containers = (ast.Tuple, ast.List, ast.Set, ast.Dict)

    def hide(tree: ast.AST) -> None:
        nonlocal found
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                chained = len(node.ops) > 1
                for i, (op, right) in enumerate(zip(node.ops, node.comparators)):
                    if chained or (isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, containers)):
                        node.comparators[i] = ast.Call(ast.Name("X__opaque", ast.Load()), [right], [])
                        found = True

    for fn in transitions:
        hide(fn)
    for name, source in helpers.items():
        tree = ast.parse(source)
        hide(tree)
        helpers[name] = ast.unparse(tree)
    return found


def _only_called(name: str, fns: list[ast.FunctionDef], source: str) -> bool:
    """Whether every mention of ``name`` in ``fns`` calls it with plain positional arguments, as many as it takes."""
    node = ast.parse(source).body[0]
    a = node.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
        return False
    arity = len(a.args)
    calls = {id(c.func) for fn in fns for c in ast.walk(fn)
             if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == name
             and len(c.args) == arity and not c.keywords and not any(isinstance(x, ast.Starred) for x in c.args)}
    mentions = [n for fn in fns for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == name]
    return all(id(n) in calls for n in mentions)


def _as_cdef(source: str) -> str:
    """``def f(a, b):`` as ``cdef object f(object a, object b):`` (the body unchanged)."""
    node = ast.parse(source).body[0]
    args = ", ".join(f"object {x.arg}" for x in node.args.args)
    _def, _, rest = ast.unparse(node).partition("\n")
    return f"cdef object {node.name}({args}):\n{rest}"


def _has_scope(node: ast.FunctionDef) -> bool:
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Global,
                              ast.Nonlocal, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp))
               for n in ast.walk(node) if n is not node)


_ABSENT = object()
#: The generated transitions' reads of the state: ``state[K]`` with a constant K (codegen's ``_subscript``).
_GET_ITEM = re.compile(r"\bstate\[(\d+)\]")
