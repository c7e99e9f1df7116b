"""Compiling a checked machine to straight-line transitions: the live runtime's fast path, and the checker's.

Theory of operation
-------------------
The checker explores a compiled :class:`Machine`: per thread, per program
counter, a ``fire`` function that copies the state tuple into a list, calls
the model's guard and effect (specialized to constant indices), resolves the
next label and builds a tuple. That generic path is what makes every model
checkable; it is also most of what a live step costs (docs/performance.md,
profile lines P5-P8). :func:`compile_transitions` writes, for one machine,
a Python module with one function per (thread, step, branch):

* **straight-line code over local fields**: the fields the step touches are
  read into locals (``S__slots = state[0]``), the model's guard and effect
  are *inlined* there (``inline.py``: ``s.slots`` is ``S__slots``, the
  branch a constant, closure flags folded, dead branches dropped), and the
  successor is one tuple display of those locals: no list copy, no view, no
  call per user function;
* **invariants folded in**: after the successor is built, each invariant
  whose fields the branch may write is checked inline; one that fails
  returns :class:`Broken` (the successor, and which invariant);
* **wake sets from footprints**: each branch's write set is read off the
  generated code (the field locals it assigns), each step's guard read set
  likewise, and :attr:`GeneratedStep.wake` lists, per branch, the other
  threads' steps whose guard reads a field the branch may write: the only
  parked threads that branch may have enabled.

The protocol is not written twice: the module is generated from the model's
own functions, at the configuration the machine was compiled for, every time.
Steps it cannot inline exactly (a primitive, or a function ``inline.py``
refuses) are not generated: the runtime drives them with the machine's
``fire``, and :attr:`CompiledMachine.refused` says which and why.

Why trust it: translation validation
------------------------------------
:meth:`CompiledMachine.successors` is the generated twin of ``Machine.successors``. ``tests/test_codegen.py``
walks every reachable state of every configuration of the prefetcher's sweeps (runs and autotune included;
the big ones marked slow) and asserts, state by state, the same enabled steps, successors, violations, guards
and invariant verdicts; and that mutating the generator (dropping a guard clause, a write, a folded
invariant) makes that test fail.

The state stays a tuple: a mutable layout would save its allocation, but the runtime hands snapshots to
external actions, the consumer reads fields outside the lock, and the record keeps every state, all relying
on a state never changing once stored.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .builder import Builder
from .gensource import filename_for as _filename, register
from .graph import went_elsewhere
from .machine import Machine
from .program import DONE
from .violations import ModelError, StepViolation, exited, truth
from .predicate_ast import truth_test
from .inline import Binder, NotInlinable, clone, fold, inline, simple_constant, tail_returns, terminates

__all__ = ["Broken", "CompiledMachine", "GeneratedStep", "compile_transitions"]

#: The step kinds whose guard and effect are the model's own functions: the ones generated.
USER_KINDS = ("step", "external")


class Broken:
    """A generated transition's successor that breaks a folded invariant: the state, and which invariant."""

    __slots__ = ("kind", "message", "state")

    def __init__(self, kind: str, message: str, state: tuple):
        self.kind, self.message, self.state = kind, message, state

    def __repr__(self) -> str:
        return f"Broken({self.kind!r}, {self.message!r})"


@dataclass(frozen=True)
class GeneratedStep:
    """One step of one thread, generated: what the runtime calls instead of the machine's ``fire``."""

    #: The step's label (its program counter) and branch names (``("",)`` for a step without branches).
    label: str
    branches: tuple[str, ...]
    #: Per branch: ``state -> successor`` (a tuple, a StepViolation, a :class:`Broken`), or None when disabled.
    ones: tuple[Callable[[tuple], Any], ...]
    #: Per branch: ``state -> truthy`` when its guard holds (nothing built).
    enabled: tuple[Callable[[tuple], Any], ...]
    #: ``state -> (branch index, successor)`` of the first enabled branch, or None.
    first: Callable[[tuple], Any]
    #: Per branch: the shared fields (indices) it may write.
    writes: tuple[frozenset, ...]
    #: The shared fields its guards read: a parked thread here needs testing only when one of them changed.
    reads: frozenset
    #: Per branch: ``((thread, program counters), ...)``: the other threads' steps whose guard reads a
    #: field this branch may write -- the only parked threads it may have enabled.
    wake: tuple[tuple[tuple[int, frozenset], ...], ...]


