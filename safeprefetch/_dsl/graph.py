"""The program graph: every step's declared targets, checked, as data.

What it guarantees
------------------
For every program a model runs, :func:`program_graph` gives each step's
:class:`GraphStep` -- its kind, the primitive it acts on and the labels it
may go to -- read from the declarations alone (``next`` and ``to=``, see
``program.py``), never by running a step. Tools draw it (``list --graph``,
``explain``, the docs pages) the way h11 draws its state diagrams from its
transition tables.

Checked at compile time, with a :class:`ModelError` that names the program,
the step and the label:

* every declared target is a label of the program, or DONE;
* a step whose next label is computed (``next`` is a function, or the
  effect returns it) declares ``to=`` -- unless the model is exempt, below;
* a label that the effect or the ``next`` function returns *literally*
  (``return "put"``, ``return DONE``, ``"a" if x else "b"``) is declared.
  This reads the function's source, so it is best effort; the run-time check
  is the guarantee.

Checked at run time, by the compiled steps (one frozenset membership test,
only on the paths where the next label is computed): a step that goes to a
label outside its declared set raises :func:`went_elsewhere`'s ModelError.
So the graph a tool draws is a superset of every move the checker explores.

Decisions, and why
------------------
* The exemption is per model and temporary. ``Model.graph_checked = False``
  lets a model compile with undeclared computed steps (their graph entry says
  ``declared=False``, and at run time they may go to any label, as before
  declarations existed). :data:`GRAPH_PENDING` names catalog models whose
  declarations are still being written; it should be empty.
* Targets keep declaration order (``next`` first, then ``to`` in order), so a
  drawing reads like the source.
* The literal-return check reads a function, not a step: a helper shared by
  two steps must have every label it returns literally declared on both.
  That is deliberate -- a label the helper can return is a move the drawing
  should show -- and it costs a model nothing it would not declare anyway.

Open questions
--------------
* The literal-return check cannot see labels built at run time (``return
  f"slot {k}"``) or returned by a helper (``return sigterm(s, me)``). Such
  labels still meet the run-time check.
* A declared target that no run ever takes is not reported: too wide a
  declaration is sound but draws a move that cannot happen. The explorer
  could count the edges it takes and list the unused ones.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from .program import DONE, Program, StepSpec
from .specialize import function_node
from .violations import ModelError

__all__ = ["GRAPH_PENDING", "GraphStep", "format_graph", "did_you_mean", "graph_json", "object_name", "program_graph",
           "went_elsewhere"]

#: Catalog models (by name; models that extend them too) that may still compile with undeclared
#: computed steps, until their owners add ``to=``. Keep this empty.
GRAPH_PENDING: frozenset[str] = frozenset()


@dataclass(frozen=True)
class GraphStep:
    """One step of a program, as a node of its graph."""

    #: The step's label (its program counter).
    label: str
    #: The primitive kind: "step", "external", "acquire", "release", "wait", "notify_one", ...
    kind: str
    #: Every label the step may go to (DONE included), in declaration order: ``next``, then ``to``.
    targets: tuple[str, ...]
    #: The primitives it acts on: a mutex, a condvar (and the wait's mutex), a semaphore, a flag.
    objects: tuple[str, ...] = ()
    #: Branch names of a nondeterministic step (empty for one outcome).
    branches: tuple[str, ...] = ()
    #: The external action an ``external`` step runs outside the model.
    action: str | None = None
    #: False only for a computed step of an exempt model that declares no targets (``targets`` empty).
    declared: bool = True


def went_elsewhere(role: str, label: str, target: Any, allowed: frozenset[str] | tuple[str, ...]) -> ModelError:
    """The error a step raises when it goes to a label outside its declared set."""
    declared = ", ".join(repr(t) for t in sorted(allowed))
    return ModelError(f"program {role!r}, step {label!r} went to {target!r}, "
                      f"which is not among the labels it declares: {declared}")


def _unknown(role: str, label: str, target: str, where: str, labels: set[str]) -> ModelError:
    return ModelError(f"program {role!r}: step {label!r} goes to unknown step {target!r} ({where})"
                      + did_you_mean(target, [*labels, DONE]))


def did_you_mean(name: Any, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` naming the known names closest to ``name``, or ``""`` when none is close."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _declared_targets(role: str, spec: StepSpec, labels: set[str], strict: bool) -> tuple[str, ...] | None:
    """``next`` and ``to`` of ``spec``, validated; None for an undeclared computed step of an exempt model."""
    nxt = spec.next
    if nxt is None and not (spec.kind in ("step", "external") and spec.fn is not None):
        raise ModelError(f"program {role!r}: step {spec.label!r} has no next step")
    if nxt is not None and not isinstance(nxt, str) and not callable(nxt):
        raise ModelError(f"program {role!r}: step {spec.label!r} has a bad next {nxt!r}")
    if isinstance(nxt, str) and nxt != DONE and nxt not in labels:
        raise _unknown(role, spec.label, nxt, "its next", labels)
    for t in spec.to or ():
        if t != DONE and t not in labels:
            raise _unknown(role, spec.label, t, "declared in to=", labels)
    alt = () if spec.alt is None else (spec.alt,)
    for t in alt:
        if t != DONE and t not in labels:
            raise _unknown(role, spec.label, t, "busy=" if spec.kind == "try_acquire" else "timeout=", labels)
    if isinstance(nxt, str):
        return tuple(dict.fromkeys((nxt, *(spec.to or ()), *alt)))
    if spec.to:
        return tuple(dict.fromkeys((*spec.to, *alt)))
    if not strict:
        return None
    how = "its next is a function" if nxt is not None else "its effect returns the next label"
    raise ModelError(f"program {role!r}: step {spec.label!r} picks its next step at run time ({how}), so it "
                     f"must declare every label it may go to: to=[...] (labels of {role!r} or DONE)")


def program_graph(program: Program, strict: bool = True) -> dict[str, GraphStep]:
    """Every step of ``program`` as a :class:`GraphStep`, in declaration order (see the module doc)."""
    role = program.role
    labels = set(program.specs)
    out: dict[str, GraphStep] = {}
    for spec in program.specs.values():
        targets = _declared_targets(role, spec, labels, strict)
        if targets is not None:
            for fn in (spec.fn, spec.next if callable(spec.next) else None):
                for lit in literal_returns(fn):
                    if lit not in targets:
                        raise ModelError(f"program {role!r}: step {spec.label!r} may go to {lit!r} (returned by "
                                         f"{_name(fn)}), which is not among the labels it declares: "
                                         f"{', '.join(repr(t) for t in targets)}; add it to to=")
        objects = tuple(object_name(o) for o in (spec.obj, spec.obj2) if o is not None)
        out[spec.label] = GraphStep(spec.label, spec.kind, targets or (), objects, spec.branches or (),
                                    spec.action, targets is not None)
    return out


def object_name(obj: Any) -> str:
    """How a step names the primitive it acts on: its name, or for a mutex chosen by expression, the chooser."""
    if isinstance(obj, str):
        return obj
    return f"chosen by {_name(obj)}"


def _name(fn: Callable) -> str:
    name = getattr(fn, "__name__", "?")
    return "a lambda" if name == "<lambda>" else f"{name}()"


# --------------------------------------------------------------------------
# Labels a function returns literally, read from its source.
# --------------------------------------------------------------------------


def literal_returns(fn: Callable | None) -> set[str]:
    """The labels ``fn`` returns as literals (or as a global/closure constant such as DONE).

    Empty when the source cannot be read; returns it computes are not seen.
    """
    if fn is None:
        return set()
    node = function_node(fn)
    if node is None:
        return set()
    consts = _constants(fn)
    if isinstance(node, ast.Lambda):
        return _labels_of(node.body, consts)
    out: set[str] = set()
    for ret in _own_returns(node):
        if ret.value is not None:
            out |= _labels_of(ret.value, consts)
    return out


def _constants(fn: Callable) -> dict[str, Any]:
    """Names ``fn`` reads that are not its locals, with their values (closure first, then globals)."""
    code = fn.__code__
    env = {k: v for k, v in getattr(fn, "__globals__", {}).items() if isinstance(v, str)}
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            env[name] = cell.cell_contents
        except ValueError:
            pass
    local = set(code.co_varnames)
    return {k: v for k, v in env.items() if k not in local}


def _own_returns(node: ast.AST):
    """The ``return`` statements of a function body, not those of functions nested in it."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(n, ast.Return):
            yield n
        stack.extend(ast.iter_child_nodes(n))


