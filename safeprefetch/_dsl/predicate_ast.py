"""How the generated transitions test a predicate's value: as ``if`` would, but never an iterator's truth.

A guard, an invariant, a timed wait's ``until``: the model's own path takes
what they return through ``violations.truth``, which refuses an iterator or
an awaitable (a generator expression written for ``all(...)`` is true in
every state, so the invariant never fails and the guard always holds). The
generated code must give exactly the model's successors and errors
(translation validation, ``_runtime/validation.py``), so it tests the same
way, at the least cost the value's form allows:

* a value that is a bool by its form (an ``in`` or ``is`` test, a ``not``, a call of
  ``all``, ``any``, ``isinstance`` and the like when the generated module's
  name is that builtin, ``and``/``or``/``if``-``else`` of those) or a
  constant is tested as it is: no iterator can come out of it;
* any other is ``(P__ := E) is True or (P__ is not False and truth(P__,
  what))``: E evaluated once, two identity tests for a bool, and the call
  only for a value that is neither.
"""

from __future__ import annotations

import ast
import builtins
from typing import Any, Callable, Mapping

__all__ = ["is_boolean", "truth_test"]

#: Comparisons whose result is a bool whatever the operands: membership and identity.
_BOOL_OPS = (ast.In, ast.NotIn, ast.Is, ast.IsNot)

#: Builtins whose result is a bool, when the generated module's name for them is the builtin itself.
_BOOL_BUILTINS = {name: getattr(builtins, name) for name in ("all", "any", "bool", "callable", "hasattr",
                                                             "isinstance", "issubclass")}


def is_boolean(value: ast.expr, namespace: Mapping[str, Any]) -> bool:
    """Whether ``value``'s form alone makes it a bool, or a constant (whose truth is its own)."""
    if isinstance(value, ast.Constant) or (isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)):
        return True
    if isinstance(value, ast.Compare):  # ``<`` or ``==`` may return anything (a rich comparison); ``in``, ``is``
        return all(isinstance(op, _BOOL_OPS) for op in value.ops)  # always give a bool
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in _BOOL_BUILTINS:
        return namespace.get(value.func.id, _BOOL_BUILTINS[value.func.id]) is _BOOL_BUILTINS[value.func.id]
    if isinstance(value, ast.BoolOp):
        return all(is_boolean(v, namespace) for v in value.values)
    return isinstance(value, ast.IfExp) and is_boolean(value.body, namespace) and is_boolean(value.orelse, namespace)


def truth_test(truth_name: str, namespace: Mapping[str, Any], what: str) -> Callable[[ast.expr], ast.expr]:
    """A function from a predicate's value expression to the expression that is true when it holds.

    ``truth_name`` is the module's name for ``violations.truth``; ``what`` names the predicate in its error.
    """
    def test(value: ast.expr) -> ast.expr:
        if is_boolean(value, namespace):
            return value
        p = ast.Name(id="P__", ctx=ast.Load())
        return ast.BoolOp(op=ast.Or(), values=[
            ast.Compare(left=ast.NamedExpr(target=ast.Name(id="P__", ctx=ast.Store()), value=value),
                        ops=[ast.Is()], comparators=[ast.Constant(True)]),
            ast.BoolOp(op=ast.And(), values=[
                ast.Compare(left=p, ops=[ast.IsNot()], comparators=[ast.Constant(False)]),
                ast.Call(func=ast.Name(id=truth_name, ctx=ast.Load()), args=[p, ast.Constant(what)], keywords=[])])])
    return test