@dataclass(frozen=True)
class CompiledMachine:
    """A machine's generated transitions: the module's source, its steps, and what it could not generate."""

    machine: Machine
    #: The generated module's source (in ``linecache`` under :attr:`filename` while this lives: gensource.py).
    source: str
    filename: str
    #: Per thread: program counter -> :class:`GeneratedStep`, for every step generated.
    steps: tuple[Mapping[str, GeneratedStep], ...]
    #: ``(thread, label, reason)`` for every step left to the machine's ``fire``.
    refused: tuple[tuple[str, str, str], ...]
    #: Whether every invariant is checked inside the transitions (else the runtime checks them per step).
    invariants_folded: bool

    def successors(self, state: tuple) -> list:
        """``Machine.successors``, through the generated transitions (a machine ``fire`` for refused steps).

        A successor that breaks a folded invariant comes as a :class:`Broken`.
        """
        m, out = self.machine, []
        pcs = m.pc_index
        for t, table in enumerate(self.steps):
            pc = state[pcs[t]]
            g = table.get(pc)
            if g is None:
                fire = m.tables[t].get(pc)
                if fire is not None:
                    out.extend(((t, b), n) for b, n in fire(state))
                continue
            for bi, one in enumerate(g.ones):
                nxt = one(state)
                if nxt is not None:
                    out.append(((t, bi), nxt))
        return out


def _slug(text: str) -> str:
    return re.sub(r"\W+", "_", text).strip("_") or "step"


def _built(model: Any, config: Mapping[str, Any]) -> Builder:
    """The model built again at ``config``: the same functions the machine's steps were compiled from."""
    b = Builder({k: config[k] for k in model.SETTINGS}, None, None)  # the machine exists: its size passed
    kwargs = {k: v for k, v in config.items() if k not in model.SETTINGS}  # not inside the with: 3.13 (backedges.py)
    with exited(f"model {model.name or model.__name__!r}: its build"):
        model().build(b, **kwargs)
    return b


