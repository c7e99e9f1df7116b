"""Typed transitions: the generated transitions written again over C values, for Cython to compile.

What it guarantees
------------------
:func:`typed_source` takes a machine's generated transitions (``codegen.py``: one Python function per
thread, step and branch) and writes a Cython module in which each function it can type reads the state's
fields into C values -- an int as ``long long``, a flag as ``bint``, a program counter or another string
as the number of its label, a slot state (an ``int`` subclass) as its value, a ``(state, index)`` pair as
a C struct, a fixed-length tuple of pairs as a C array, a short tuple of ints as a C array with its length
-- computes the step there, and builds the successor tuple once, at the end, from those values (a field it
did not change is the very object it read).

*It is the generated function, or it is that function.* Each typed function has one way out besides a
successor, ``None`` (disabled) or a bool (a guard): ``FALLBACK``. Every path the typed code does not
decide exactly returns it -- a value of an unexpected type or size, an index out of range, an int that
would overflow 64 bits, a ``violate(...)``, a successor that breaks a folded invariant (``Broken``) -- and
the module's wrapper then calls the generated Python function on the same state, which decides it the
plain way (with the plain message). Any exception inside the typed code is treated the same way: the
typed code is pure (it reads a tuple and builds new ones), so running the Python function afterwards is
running it first. So the typed module can only be faster, never different -- which translation validation
checks, state by state, over the prefetcher's sweeps (``tests/test_typed_transitions.py``), and checks
that the typed code really decided those states (the wrapper counts its fallbacks).

*What it types.* The subset the code generator emits for the prefetcher and models like it: assignments
and tuple unpacking, ``if``/``while``/``break``, comparisons, ``and``/``or``/``not``, ``+``/``-`` on
ints, indexing a pair or a tuple of pairs, ``len``, ``in``, ``.count``, ``.index``, ``all``/``any`` over a
generator, the guard form ``(P__ := E) is True or ...`` with ``E`` a C bool, and the model's small helper
functions that the transitions call by name (each translated the same way, or the function is not typed).
A function using anything else is left to Python, whole, and :attr:`TypedSource.refused` says why.

``and``/``or`` are typed only over C bools (Python's return their operands); ``x in t`` over a C array
compares values, which is Python's ``in`` for these values (ints compare equal only to themselves).

*Python's meaning, where C's would differ* (the twenty-second round's review): a chained assignment
evaluates its value once; a ``for`` iterates the tuple it started with, whatever its body binds to the
name; a local read where some path leaves it unassigned is not typed (Python raises UnboundLocalError
there, a C variable holds whatever it holds); a local or a tuple of ints never mixes ints with slot states
or flags (they would be boxed back as plain ints); a slot state is typed only when its value, 0 to 63,
is its own in the table the successors are boxed from (not an ``IntEnum`` member of another's value, not
a negative one); a helper is known by the function, not by its name, and a recursive one is not typed;
an int result of ``-2**63`` (the C value that means None) is handed to Python.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
import types
from dataclasses import dataclass, field
from typing import Any

from . import typedsupport
from .codegen import CompiledMachine
from .typedexpr import _CTYPE, NotTyped, _is_tag, _kind_of
from .typedstmt import TypedFunction as _Fn

__all__ = ["NotTyped", "TypedSource", "typed_source"]

#: The slot states' values the C table holds (``typedsupport``'s ``CTAGS``): 0 to 63.
MAX_TAGS = 64


@dataclass
class TypedSource:
    """The Cython module's source, the names to bind in it, and what it typed."""

    source: str
    #: name -> value, bound as the module's globals after loading (the Python fallbacks among them).
    bind: dict[str, Any]
    #: The generated functions written typed (the others are the Python ones, unchanged).
    typed: tuple[str, ...]
    #: ``(function, reason)`` for every generated function left to Python.
    refused: tuple[tuple[str, str], ...]
    #: Per field: its C kind (``int``, ``bool``, ``tag``, ``label``, ``pairs``, ``ints``) or None (opaque).
    kinds: tuple[str | None, ...] = field(default=())


