"""Typed expressions: one Python expression of a generated transition as a C expression and its kind.

What it guarantees
------------------
Each ``x_<Node>`` method gives ``(code, kind)``, with ``kind`` one of ``int``, ``optint`` (an int that may be
None, held as ``OPT_NONE``), ``bool``, ``tag`` (a slot state), ``label`` (a string, by its number), ``pair``,
``pairs``, ``ints`` or ``none``; it raises :class:`NotTyped` for anything whose C meaning would not be
Python's for every value of those kinds, and the whole function is then left to Python. Python's semantics
kept on purpose: ``and``/``or`` only over C bools (Python's return an operand), an ``optint`` used as a number
is checked not to be None (Python raises there), ``==`` between kinds that can never be equal is false, a
guard's ``truth(...)`` form is typed only when its value is a C bool. Statements a loop needs before the
expression (``all(...)`` over a generator) go into ``pre``: they are pure, and anything they raise falls
back, so running them ahead of a short circuit changes nothing.
"""

from __future__ import annotations

import ast
import copy
from typing import Any

__all__ = ["OPT_NONE", "NotTyped"]

#: The sentinel "None" of an int that may be None (``next_slot``'s "no slot"); an int field never holds it
#: (unboxing refuses it), so it cannot be mistaken for a value.
OPT_NONE = "OPT_NONE"


class NotTyped(Exception):
    """This function (or a helper it calls) uses something the typed translation does not cover."""



# -- kinds ------------------------------------------------------------------------------------------------

_CTYPE = {"int": "long long", "optint": "long long", "bool": "bint", "tag": "long long", "label": "long long",
          "pair": "Pair", "pairs": "Pairs", "ints": "Ints"}
_INTLIKE = ("int", "tag", "bool")


def _is_tag(value: Any) -> bool:
    return isinstance(value, int) and type(value) not in (int, bool)


def _kind_of(value: Any, cap: list[int]) -> str | None:
    """The C kind of a field's initial value (None: passed through untouched, never typed)."""
    if type(value) is bool:
        return "bool"
    if type(value) is int:
        return "int"
    if _is_tag(value):
        return "tag"
    if type(value) is str:
        return "label"
    if type(value) is tuple:
        if len(value) == 2 and _is_tag(value[0]) and type(value[1]) is int:
            return "pair"
        if value and all(type(v) is tuple and len(v) == 2 and _is_tag(v[0]) and type(v[1]) is int for v in value):
            if cap[0] not in (0, len(value)):
                return None  # two arrays of pairs of different lengths: one C size only
            cap[0] = len(value)
            return "pairs"
        if all(type(v) is int for v in value):
            return "ints"
    return None



class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]):
        self.names = names

    def visit_Name(self, n: ast.Name) -> ast.Name:
        return ast.copy_location(ast.Name(self.names[n.id], n.ctx), n) if n.id in self.names else n


def _renamed(node: Any, names: dict[str, str]) -> Any:
    """A copy of ``node`` with the names in ``names`` replaced (the original tree is left as it was)."""
    return _Rename(names).visit(copy.deepcopy(node))