class _Generator:
    """Writes one module for one machine (see the module doc); :func:`compile_transitions` drives it."""

    def __init__(self, machine: Machine, model: Any):
        self.m = machine
        self.b = _built(model, machine.config)
        if tuple(t.name for t in self.b.threads) != machine.thread_names:
            raise ValueError(f"{model.__name__} at {machine.config} does not build the machine's threads")
        self.binder = Binder()
        self.binder.namespace.update(StepViolation=StepViolation, Broken=Broken)
        self.defs: list[str] = []
        self.nfn = 0
        self.invariants = self._invariants()
        self._step_names: dict[tuple[int, str], str] = {}

    def step_name(self, t: int, label: str) -> str:
        """Thread ``t``'s step ``label`` in a function name: its slug, unique within the thread ("put item" and
        "put-item" shared one: the second's functions replaced the first's, and the engine ran wrong code)."""
        if (t, label) not in self._step_names:
            taken = {n for (u, _l), n in self._step_names.items() if u == t}
            self._step_names[t, label] = next(n for k in range(1, len(taken) + 2) if (
                n := _slug(label) + (f"_{k}" if k > 1 else "")) not in taken)
        return self._step_names[t, label]

    # -- pieces ----------------------------------------------------------------------------

    def _names(self, t: int) -> tuple[dict[str, str], dict[str, str]]:
        return ({n: f"S__{n}" for n in self.m.shared_index}, {n: f"M__{n}" for n in self.m.local_index[t]})

    def _inline(self, fn: Callable, t: int, nparams: int, branch: Any) -> Any:
        shared, local = self._names(t)
        self.nfn += 1
        return inline(fn, nparams=nparams, branch=branch, prefix=f"L{self.nfn}__", shared=shared, local=local,
                      constants={"name": self.m.thread_names[t], "index": t}, binder=self.binder,
                      index={"shared": self.m.shared_index, "local": self.m.local_index[t]})

    def _invariants(self) -> list[tuple[str, str, ast.expr, set[str]]] | None:
        """Each invariant as ``(name, kind, expression over field locals, fields read)``; None if one cannot be."""
        out = []
        shared = {n: f"S__{n}" for n in self.m.shared_index}
        for name, kind, pred in self.m.invariants:
            self.nfn += 1
            try:
                got = inline(pred, nparams=1, branch=None, prefix=f"I{self.nfn}__", shared=shared, local={},
                             constants={}, binder=self.binder, index={"shared": self.m.shared_index, "local": {}})
                body = tail_returns(got.body)
            except NotInlinable:
                return None
            if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
                return None
            out.append((name, kind, body[0].value, got.reads))
        return out

    # -- one transition --------------------------------------------------------------------

    def _guard_block(self, spec: Any, t: int, branch: Any, enabled_fn: bool) -> tuple[list[ast.stmt], set[str]]:
        """The guard, inlined: falls through when enabled; else ``return None`` (``return`` its value if
        ``enabled_fn``)."""
        if spec.guard is None:
            return [], set()
        g = self._inline(spec.guard, t, 2 if spec.branches is None else 3, branch)
        body = tail_returns(g.body)
        what = f"the guard of thread {self.m.thread_names[t]!r}'s step {spec.label!r}"
        return (_GuardReturns(enabled_fn, self.binder.namespace, self._truth(what)).rewrite(body),
                g.reads | g.writes)

    def _truth(self, what: str) -> Callable[[ast.expr], ast.expr]:
        """How a predicate's value is tested (``predicate_ast.truth_test``)."""
        return truth_test(self.binder.bind("truth", truth), self.binder.namespace, what)

    def _next_stmts(self, spec: Any, t: int, site: dict) -> list[ast.stmt]:
        """What ``N__`` becomes when the effect returns nothing: the fixed next, or the ``next`` function's label."""
        if isinstance(spec.next, str):
            return [_assign("N__", ast.Constant(spec.next))]
        if callable(spec.next):
            nx = self._inline(spec.next, t, 2, None)
            site["reads"] |= nx.reads
            body = tail_returns(nx.body)
            return _NextReturns(site).rewrite(body)
        return [ast.Raise(exc=_call(site["no_next"]), cause=None)]

    def _effect_block(self, spec: Any, t: int, branch: Any, site: dict) -> list[ast.stmt]:
        body: list[ast.stmt] = [ast.Return(value=None)]
        if spec.fn is not None:
            e = self._inline(spec.fn, t, 2 if spec.branches is None else 3, branch)
            site["reads"] |= e.reads
            body = tail_returns(e.body)
        return _EffectReturns(site, lambda: self._next_stmts(spec, t, site)).rewrite(body)

    def transition(self, t: int, spec: Any, bi: int, branch: Any) -> tuple[str, frozenset, frozenset]:
        """Write the function for thread ``t``'s step ``spec``, branch ``bi``; its name, writes and guard reads."""
        m = self.m
        role = m.thread_roles[t]
        gstep = m.graph[role][spec.label]
        allowed = frozenset(gstep.targets) if gstep.declared else frozenset(self.b.threads[t].program.specs) | {DONE}
        site = {"allowed": self.binder.bind(f"ALLOWED_{_slug(role)}_{_slug(spec.label)}", allowed),
                "allowed_set": allowed,
                "elsewhere": self.binder.bind(f"elsewhere_{_slug(role)}_{_slug(spec.label)}",
                                              _elsewhere(role, spec.label, allowed)),
                "no_next": self.binder.bind(f"no_next_{_slug(role)}_{_slug(spec.label)}",
                                            _no_next(role, spec.label)),
                "reads": set(), "values": self.binder.namespace}
        guard, greads = self._guard_block(spec, t, branch, enabled_fn=False)
        effect = self._effect_block(spec, t, branch, site)
        try_ = ast.Try(body=effect, handlers=[ast.ExceptHandler(
            type=ast.Name(id="StepViolation", ctx=ast.Load()), name="v__",
            body=[ast.Return(value=ast.Name(id="v__", ctx=ast.Load()))])], orelse=[], finalbody=[])
        stmts = fold(guard + [try_], self.binder.namespace)
        writes = _stored(stmts, "S__")
        if not terminates(stmts):  # else every path returns before a successor exists (never enabled)
            stmts += self._successor(t, writes, _mentioned(stmts))
        name = f"t{t}_{self.step_name(t, spec.label)}_{bi}"
        self._emit(name, t, stmts)
        si = m.shared_index
        return name, frozenset(si[f] for f in writes), frozenset(si[f] for f in greads)

    def _successor(self, t: int, writes: set[str], mentioned: set[str]) -> list[ast.stmt]:
        """``nxt__ = (...)``, the folded invariants the branch may break, ``return nxt__``.

        A field the branch's code never mentions is copied straight from ``state`` into the successor,
        not read into a local first: a branch reads only what it uses."""
        m = self.m
        fields: list[ast.expr] = []
        by_index = {i: f"S__{n}" for n, i in m.shared_index.items()}
        by_index.update({i: f"M__{n}" for n, i in m.local_index[t].items()})
        for i in range(len(m.init)):
            if i == m.pc_index[t]:
                fields.append(ast.Name(id="N__", ctx=ast.Load()))
            elif i in by_index and by_index[i] in mentioned:
                fields.append(ast.Name(id=by_index[i], ctx=ast.Load()))  # loaded or written: see _emit
            else:
                fields.append(_subscript(i))
        out: list[ast.stmt] = [_assign("nxt__", ast.Tuple(elts=fields, ctx=ast.Load()))]
        for name, kind, expr, reads in self.invariants or ():
            if reads & writes:
                msg = f"invariant {name!r} fails"
                out.append(ast.If(test=ast.UnaryOp(op=ast.Not(), operand=self._truth(f"invariant {name!r}")(
                    clone(expr))), body=[ast.Return(
                    value=_call("Broken", ast.Constant(kind), ast.Constant(msg), ast.Name(id="nxt__",
                                                                                          ctx=ast.Load())))],
                    orelse=[]))
        out.append(ast.Return(value=ast.Name(id="nxt__", ctx=ast.Load())))
        return out

    def enabled(self, t: int, spec: Any, bi: int, branch: Any) -> str:
        """Write thread ``t``'s guard of ``spec``, branch ``bi``, alone: ``state -> truthy``."""
        name = f"e{t}_{self.step_name(t, spec.label)}_{bi}"
        guard, _reads = self._guard_block(spec, t, branch, enabled_fn=True)
        stmts = fold(guard, self.binder.namespace) if guard else []
        if not stmts or not terminates(stmts):
            stmts = stmts + [ast.Return(value=ast.Constant(True))]
        self._emit(name, t, stmts)
        return name

    #: Write the successor tuples as text (``_tuple_text``) instead of walking and unparsing them; False is
    #: the plain path, which tests/test_codegen.py checks gives the same module text.
    tuples_as_text = True

    def _emit(self, name: str, t: int, stmts: list[ast.stmt]) -> None:
        """The function ``name(state)``: every field local it mentions read first, then ``stmts``."""
        m = self.m
        holes = _tuple_holes(stmts) if self.tuples_as_text else []
        used = _mentioned(stmts)
        for _hole, _text, names in holes:
            used |= names
        loads: list[ast.stmt] = []
        for n, i in m.shared_index.items():
            if f"S__{n}" in used:
                loads.append(_assign(f"S__{n}", _subscript(i)))
        for n, i in m.local_index[t].items():
            if f"M__{n}" in used:
                loads.append(_assign(f"M__{n}", _subscript(i)))
        fn = ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=[ast.arg(arg="state")], vararg=None,
                                                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
                             body=loads + stmts, decorator_list=[], returns=None, lineno=1)
        if "type_params" in ast.FunctionDef._fields:  # Python 3.12+
            fn.type_params = []
        for n in ast.walk(fn):  # unparse reads a statement's line (for type comments); the text has its own
            if isinstance(n, ast.stmt) and not hasattr(n, "lineno"):
                n.lineno = 1
        text = ast.unparse(fn)
        for hole, tup, _names in holes:
            if text.count(hole.id) != 1:
                raise AssertionError(f"{name}: the successor's placeholder {hole.id} appears "
                                     f"{text.count(hole.id)} times")
            text = text.replace(hole.id, tup)
        self.defs.append(text)  # compiled from this text, so its lines are the module's own