class _Module:
    """What every function shares: the fields' kinds, the labels, the tags, the helpers."""

    def __init__(self, cm: CompiledMachine, ns: dict[str, Any]):
        self.cm, self.ns = cm, ns
        cap = [0]
        self.kinds = tuple(_kind_of(v, cap) for v in cm.machine.init)
        self.cap = cap[0] or 1
        self.maxints = max(self.cap, 8)
        self.labels: dict[str, int] = {}
        self.tags: dict[int, Any] = {}
        for v in cm.machine.init:
            self._collect(v)
            if type(v) is str:
                self.label(v)
        for v in ns.values():
            self._collect(v)
        #: (function id, name, argument kinds) -> (cname, return kind, params); None while being translated.
        self.helpers: dict[tuple, tuple[str, str, tuple[str, ...]] | None] = {}
        self.helper_defs: list[str] = []
        self.bind: dict[str, Any] = {}
        self.ntemp = 0

    def _collect(self, v: Any, depth: int = 2) -> None:
        if _is_tag(v) and 0 <= v < MAX_TAGS:
            self.tags.setdefault(int(v), v)
        elif type(v) is tuple and depth:
            for x in v:
                self._collect(x, depth - 1)

    def tag(self, v: Any) -> int:
        """The C value of slot state ``v``: its int, which must name ``v`` itself in the table of slot states
        (boxing gives back the table's object: a second object of the same value, an ``IntEnum`` member
        beside a ``SlotState``, would come back as the first), and fit it."""
        value = int(v)
        if not 0 <= value < MAX_TAGS or self.tags.setdefault(value, v) is not v:
            raise NotTyped(f"the slot state {v!r} (its value is outside 0..{MAX_TAGS - 1} or another's)")
        return value

    def label(self, text: str) -> str:
        return str(self.labels.setdefault(text, len(self.labels)))

    def temp(self, prefix: str = "T") -> str:
        self.ntemp += 1
        return f"Z{prefix}__{self.ntemp}"

    def helper(self, name: str, kinds: list[str], caller: _Fn) -> tuple[str, str]:
        """A helper the transitions call by name, translated once per function and argument kinds: its C name
        and the kind it returns (``pairs_set`` for the ``_set`` shape)."""
        try:
            fn = caller._const(name)
        except KeyError:
            raise NotTyped(f"the name {name}") from None
        # The function itself, not its name: two helpers may each call their own ``below`` (closures of one
        # factory), and each is translated with its own cells.
        key = (id(fn), name, tuple(kinds))
        if key in self.helpers:
            if self.helpers[key] is None:
                raise NotTyped(f"the recursive helper {name}")
            cname, rkind, _p = self.helpers[key]
            return cname, rkind
        if fn is getattr(builtins, name, None):
            raise NotTyped(f"the builtin {name}")
        if any(k not in _CTYPE for k in kinds):
            raise NotTyped(f"{name} called with a {next(k for k in kinds if k not in _CTYPE)}")
        node, consts = _helper_node(fn)
        clash = sorted(({a.arg for a in node.args.args} | {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                                                           and isinstance(n.ctx, ast.Store)}) & typedsupport.RESERVED)
        if clash:
            raise NotTyped(f"{name}'s local {clash[0]} (a name of the C support code, or of C)")
        self.ntemp += 1
        cname = f"H__{name}_{self.ntemp}"
        if _set_pattern(node):
            if kinds[0] != "pairs" or kinds[1] not in ("int", "optint", "tag") or kinds[2] != "pair":
                raise NotTyped(f"{name} over a {kinds[0]}")
            self.helpers[key] = ("pairs_set", "pairs", tuple(kinds))
            return "pairs_set", "pairs"
        params = {a.arg: k for a, k in zip(node.args.args, kinds)}
        if len(params) != len(kinds):
            raise NotTyped(f"{name} called with {len(kinds)} arguments")
        self.helpers[key] = None  # being translated: a call of it from within is recursion (the caller rolls back)
        inner = _two_pass(lambda seed: _Fn(self, node, "helper", params, consts, seed))
        decl, body = inner.result
        if inner.ret_kind is None:
            raise NotTyped(f"{name} returns nothing typed")
        self.helpers[key] = (cname, inner.ret_kind, tuple(kinds))
        args = ", ".join(f"{_CTYPE[k]} {p}" for p, k in params.items())
        self.helper_defs.append("\n".join([f"cdef {_CTYPE[inner.ret_kind]} {cname}({args}) except *:"] + decl +
                                          ["    " + s for s in body] + ["    raise Fallback()"]))
        return cname, inner.ret_kind


# -- the module ------------------------------------------------------------------------------------------

def _helper_node(fn: Any) -> tuple[ast.FunctionDef, dict[str, Any]]:
    if not isinstance(fn, types.FunctionType):
        raise NotTyped("a helper that is not a plain function")
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        raise NotTyped(f"the source of {fn.__name__}") from None
    if not isinstance(node, ast.FunctionDef) or node.decorator_list:
        raise NotTyped(f"the helper {fn.__name__}")
    a = node.args
    if a.defaults or a.kw_defaults or a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        raise NotTyped(f"the helper {fn.__name__}'s arguments")
    cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
    consts = {**{k: v for k, v in fn.__globals__.items()}, **cells}
    return node, consts


