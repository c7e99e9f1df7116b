"""Typed statements: one generated function (a transition, a guard, a helper) as typed Cython lines.

What it guarantees
------------------
The statements the code generator emits, written over C values: the fields a transition reads are unboxed
where it reads them (``S__x = unbox_int(SF(state, i))``: read unchecked, after the length check on entry),
assignments keep Python's order (every value of an unpacking first), ``violate(...)``, ``Broken(...)`` and
the ``except StepViolation`` path return ``FALLBACK`` (the Python function then gives the violation itself),
and the successor display is boxed field by field, an unchanged field being the object it was read as.
Kinds are found in a first pass and the code is written in a second (``typedgen._two_pass``), so code
before an assignment that widens a local's kind is written for the wider kind.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from .typedexpr import _CTYPE, OPT_NONE, NotTyped, _Expressions

__all__ = ["TypedFunction"]

#: The translation's own temporaries (``_Module.temp``), assigned where they are made.
_TEMP = re.compile(r"Z[A-Z]__\d+$")

#: How a C value of each kind becomes its Python object (``ref``: the variable, for a pointer to it).
_BOX = {"int": "box_int({c})", "optint": "(None if {c} == OPT_NONE else box_int({c}))",
        "bool": "(True if {c} else False)", "tag": "TAGS[{c}]", "label": "LABELS[{c}]", "pair": "box_pair({c})",
        "pairs": "box_pairs(&{ref}, SF(state, {i}))", "ints": "box_ints(&{ref})"}


class TypedFunction(_Expressions):
    """Translates one function (a transition, a guard, or a helper) into typed Cython lines."""

    def __init__(self, mod: Any, node: ast.FunctionDef, role: str, params: dict[str, str] | None = None,
                 closure: dict[str, Any] | None = None, seed: dict[str, str] | None = None):
        self.mod, self.node, self.role = mod, node, role  # role: "t", "e" or "helper"
        # ``seed``: every local's kind from a first pass, so that code written before a later assignment
        # widened a kind (an int that may also be None) is written for the wider one.
        self.vars: dict[str, str] = {**(seed or {}), **(params or {})}
        self.params = dict(params or {})
        self.closure = closure or {}
        self.alias: dict[str, int] = {}   # a local that is only ever ``state[i]``: boxed as that very object
        # The locals surely assigned where the translation is (None: no path reaches it). Python raises
        # UnboundLocalError reading any other, where a C variable would give what it happens to hold.
        self.assigned: set[str] | None = set(self.params)
        self.ret_kind: str | None = None
        stores: dict[str, int] = {}
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                stores[n.id] = stores.get(n.id, 0) + 1
        for st in node.body:
            if (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                    and stores.get(st.targets[0].id) == 1 and self._field(st.value) is not None):
                self.alias[st.targets[0].id] = self._field(st.value)

    # -- helpers of the translation

    def _field(self, e: ast.expr) -> int | None:
        if (isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name) and e.value.id == "state"
                and self.role != "helper" and isinstance(e.slice, ast.Constant) and type(e.slice.value) is int):
            return e.slice.value
        return None

    def _declare(self, name: str, kind: str) -> None:
        old = self.vars.get(name)
        if old is None or old == kind:
            self.vars[name] = kind
        elif {old, kind} <= {"int", "optint"}:
            self.vars[name] = "optint"
        else:  # not an int and a slot state either: the slot state would be boxed back as a plain int
            raise NotTyped(f"{name} holds a {old} and a {kind}")

    def _const(self, name: str) -> Any:
        if name in self.closure:
            return self.closure[name]
        if self.role == "helper":
            raise KeyError(name)
        return self.mod.ns[name]


    def assign(self, name: str) -> None:
        if self.assigned is not None:
            self.assigned.add(name)

    def read(self, name: str) -> None:
        """``name`` is read here: it must be a parameter, a temporary, or assigned on every path to here."""
        if self.assigned is not None and name not in self.assigned and not _TEMP.match(name):
            raise NotTyped(f"{name} read where it may be unassigned (Python raises UnboundLocalError)")

    def branches(self, arms: list[list[ast.stmt]]) -> list[list[str]]:
        """The lines of each arm of an ``if``, each from the same assignments; after it, what all arms assign
        that run on (an arm that returns, breaks or continues does not reach the code after)."""
        before, outs, after = self.assigned, [], []
        for arm in arms:
            self.assigned = None if before is None else set(before)
            outs.append(self.block(arm))
            after.append(self.assigned)
        live = [a for a in after if a is not None]
        self.assigned = set.intersection(*live) if live else None
        return outs

    def store(self, target: ast.expr, code: str, kind: str) -> list[str]:
        if isinstance(target, ast.Name):
            self.assign(target.id)
            if target.id == "_":
                return []
            self._declare(target.id, "optint" if kind == "none" else kind)
            if self.vars[target.id] == "optint" and kind == "none":
                return [f"{target.id} = {OPT_NONE}"]
            if kind == "none":
                raise NotTyped(f"None stored in {target.id}")
            return [f"{target.id} = {code}"]
        if isinstance(target, ast.Tuple) and len(target.elts) == 2 and kind == "pair":
            tmp = self.mod.temp("P")
            self.vars[tmp] = "pair"
            return [f"{tmp} = {code}"] + self.store(target.elts[0], f"{tmp}.tag", "tag") + \
                self.store(target.elts[1], f"{tmp}.idx", "int")
        raise NotTyped(f"an assignment to {type(target).__name__} from a {kind}")

    def stmts(self, body: list[ast.stmt]) -> list[str]:
        out: list[str] = []
        for st in body:
            m = getattr(self, "s_" + type(st).__name__, None)
            if m is None:
                raise NotTyped(f"the statement {type(st).__name__}")
            out += m(st)
        return out

    def block(self, body: list[ast.stmt]) -> list[str]:
        lines = self.stmts(body)
        return ["    " + s for s in lines] if lines else ["    pass"]

    def s_Pass(self, st: ast.Pass) -> list[str]:
        return []

    def s_Break(self, st: ast.Break) -> list[str]:
        self.assigned = None
        return ["break"]

    def s_Continue(self, st: ast.Continue) -> list[str]:
        self.assigned = None
        return ["continue"]

    def s_Try(self, st: ast.Try) -> list[str]:
        # ``except StepViolation``: a violation here is a ``violate(...)`` call, which falls back.
        if st.orelse or st.finalbody or any(not (isinstance(h.type, ast.Name) and h.type.id == "StepViolation")
                                            for h in st.handlers):
            raise NotTyped("a try other than the generator's 'except StepViolation'")
        return self.stmts(st.body)

    def s_Expr(self, st: ast.Expr) -> list[str]:
        v = st.value
        if isinstance(v, ast.Constant) and type(v.value) is str:
            return []  # a docstring
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "violate":
            self.assigned = None
            return ["raise Fallback()" if self.role == "helper" else "return FALLBACK"]
        raise NotTyped("an expression statement")

    def s_If(self, st: ast.If) -> list[str]:
        pre: list[str] = []
        c, k = self.expr(st.test, pre)
        if k != "bool":
            c = self._truthy(c, k)
        body, orelse = self.branches([st.body, st.orelse])
        return pre + [f"if {c}:"] + body + (["else:"] + orelse if st.orelse else [])

    def s_While(self, st: ast.While) -> list[str]:
        if st.orelse:
            raise NotTyped("while ... else")
        pre: list[str] = []
        c, k = self.expr(st.test, pre)
        if pre:
            raise NotTyped("a loop condition with a loop in it")
        c = c if k == "bool" else self._truthy(c, k)
        before = None if self.assigned is None else set(self.assigned)
        body = self.block(st.body)
        self.assigned = before  # the body may not run (what a ``while True`` assigns before its break aside)
        return [f"while {c}:"] + body

    def s_For(self, st: ast.For) -> list[str]:
        if st.orelse:
            raise NotTyped("for ... else")
        pre: list[str] = []
        before = None if self.assigned is None else set(self.assigned)
        # Python iterates the tuple the loop started with, whatever the body binds to its name since.
        head = self._for_header(st.target, st.iter, pre, copy=True)
        body = self.stmts(st.body)
        self.assigned = before  # the tuple may be empty
        return pre + head + ["    " + s for s in body] + (["    pass"] if not st.body else [])

    def s_AugAssign(self, st: ast.AugAssign) -> list[str]:
        if not isinstance(st.target, ast.Name):
            raise NotTyped("an augmented assignment to a non-name")
        name = st.target.id
        kind = self.vars.get(name)
        pre: list[str] = []
        if kind is not None:
            self.read(name)
        if kind == "ints" and isinstance(st.op, ast.Add):
            # The whole right side first (``x += (len(x),)`` reads x before it grows), then one concatenation.
            # (A slot state or a flag is no int: x_Tuple refuses them in a tuple of ints, whose boxing would
            # give them back as plain ints.)
            c, k = self.expr(st.value, pre)
            if k != "ints":
                raise NotTyped(f"a tuple of ints extended by a {k}")
            tmp = self.mod.temp("U")
            self.vars[tmp] = "ints"
            return pre + [f"{tmp} = {c}", f"{name} = ints_concat({name}, &{tmp})"]
        if kind in ("int", "optint") and isinstance(st.op, (ast.Add, ast.Sub)):
            c, k = self.expr(st.value, pre)
            op = "+" if isinstance(st.op, ast.Add) else "-"
            return pre + [f"{name} = checked({self.num(name, kind)} {op} {self.num(c, k)})"]
        raise NotTyped(f"an augmented assignment to a {kind}")

    def s_Assign(self, st: ast.Assign) -> list[str]:
        if self.role != "helper" and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            name = st.targets[0].id
            i = self._field(st.value)
            if i is not None:
                return self._unbox(name, i)
            if name == "nxt__":
                return self._successor(st.value)
        pre: list[str] = []
        if len(st.targets) > 1:
            return self._chained(st, pre)
        values = st.value.elts if isinstance(st.value, ast.Tuple) else None
        out: list[str] = []
        for target in st.targets:
            if isinstance(target, ast.Tuple) and values is not None:
                if len(values) != len(target.elts):
                    raise NotTyped("an unpacking of the wrong length")
                evaluated = [self.expr(v, pre) for v in values]  # every value first, as Python does
                temps = []
                for (c, k), t in zip(evaluated, target.elts):
                    tmp = self.mod.temp("U")
                    self.vars[tmp] = k if k != "none" else "optint"
                    temps.append((tmp, k))
                    out.append(f"{tmp} = {c}")
                for (tmp, k), t in zip(temps, target.elts):
                    out += self.store(t, tmp if k != "none" else OPT_NONE, k)
            else:
                c, k = self.expr(st.value, pre)
                out += self.store(target, c, k)
        return pre + out

    def _chained(self, st: ast.Assign, pre: list[str]) -> list[str]:
        """``a = b = value``: the value once, then each target from left to right (Python's order)."""
        c, k = self.expr(st.value, pre)
        tmp = self.mod.temp("A")
        self.vars[tmp] = "optint" if k == "none" else k
        out = [f"{tmp} = {c}"]
        for target in st.targets:
            out += self.store(target, OPT_NONE if k == "none" else tmp, k)
        return pre + out

    def _unbox(self, name: str, i: int) -> list[str]:
        kind = self.mod.kinds[i] if i < len(self.mod.kinds) else None
        if kind is None:
            raise NotTyped(f"field {i} has no C kind")
        self._declare(name, kind)
        self.assign(name)
        fn = {"int": "unbox_int", "bool": "unbox_bool", "tag": "unbox_tag", "label": "unbox_label",
              "pairs": "unbox_pairs", "ints": "unbox_ints", "pair": "unbox_pair"}[kind]
        return [f"{name} = {fn}(SF(state, {i}))"]

    def _successor(self, value: ast.expr) -> list[str]:
        if not isinstance(value, ast.Tuple) or len(value.elts) != len(self.mod.kinds):
            raise NotTyped("a successor that is not a display of every field")
        parts = []
        for i, elt in enumerate(value.elts):
            f = self._field(elt)
            if f is not None:
                parts.append(f"SF(state, {f})")
            elif isinstance(elt, ast.Name) and self.alias.get(elt.id) is not None:
                parts.append(f"SF(state, {self.alias[elt.id]})")
            else:
                pre: list[str] = []
                c, k = self.expr(elt, pre)
                if pre:
                    raise NotTyped("a successor field computed by a loop")
                parts.append(self.box(c, k, i))
        return [f"nxt__ = ({', '.join(parts)},)"]

    def box(self, c: str, k: str, i: int) -> str:
        """The Python object of C value ``c`` of kind ``k``, for field ``i`` of the successor."""
        template = _BOX.get(k)
        if template is None:
            raise NotTyped(f"a {k} in the successor")
        return template.format(c=c, i=i, ref=self.ref(c) if k in ("pairs", "ints") else c)

    def s_Return(self, st: ast.Return) -> list[str]:
        lines = self._return(st)
        self.assigned = None  # nothing after a return runs
        return lines

    def _return(self, st: ast.Return) -> list[str]:
        v = st.value
        if self.role == "helper":
            if v is None:
                raise NotTyped("a helper returning nothing")
            pre: list[str] = []
            c, k = self.expr(v, pre)
            if k == "none":
                k, c = "optint", OPT_NONE
            if self.ret_kind is None or self.ret_kind == k:
                self.ret_kind = k
            elif {self.ret_kind, k} <= {"int", "optint"}:
                self.ret_kind = "optint"
            else:
                raise NotTyped(f"a helper returning a {self.ret_kind} and a {k}")
            return pre + [f"return {c}"]
        if v is None or isinstance(v, ast.Constant) and v.value is None:
            return ["return None"]
        if isinstance(v, ast.Name) and v.id == "nxt__":
            return ["return nxt__"]
        if isinstance(v, ast.Name) and v.id == "v__" or isinstance(v, ast.Call) and isinstance(v.func, ast.Name) \
                and v.func.id == "Broken":
            return ["return FALLBACK"]
        if self.role == "e":
            pre = []
            c, k = self.expr(v, pre)
            if k != "bool":
                raise NotTyped(f"a guard returning a {k}")
            return pre + [f"return True if {c} else False"]
        raise NotTyped("a return of something else")

    def s_Assert(self, st: ast.Assert) -> list[str]:
        raise NotTyped("assert")

    # -- the whole function

    def lines(self) -> list[str]:
        body = self.stmts(self.node.body)
        decl = [f"    cdef {_CTYPE[k]} {n}" for n, k in sorted(self.vars.items()) if n not in self.params]
        if self.role == "helper":
            return decl, body
        return decl + (["    cdef tuple nxt__"] if any("nxt__ =" in s for s in body) else []) + \
            ["    " + s for s in body]