def compile_transitions(machine: Machine, model: Any) -> CompiledMachine:
    """Generate, compile and load the transitions of ``machine``, compiled from ``model`` at ``machine.config``.

    ``model`` is the Model class: its ``build`` is run again at the machine's
    config to reach the very functions the machine's steps call. Steps that
    cannot be generated exactly are listed in ``refused`` and left to the
    machine's ``fire``.
    """
    g = _Generator(machine, model)
    plan: dict[tuple[int, str], tuple[tuple[str, ...], list[str], list[str], list[frozenset], set]] = {}
    refused: list[tuple[str, str, str]] = []
    for t, th in enumerate(g.b.threads):
        for spec in th.program.specs.values():
            info = machine.infos[t].get(spec.label)
            if info is None or info.branches != tuple(spec.branches or ()) or info.kind != spec.kind:
                raise ValueError(f"{model.__name__}: step {spec.label!r} of {th.name} is not the machine's")
            if spec.kind not in USER_KINDS:
                refused.append((th.name, spec.label, f"a {spec.kind} step: a primitive, driven by the machine"))
                continue
            mark = len(g.defs)
            try:
                ones, ens, writes, reads = [], [], [], set()
                for bi, branch in enumerate(spec.branches or (None,)):
                    name, w, r = g.transition(t, spec, bi, branch)
                    ones.append(name)
                    writes.append(w)
                    reads |= r
                    ens.append(g.enabled(t, spec, bi, branch))
            except NotInlinable as e:
                del g.defs[mark:]
                refused.append((th.name, spec.label, str(e)))
                continue
            plan[(t, spec.label)] = (spec.branches or ("",), ones, ens, writes, reads)
    for (t, label), (_b, ones, _e, _w, _r) in plan.items():
        g.defs.append(_first_source(f"f{t}_{g.step_name(t, label)}", ones))
    digest = f"{abs(hash((machine.name, tuple(sorted(machine.config.items())), len(g.defs)))):x}"
    filename = _filename(f"{_slug(machine.name)}-{digest}")
    source = (f"# Generated by safeprefetch._dsl.codegen from model {machine.name!r} at {machine.config!r}.\n"
              "# One function per (thread, step, branch); see codegen.py. Regenerated, never edited.\n\n"
              + "\n\n\n".join(g.defs) + "\n")
    ns = g.binder.namespace
    exec(compile(source, filename, "exec"), ns)  # noqa: S102 - our own generated code
    steps: list[dict[str, GeneratedStep]] = [{} for _ in machine.thread_names]
    for (t, label), (branches, ones, ens, writes, reads) in plan.items():
        steps[t][label] = GeneratedStep(label, tuple(branches), tuple(ns[n] for n in ones),
                                        tuple(ns[n] for n in ens), ns[f"f{t}_{g.step_name(t, label)}"], tuple(writes),
                                        frozenset(reads), ())
    steps = _with_wake_sets(machine, steps)
    compiled = CompiledMachine(machine, source, filename, tuple(steps), tuple(refused), g.invariants is not None)
    register(filename, source, compiled)
    return compiled