def _set_pattern(node: ast.FunctionDef) -> bool:
    """``return seq[:k] + (value,) + seq[k + 1:]``: a tuple with item ``k`` replaced."""
    if len(node.body) != 1 or not isinstance(node.body[0], ast.Return) or len(node.args.args) != 3:
        return False
    seq, k, value = (a.arg for a in node.args.args)
    want = f"{seq}[:{k}] + ({value},) + {seq}[{k} + 1:]"
    return ast.unparse(node.body[0].value) == want




def typed_source(cm: CompiledMachine) -> TypedSource:
    """The typed Cython module of ``cm``'s generated transitions (see the module doc)."""
    tree = ast.parse(cm.source)
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    first = next((g for table in cm.steps for g in table.values()), None)
    ns: dict[str, Any] = dict(first.ones[0].__globals__) if first is not None else {}
    mod = _Module(cm, ns)
    typed: list[str] = []
    refused: list[tuple[str, str]] = []
    bodies: list[str] = []
    bind: dict[str, Any] = {}
    for fn in fns:
        if fn.name[0] not in "te":
            continue
        saved = (dict(mod.helpers), list(mod.helper_defs))
        try:
            lines = _two_pass(lambda seed, fn=fn: _Fn(mod, fn, fn.name[0], seed=seed)).result
        except NotTyped as why:
            mod.helpers, mod.helper_defs = saved
            refused.append((fn.name, str(why)))
            continue
        typed.append(fn.name)
        bind[f"PY_{fn.name}"] = ns[fn.name]
        # The fields are read unchecked (SF), so a state of any other length is Python's to decide.
        bodies.append("\n".join([f"cdef object C_{fn.name}(tuple state):",
                                 f"    if len(state) != {len(mod.kinds)}:", "        return FALLBACK"] + lines))
        bodies.append(_wrapper(fn.name, len(typed) - 1))
    firsts = [n for n in fns if n.name[0] == "f"]
    for fn in firsts:
        text = _first(fn, set(typed))
        if text:
            bodies.append(text)
    tags = [mod.tags.get(v) for v in range(max(mod.tags, default=-1) + 1)]
    bind["TAGS"] = tuple(tags)
    bind["TAG_TYPES"] = tuple({type(t) for t in tags if t is not None})
    labels = sorted(mod.labels, key=mod.labels.get)
    bind["LABELS"] = tuple(labels)
    bind["LABEL_IDS"] = {text: i for i, text in enumerate(labels)}
    head = typedsupport.HEADER.replace("@CAP@", str(mod.cap)).replace("@MAXI@", str(mod.maxints)).replace(
        "@NFN@", str(max(len(typed), 1)))
    names = "\n".join(f"{n} = None" for n in sorted(bind) if n.startswith("PY_"))  # bound after loading
    source = "\n\n".join([head, names] + mod.helper_defs + bodies) + "\n"
    return TypedSource(source, bind, tuple(typed), tuple(refused), mod.kinds)


def _two_pass(make: Any) -> _Fn:
    """Translate twice: the first pass finds every local's kind, the second writes code for those kinds."""
    first = make(None)
    first.lines()
    second = make({n: k for n, k in first.vars.items() if not n.startswith("Z") and n not in first.params})
    second.result = second.lines()
    if any(second.vars.get(n) != k for n, k in first.vars.items() if not n.startswith("Z")):
        raise NotTyped("a local's kind changed between the passes")
    return second


def _wrapper(name: str, k: int) -> str:
    """The typed function, falling back to the Python one (``call_*``), and its Python-callable face."""
    return (f"cdef inline object call_{name}(object state):\n"
            f"    try:\n"
            f"        r = C_{name}(state)\n"
            f"    except Exception:\n"
            f"        r = FALLBACK\n"
            f"    if r is FALLBACK:\n"
            f"        FALLBACKS[{k}] += 1\n"
            f"        return PY_{name}(state)\n"
            f"    return r\n\n\n"
            f"def {name}(state):\n"
            f"    return call_{name}(state)")


def _first(fn: ast.FunctionDef, typed: set[str]) -> str:
    """``f*(state)``: the first enabled branch's ``(index, successor)``, through the typed transitions."""
    calls = [n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    if any(c not in typed for c in calls):
        return ""  # the generated one stays
    lines = [f"def {fn.name}(state):"]
    for i, c in enumerate(calls):
        lines += [f"    nxt = call_{c}(state)", "    if nxt is not None:", f"        return {i}, nxt"]
    return "\n".join(lines + ["    return None"])