def _labels_of(expr: ast.AST, consts: Mapping[str, Any]) -> set[str]:
    if isinstance(expr, ast.Constant):
        return {expr.value} if isinstance(expr.value, str) else set()
    if isinstance(expr, ast.Name):
        value = consts.get(expr.id)
        return {value} if isinstance(value, str) else set()
    if isinstance(expr, ast.IfExp):
        return _labels_of(expr.body, consts) | _labels_of(expr.orelse, consts)
    if isinstance(expr, ast.BoolOp):
        return set().union(*(_labels_of(v, consts) for v in expr.values))
    return set()


# --------------------------------------------------------------------------
# Drawing: text and JSON, for the CLI, explain and the docs.
# --------------------------------------------------------------------------


def _kind_text(step: GraphStep) -> str:
    text = " ".join([step.kind, *step.objects[:1]])
    if len(step.objects) > 1:
        text += " (" + ", ".join(step.objects[1:]) + ")"
    if step.action:
        text += f" [{step.action}]"
    if step.branches and step.branches != ("ok",):
        text += " {" + "|".join(step.branches) + "}"
    return text


def format_graph(graph: Mapping[str, Mapping[str, GraphStep]],
                 threads: Mapping[str, list[str]] | None = None, indent: str = "") -> str:
    """Each program's graph as a small text table: ``label  kind  -> targets``, one step a line.

    ``threads`` (role -> thread names) adds who runs each program. The first
    step of a program is where its threads start.
    """
    out: list[str] = []
    every = [s for steps in graph.values() for s in steps.values()]
    lw = max((len(s.label) for s in every), default=0)
    kw = max((len(_kind_text(s)) for s in every), default=0)
    for role, steps in graph.items():
        who = (threads or {}).get(role)
        out.append(f"{indent}{role}" + (f" (threads: {', '.join(who)})" if who else ""))
        for s in steps.values():
            to = ", ".join(s.targets) if s.declared else "? (not declared)"
            out.append(f"{indent}  {s.label.ljust(lw)}  {_kind_text(s).ljust(kw)}  -> {to}")
    return "\n".join(out)


def graph_json(graph: Mapping[str, Mapping[str, GraphStep]]) -> dict[str, Any]:
    """``{role: {label: {"kind", "targets", ...}}}``, JSON-ready (targets None when not declared)."""
    out: dict[str, Any] = {}
    for role, steps in graph.items():
        out[role] = {}
        for s in steps.values():
            d: dict[str, Any] = {"kind": s.kind, "targets": list(s.targets) if s.declared else None}
            if s.objects:
                d["objects"] = list(s.objects)
            if s.branches:
                d["branches"] = list(s.branches)
            if s.action:
                d["action"] = s.action
            out[role][s.label] = d
    return out