def _first_source(name: str, ones: list[str]) -> str:
    """``name(state)``: ``(branch index, successor)`` of the first enabled branch, or None."""
    lines = [f"def {name}(state):"]
    for bi, one in enumerate(ones):
        lines += [f"    nxt__ = {one}(state)", "    if nxt__ is not None:", f"        return {bi}, nxt__"]
    lines.append("    return None")
    return "\n".join(lines)


def _with_wake_sets(machine: Machine, steps: list[dict[str, GeneratedStep]]) -> list[dict[str, GeneratedStep]]:
    """Each step with, per branch, the other threads' steps whose guard reads a field the branch may write.

    A step the machine drives itself counts by its footprint's reads (all of
    them when its footprint is unknown); a program counter with no step of
    its own (asleep on a condvar) is never enabled by a shared write.
    """
    def reads_of(u: int, pc: str) -> frozenset | None:
        g = steps[u].get(pc)
        if g is not None:
            return g.reads
        fp = machine.infos[u][pc].footprint
        return None if fp is None else fp[0]

    candidates = [[pc for pc in machine.tables[u]] for u in range(len(steps))]
    out: list[dict[str, GeneratedStep]] = []
    for t, table in enumerate(steps):
        new = {}
        for pc, g in table.items():
            wake = []
            for w in g.writes:
                per = []
                for u, pcs in enumerate(candidates):
                    if u == t:
                        continue
                    hit = frozenset(p for p in pcs if (r := reads_of(u, p)) is None or not r.isdisjoint(w))
                    if hit:
                        per.append((u, hit))
                wake.append(tuple(per))
            new[pc] = GeneratedStep(g.label, g.branches, g.ones, g.enabled, g.first, g.writes, g.reads, tuple(wake))
        out.append(new)
    return out