class _Expressions:
    """The expression half of a function's translation (mixed into ``typedstmt._Fn``)."""

    mod: Any
    vars: dict[str, str]
    assigned: set[str] | None
    read: Any  # TypedFunction.read: a local is read here


    def expr(self, e: ast.expr, pre: list[str]) -> tuple[str, str]:
        m = getattr(self, "x_" + type(e).__name__, None)
        if m is None:
            raise NotTyped(f"expression {type(e).__name__}")
        return m(e, pre)

    def x_Constant(self, e: ast.Constant, pre: list[str]) -> tuple[str, str]:
        v = e.value
        if type(v) is bool:
            return ("1" if v else "0"), "bool"
        if type(v) is int:
            if not -2**62 < v < 2**62:
                raise NotTyped("a large int constant")
            return f"{v}LL" if v >= 0 else f"({v}LL)", "int"
        if type(v) is str:
            return self.mod.label(v), "label"
        if v is None:
            return OPT_NONE, "none"
        raise NotTyped(f"a constant {v!r}")

    def x_Name(self, e: ast.Name, pre: list[str]) -> tuple[str, str]:
        if e.id in self.vars:
            self.read(e.id)
            return e.id, self.vars[e.id]
        try:
            v = self._const(e.id)
        except KeyError:
            raise NotTyped(f"the name {e.id}") from None
        if _is_tag(v):
            return str(self.mod.tag(v)), "tag"
        if type(v) is bool:
            return ("1" if v else "0"), "bool"
        if type(v) is int:
            return self.x_Constant(ast.Constant(v), pre)
        if type(v) is str:
            return self.mod.label(v), "label"
        if type(v) is tuple and len(v) == 2 and _is_tag(v[0]) and type(v[1]) is int:
            if not -2**62 < v[1] < 2**62:
                raise NotTyped("a large int constant")
            return f"mkpair({self.mod.tag(v[0])}, {v[1]})", "pair"
        raise NotTyped(f"the name {e.id} ({type(v).__name__})")

    def x_Tuple(self, e: ast.Tuple, pre: list[str]) -> tuple[str, str]:
        if not e.elts:
            return "EMPTY_INTS", "ints"
        items = [self.expr(x, pre) for x in e.elts]
        if len(items) == 2 and items[0][1] == "tag" and items[1][1] in ("int", "optint"):
            return f"mkpair({items[0][0]}, {self.num(*items[1])})", "pair"
        if all(k in ("int", "optint") for _c, k in items):  # a tuple of ints (no slot state: that is a pair)
            code = "EMPTY_INTS"
            for c, k in items:
                code = f"ints_append({code}, {self.num(c, k)})"
            return code, "ints"
        raise NotTyped("a tuple display")

    def x_IfExp(self, e: ast.IfExp, pre: list[str]) -> tuple[str, str]:
        # The test and both arms are pure (anything they raise falls back), so their loops may run first.
        c, kc = self.expr(e.test, pre)
        a, ka = self.expr(e.body, pre)
        b, kb = self.expr(e.orelse, pre)
        if kc != "bool":
            c = self._truthy(c, kc)
        if ka == kb and ka in _INTLIKE + ("optint", "label"):
            return f"({a} if {c} else {b})", ka
        if {ka, kb} <= {"int", "optint", "none"}:
            a, b = (OPT_NONE if ka == "none" else a), (OPT_NONE if kb == "none" else b)
            return f"({a} if {c} else {b})", "optint"
        raise NotTyped(f"a conditional between a {ka} and a {kb}")

    def num(self, code: str, kind: str) -> str:
        """An int-like value for arithmetic or comparison (an int that may be None is checked)."""
        if kind == "optint":
            return f"notnone({code})"
        if kind not in _INTLIKE:
            raise NotTyped(f"arithmetic on a {kind}")
        return code

    def x_BinOp(self, e: ast.BinOp, pre: list[str]) -> tuple[str, str]:
        a, ka = self.expr(e.left, pre)
        b, kb = self.expr(e.right, pre)
        if isinstance(e.op, (ast.Add, ast.Sub)) and ka in _INTLIKE + ("optint",) and kb in _INTLIKE + ("optint",):
            op = "+" if isinstance(e.op, ast.Add) else "-"
            return f"checked({self.num(a, ka)} {op} {self.num(b, kb)})", "int"
        raise NotTyped(f"the operator {type(e.op).__name__} on {ka}, {kb}")

    def _truthy(self, c: str, k: str) -> str:
        """Python's truth of a value of kind ``k`` as a C bool."""
        if k in ("int", "tag"):
            return f"({c} != 0)"
        if k == "optint":
            return f"({c} != {OPT_NONE} and {c} != 0)"
        if k == "ints":
            return f"({c}.n != 0)"
        if k == "pairs":
            return "1" if self.mod.cap else "0"
        if k == "pair":
            return "1"
        raise NotTyped(f"the truth of a {k}")

    def x_UnaryOp(self, e: ast.UnaryOp, pre: list[str]) -> tuple[str, str]:
        a, k = self.expr(e.operand, pre)
        if isinstance(e.op, ast.Not):
            return f"(not {a if k == 'bool' else self._truthy(a, k)})", "bool"
        if isinstance(e.op, ast.USub) and k in _INTLIKE + ("optint",):
            return f"checked(-{self.num(a, k)})", "int"
        raise NotTyped(f"the operator {type(e.op).__name__} on a {k}")

    def x_BoolOp(self, e: ast.BoolOp, pre: list[str]) -> tuple[str, str]:
        guard = self._guard_form(e)
        if guard is not None:
            c, k = self.expr(guard, pre)
            if k != "bool":
                raise NotTyped(f"a guard over a {k} (its truth is the model's truth(), which may refuse it)")
            return c, k
        # Each operand after the first may need statements of its own (a loop): they are pure, and
        # anything they raise falls back, so evaluating them ahead of the short circuit is safe.
        parts = []
        for v in e.values:
            c, k = self.expr(v, pre)
            if k != "bool":
                raise NotTyped(f"{type(e.op).__name__.lower()} over a {k} (Python's returns an operand)")
            parts.append(c)
        op = " and " if isinstance(e.op, ast.And) else " or "
        return "(" + op.join(parts) + ")", "bool"

    def _guard_form(self, e: ast.BoolOp) -> ast.expr | None:
        """``E`` of the generator's ``(P__ := E) is True or (P__ is not False and truth(P__, what))``."""
        if not (isinstance(e.op, ast.Or) and len(e.values) == 2):
            return None
        first, rest = e.values
        if (isinstance(first, ast.Compare) and isinstance(first.left, ast.NamedExpr)
                and first.left.target.id == "P__" and isinstance(first.ops[0], ast.Is)
                and isinstance(rest, ast.BoolOp) and isinstance(rest.op, ast.And)
                and isinstance(rest.values[-1], ast.Call) and isinstance(rest.values[-1].func, ast.Name)
                and rest.values[-1].func.id == "truth"):
            return first.left.value  # typed only when E is a C bool (checked by the caller's use)
        return None

    def x_Compare(self, e: ast.Compare, pre: list[str]) -> tuple[str, str]:
        if len(e.ops) != 1:
            # ``a < b <= c`` over ints: ``(a < b) and (b <= c)``; ``b`` is evaluated twice, which for a pure
            # int expression is evaluating it once.
            operands = [e.left, *e.comparators]
            parts = [self.x_Compare(ast.Compare(x, [op], [y]), pre)
                     for x, op, y in zip(operands, e.ops, operands[1:])]
            if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in e.ops):
                raise NotTyped("a chained identity or membership test")
            for x in operands:
                if self.expr(x, [])[1] not in _INTLIKE:
                    raise NotTyped("a chained comparison of non-ints")
            return "(" + " and ".join(c for c, _k in parts) + ")", "bool"
        op, right = e.ops[0], e.comparators[0]
        a, ka = self.expr(e.left, pre)
        b, kb = self.expr(right, pre)
        if isinstance(op, (ast.Is, ast.IsNot)):
            neg = "!=" if isinstance(op, ast.IsNot) else "=="
            if ka == "optint" and kb == "none" or ka == "none" and kb == "optint":
                return f"({a} {neg} {b})", "bool"
            if ka in ("int", "tag", "bool", "label", "pair", "pairs", "ints") and kb == "none":
                return ("0" if neg == "==" else "1"), "bool"  # a value of these kinds is never None
            raise NotTyped(f"'is' between a {ka} and a {kb}")
        if isinstance(op, (ast.In, ast.NotIn)):
            neg = "not " if isinstance(op, ast.NotIn) else ""
            if ka == "pair" and kb == "pairs":
                return f"({neg}pairs_contains(&{self.ref(b)}, {a}))", "bool"
            if ka in ("int", "tag", "optint") and kb == "ints":
                return f"({neg}ints_contains(&{self.ref(b)}, {self.num(a, ka)}))", "bool"
            raise NotTyped(f"'in' of a {ka} in a {kb}")
        sym = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}.get(type(op))
        if sym is None:
            raise NotTyped(f"the comparison {type(op).__name__}")
        if ka in _INTLIKE + ("optint",) and kb in _INTLIKE + ("optint",):
            if sym in ("==", "!=") and "optint" in (ka, kb):  # None == 3 is False, not an error
                return f"({a} {sym} {b})", "bool"
            return f"({self.num(a, ka)} {sym} {self.num(b, kb)})", "bool"
        if sym in ("==", "!="):
            neg = "" if sym == "==" else "not "
            if ka == kb == "label":
                return f"({a} {sym} {b})", "bool"
            if ka == kb == "pair":
                return f"({neg}pair_eq({a}, {b}))", "bool"
            if ka == kb == "ints":
                return f"({neg}ints_eq(&{self.ref(a)}, &{self.ref(b)}))", "bool"
            if ka == kb == "pairs":
                return f"({neg}pairs_eq(&{self.ref(a)}, &{self.ref(b)}))", "bool"
            # Different types that Python never finds equal (a tuple and an int, a str and an int). Not a
            # tuple of ints and a pair: ``(1, 5) == (FILLING, 5)`` is True, a slot state being an int.
            if {ka, kb} in ({"pair", "tag"}, {"pair", "int"}, {"label", "int"}, {"label", "tag"}, {"label", "bool"},
                            {"pair", "bool"}, {"ints", "int"}, {"ints", "tag"}, {"ints", "bool"}, {"ints", "label"},
                            {"pair", "label"}, {"pairs", "label"}, {"pairs", "int"}):
                return ("0" if sym == "==" else "1"), "bool"
        raise NotTyped(f"{sym} between a {ka} and a {kb}")

    def ref(self, code: str) -> str:
        """An lvalue for ``&``: a variable itself, else a temporary holding the value."""
        if code.isidentifier():
            return code
        raise NotTyped("a composite value that is not a variable")

    def x_Subscript(self, e: ast.Subscript, pre: list[str]) -> tuple[str, str]:
        if isinstance(e.slice, ast.Slice):
            return self._slice(e, pre)
        a, ka = self.expr(e.value, pre)
        i, ki = self.expr(e.slice, pre)
        if ka == "pair" and i in ("0LL", "1LL"):
            return (f"{a}.tag", "tag") if i == "0LL" else (f"{a}.idx", "int")
        if ka == "pairs" and ki in ("int", "optint", "tag"):
            return f"pairs_get(&{self.ref(a)}, {self.num(i, ki)})", "pair"
        if ka == "ints" and ki in ("int", "optint", "tag"):
            return f"ints_get(&{self.ref(a)}, {self.num(i, ki)})", "int"
        raise NotTyped(f"indexing a {ka} with a {ki}")

    def _slice(self, e: ast.Subscript, pre: list[str]) -> tuple[str, str]:
        """``t[lo:hi]`` of a tuple of ints, with Python's clamping and negative bounds (no step)."""
        sl = e.slice
        a, ka = self.expr(e.value, pre)
        if ka != "ints" or sl.step is not None:
            raise NotTyped(f"a slice of a {ka}")
        args = []
        for x in (sl.lower, sl.upper):  # (bound, whether given): an absent bound is that end of the tuple
            if x is None:
                args += ["0", "0"]
            else:
                c, k = self.expr(x, pre)
                args += [self.num(c, k), "1"]
        return f"ints_slice(&{self.ref(a)}, {', '.join(args)})", "ints"

    def x_Call(self, e: ast.Call, pre: list[str]) -> tuple[str, str]:
        if e.keywords or any(isinstance(a, ast.Starred) for a in e.args):
            raise NotTyped("a call with keywords or *args")
        f = e.func
        if isinstance(f, ast.Attribute) and f.attr in ("count", "index") and len(e.args) == 1:
            a, ka = self.expr(f.value, pre)
            x, kx = self.expr(e.args[0], pre)
            if ka == "pairs" and kx == "pair":
                return f"pairs_{f.attr}(&{self.ref(a)}, {x})", "int"
            if ka == "ints" and kx in _INTLIKE + ("optint",):
                return f"ints_{f.attr}(&{self.ref(a)}, {self.num(x, kx)})", "int"
            raise NotTyped(f".{f.attr} on a {ka}")
        if not isinstance(f, ast.Name):
            raise NotTyped("a call of an expression")
        if f.id in ("all", "any") and len(e.args) == 1 and isinstance(e.args[0], ast.GeneratorExp):
            return self._quantifier(f.id, e.args[0], pre), "bool"
        if f.id == "len" and len(e.args) == 1:
            a, ka = self.expr(e.args[0], pre)
            if ka == "pairs":
                return f"{self.mod.cap}LL", "int"
            if ka == "ints":
                return f"{a}.n", "int"
            raise NotTyped(f"len of a {ka}")
        args = [self.expr(a, pre) for a in e.args]
        cname, rkind = self.mod.helper(f.id, [k for _c, k in args], self)
        return f"{cname}({', '.join(c for c, _k in args)})", rkind

    def _quantifier(self, which: str, g: ast.GeneratorExp, pre: list[str]) -> str:
        if len(g.generators) != 1 or g.generators[0].is_async:
            raise NotTyped("a generator with more than one for")
        comp = g.generators[0]
        # The generator's variables are a scope of their own: written as fresh temporaries, so that a local of
        # the function with the same name keeps its value (Python's ``x`` after ``all(... for x in t)``).
        names = {n.id: self.mod.temp("G") for n in ast.walk(comp.target) if isinstance(n, ast.Name)}
        it = comp.iter
        comp, g = _renamed(comp, names), _renamed(g, names)
        comp.iter = it  # evaluated in the enclosing scope (``for x in x`` reads the function's x)
        out = self.mod.temp("Q")
        self.vars[out] = "bool"
        body: list[str] = []
        # The generator's variables are its own: after it, the names mean what they meant before.
        before = None if self.assigned is None else set(self.assigned)
        loop = self._for_header(comp.target, comp.iter, pre)
        inner: list[str] = []
        for cond in comp.ifs:
            c, k = self.expr(cond, inner)
            if k != "bool":
                raise NotTyped("a generator filter that is not a C bool")
            inner.append(f"if not {c}:")
            inner.append("    continue")
        c, k = self.expr(g.elt, inner)
        if k != "bool":
            raise NotTyped(f"{which}() over {k} values")
        body.append(f"{out} = {'1' if which == 'all' else '0'}")
        body += loop
        body += ["    " + line for line in inner]
        body.append(f"    if {'not ' if which == 'all' else ''}{c}:")
        body.append(f"        {out} = {'0' if which == 'all' else '1'}")
        body.append("        break")
        pre.extend(body)
        self.assigned = before
        return out

    def _for_header(self, target: ast.expr, it: ast.expr, pre: list[str], copy: bool = False) -> list[str]:
        """``for`` over a tuple of pairs (optionally ``enumerate``d) or of ints: its header and target stores
        (``copy``: over a copy of the tuple, which a ``for`` statement's body may rebind)."""
        counter = self.mod.temp("I")
        self.vars[counter] = "int"
        index = None
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" \
                and len(it.args) == 1 and not it.keywords and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            index, target, it = target.elts[0], target.elts[1], it.args[0]
        a, ka = self.expr(it, pre)
        if copy and ka in ("pairs", "ints"):
            held = self.mod.temp("C")
            self.vars[held] = ka
            pre.append(f"{held} = {a}")
            a = held
        if ka == "pairs":
            lines = [f"for {counter} in range({self.mod.cap}):"]
            item, kind = f"{self.ref(a)}.a[{counter}]", "pair"
        elif ka == "ints":
            lines = [f"for {counter} in range({self.ref(a)}.n):"]
            item, kind = f"{self.ref(a)}.a[{counter}]", "int"
        else:
            raise NotTyped(f"a for over a {ka}")
        if index is not None:
            lines += ["    " + s for s in self.store(index, counter, "int")]
        lines += ["    " + s for s in self.store(target, item, kind)]
        return lines