# -- return rewriting -------------------------------------------------------------------------------


class _Tails:
    """Rewrite each tail ``return`` of a block (see ``inline.tail_returns``) by :meth:`at`."""

    def rewrite(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for st in stmts:
            if isinstance(st, ast.Return):
                out.extend(self.at(st.value))
            elif isinstance(st, ast.If):
                st.body = self.rewrite(st.body) or [ast.Pass()]
                st.orelse = self.rewrite(st.orelse)
                out.append(st)
            else:
                out.append(st)
        return out

    def at(self, value: ast.expr | None) -> list[ast.stmt]:  # pragma: no cover - abstract
        raise NotImplementedError


def _known(value: ast.expr | None, values: Mapping[str, Any]) -> ast.expr | None:
    """``value`` as a literal when the generator knows it: a constant, or a name bound to a simple constant
    (which the folder leaves a name where identity could show; a label or a guard's truth cannot show it)."""
    if isinstance(value, ast.Name) and value.id in values and simple_constant(values[value.id]):
        return ast.Constant(values[value.id])
    return value


class _GuardReturns(_Tails):
    """A guard's ``return E``: fall through when E holds, else ``return None`` (or ``return E``: the test alone)."""

    def __init__(self, value: bool, values: Mapping[str, Any], test: Callable[[ast.expr], ast.expr]):
        self.value, self.values, self.test = value, values, test

    def at(self, value: ast.expr | None) -> list[ast.stmt]:
        if not self.value:
            value = _known(value, self.values)
        if self.value:
            return [ast.Return(value=self.test(value) if value is not None else ast.Constant(None))]
        if value is None or (isinstance(value, ast.Constant) and not value.value):
            return [ast.Return(value=ast.Constant(None))]
        if isinstance(value, ast.Constant):
            return []  # a truthy constant: enabled
        return [ast.If(test=ast.UnaryOp(op=ast.Not(), operand=self.test(value)),
                       body=[ast.Return(value=ast.Constant(None))], orelse=[])]


class _EffectReturns(_Tails):
    """An effect's ``return E``: ``N__`` becomes the label E names, checked as the compiled step checks it."""

    def __init__(self, site: dict, next_stmts: Callable[[], list[ast.stmt]]):
        self.site, self.next_stmts = site, next_stmts

    def at(self, value: ast.expr | None) -> list[ast.stmt]:
        value = _known(value, self.site["values"])
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            return self.next_stmts()
        if isinstance(value, ast.Constant):
            if isinstance(value.value, str) and value.value in self.site_allowed():
                return [_assign("N__", value)]
            return [ast.Raise(exc=_call(self.site["elsewhere"], value), cause=None)]
        n = ast.Name(id="N__", ctx=ast.Load())
        check = ast.If(test=ast.Compare(left=n, ops=[ast.NotIn()], comparators=[
            ast.Name(id=self.site["allowed"], ctx=ast.Load())]), body=[ast.Raise(
                exc=_call(self.site["elsewhere"], ast.Name(id="N__", ctx=ast.Load())), cause=None)], orelse=[])
        return [_assign("N__", value), ast.If(test=ast.Compare(left=ast.Name(id="N__", ctx=ast.Load()),
                                                               ops=[ast.Is()], comparators=[ast.Constant(None)]),
                                              body=self.next_stmts(), orelse=[check])]

    def site_allowed(self) -> frozenset:
        return self.site["allowed_set"]


class _NextReturns(_Tails):
    """A ``next`` function's ``return E``: ``N__ = E``, which must be a declared target."""

    def __init__(self, site: dict):
        self.site = site

    def at(self, value: ast.expr | None) -> list[ast.stmt]:
        v = value if value is not None else ast.Constant(None)
        return [_assign("N__", v), ast.If(
            test=ast.Compare(left=ast.Name(id="N__", ctx=ast.Load()), ops=[ast.NotIn()],
                             comparators=[ast.Name(id=self.site["allowed"], ctx=ast.Load())]),
            body=[ast.Raise(exc=_call(self.site["elsewhere"], ast.Name(id="N__", ctx=ast.Load())), cause=None)],
            orelse=[])]


# -- small AST helpers --------------------------------------------------------------------------------


def _assign(name: str, value: ast.expr) -> ast.stmt:
    return ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value)


def _subscript(i: int) -> ast.expr:
    return ast.Subscript(value=ast.Name(id="state", ctx=ast.Load()), slice=ast.Constant(i), ctx=ast.Load())


def _call(fn: str, *args: ast.expr) -> ast.expr:
    return ast.Call(func=ast.Name(id=fn, ctx=ast.Load()), args=list(args), keywords=[])


def _stored(stmts: list[ast.stmt], prefix: str) -> set[str]:
    """The field names whose locals ``stmts`` assign (``S__x`` -> ``x``)."""
    out = set()
    for n in ast.walk(ast.Module(body=stmts, type_ignores=[])):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load) and n.id.startswith(prefix):
            out.add(n.id[len(prefix):])
    return out


def _tuple_holes(stmts: list[ast.stmt]) -> list[tuple[ast.Name, str, set[str]]]:
    """Take each top-level ``nxt__ = (...)`` successor tuple out of ``stmts``, as text.

    A successor lists every field of the state, so with many threads each
    transition's tuple is long and every transition has one: walking and
    unparsing them made generation grow with the square of the workers. The
    elements are names and ``state[i]`` only, whose text is plain; each tuple
    is replaced by a placeholder name, returned with the tuple's text (as
    ``ast.unparse`` writes it) and the names it mentions, and the caller puts
    the text back in place of the placeholder.
    """
    holes = []
    for st in stmts:
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                and st.targets[0].id == "nxt__" and isinstance(st.value, ast.Tuple)):
            continue
        parts, names = [], set()
        for e in st.value.elts:
            if isinstance(e, ast.Name):
                parts.append(e.id)
                names.add(e.id)
            elif (isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name) and e.value.id == "state"
                  and isinstance(e.slice, ast.Constant) and type(e.slice.value) is int and e.slice.value >= 0):
                parts.append(f"state[{e.slice.value}]")
            else:
                break
        else:
            hole = ast.Name(id=f"SUCCESSOR{len(holes)}__", ctx=ast.Load())
            text = f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"
            st.value = hole
            holes.append((hole, text, names))
    return holes


def _mentioned(stmts: list[ast.stmt]) -> set[str]:
    return {n.id for n in ast.walk(ast.Module(body=stmts, type_ignores=[])) if isinstance(n, ast.Name)}


def _elsewhere(role: str, label: str, allowed: frozenset) -> Callable[[Any], ModelError]:
    def elsewhere(target: Any) -> ModelError:
        return went_elsewhere(role, label, target, allowed)
    return elsewhere


def _no_next(role: str, label: str) -> Callable[[], ModelError]:
    def no_next() -> ModelError:
        return ModelError(f"program {role!r}: step {label!r} gave no next step")
    return no_next
