"""The playground's data: a model's state graph, exported to JSON for a page to walk.

What it guarantees
------------------
:func:`export_graph` explores a compiled machine with the checker's own
expansion (:class:`~.._check.expand.Expander`, no reduction: a learner sees
every thread, not an orbit's representative) and writes down everything a
static page needs to let a person be the scheduler without running Python:

* every state, as the values of its named fields (``fields`` names them, in
  ``machine.describe`` order), with each field also shown the way the trace
  table shows it (:func:`~.._check.trace.format_value`:
  a mutex's owner by name, a condvar's queue as thread names);
* where each thread stands in its program (its step label, and a note for a
  waiting thread: asleep, woken), and why a thread that cannot move cannot
  (:func:`~.plaintext.blocked_reason`, the words ``play`` uses);
* every enabled step, in the scheduler's canonical order, with its thread,
  its name as a trace names it (:func:`~.._check.replay.choice_step`), its
  successor (a state number), or the violation the step raises;
* every state's verdict as far as the state decides it, from the checker's
  classifier (:func:`~.play.play_status`, which calls :mod:`.._check.verdict`):
  running, done, an invariant broken, a failed end-of-run check;
* for a stuck state, the part of the verdict that needs history: whether a
  lost wakeup or a plain deadlock depends on the path (see
  :func:`~.._check.verdict.classify_hang`), so the export carries the facts
  that test needs -- which wait predicates hold in each state, and which
  steps notify a sleeping waiter (``verdict.woke_a_sleeper``) -- and the page applies the same rule to
  the learner's own path;
* for a model with progress steps, which steps are progress and which the
  priority policy holds back, so the page can tell a starvation cycle the
  learner closes by hand;
* the checker's verdict and shortest counterexample (``check``), as
  ``(thread, branch)`` choices the page can animate.

Bounded excerpts
----------------
A page holds at most :data:`MAX_STATES` states. A model with more gets the
breadth-first excerpt: the first ``MAX_STATES`` states in BFS order (so
every state within some number of steps of the start), plus every state on
the checker's counterexample, so "show me" always plays to its end. A step
that leaves the excerpt has successor ``null``; the page says the excerpt
ends there and points to ``python -m safeprefetch play``. ``complete`` says
which case a file is. Every catalog model at its declared configuration
fits whole (the largest has a few thousand states; ``tests/test_site_export.py``
checks them all with ``-m slow``, and the browser tests check each page
says nothing of an excerpt).

The format
----------
One JSON object per machine, ``"format": 1``; the keys are documented in
:func:`export_graph`. :func:`export_model` bundles, for one catalog model,
every combination of ``notify`` (fifo, any) and ``spurious`` (off, on), for
the model itself and for its fix at the same configuration
(:func:`~.fix.fix_report`), so the page switches between them offline.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Mapping

from .._check.expand import Expander
from .._check.lasso import by_priority
from .._check.explore import CheckResult, check
from .._check.result import json_value
from .._check.replay import choice_step, replay_choices
from .._check.trace import format_value
from .._check.verdict import HANG, terminal, woke_a_sleeper
from .._dsl.model import DONE, Machine, Model, StepViolation
from .._dsl.program import ASLEEP, WOKEN
from .fix import fix_report
from .modeldoc import model_doc
from .plaintext import blocked_reason
from .play import play_status

__all__ = ["FORMAT", "MAX_STATES", "SEMANTICS", "difficulty", "export_graph", "export_model", "variant_key"]

#: The version of the JSON layout; a page refuses a file of another version.
FORMAT = 1

#: States one exported graph may hold. A page keeps the whole graph in memory and a learner
#: clicks through it by hand; 5,000 states is about 2.5 MB of JSON (half a kilobyte a state),
#: about twice the largest catalog model at its declared configuration, and still loads in a
#: blink from a file.
MAX_STATES = 5000

#: The condvar settings a page can switch between, default first.
SEMANTICS = (("fifo", "off"), ("any", "off"), ("fifo", "on"), ("any", "on"))

#: Difficulty of a broken model, by the length of its shortest counterexample: a bug a
#: learner can find in a handful of clicks is easy; one that needs a long, precise
#: interleaving (two rounds of producer and consumers) is hard.
DIFFICULTY = ((6, "easy"), (15, "medium"))


def variant_key(design: str, notify: str, spurious: str) -> str:
    """The key of one exported machine in :func:`export_model`'s ``variants``: ``model fifo off``."""
    return f"{design} {notify} {spurious}"


def difficulty(result: CheckResult) -> str:
    """How hard a model's bug is to find by hand (see :data:`DIFFICULTY`); ``reference`` for a correct design."""
    if result.violation is None:
        return "reference"
    steps = len(result.trace)
    for bound, name in DIFFICULTY:
        if steps <= bound:
            return name
    return "hard"




#: How a pc says more than its program step: a thread waiting on a condvar (the compiler's
#: ASLEEP and WOKEN suffixes), or back from a timed wait.
_NOTES = ((ASLEEP, "asleep"), (WOKEN, "woken"), (" (timed out)", "timed out"))
#: The pc of a thread a model starts later (``spawn``): at no step yet, and not running for the
#: liveness check.
_NOT_STARTED = "(not started)"


def _places(machine: Machine, t: int) -> dict[str, dict[str, str]]:
    """Every pc of thread ``t``: the program step it stands at, and a note while it waits."""
    out = {DONE: {"step": DONE, "note": "done"}}
    for pc in machine.infos[t]:
        out[pc] = {"step": pc, "note": ""}
        if pc == _NOT_STARTED:
            out[pc] = {"step": "", "note": "not started"}
        for suffix, note in _NOTES:
            if pc.endswith(suffix):
                out[pc] = {"step": pc[: -len(suffix)], "note": note}
    return out


def _excerpt(machine: Machine, expander: Expander, max_states: int,
             must: list[tuple]) -> tuple[list[tuple], dict[tuple, int], bool]:
    """The states to export: BFS order up to ``max_states``, then ``must`` (the counterexample's)."""
    init = expander.root()
    index = {init: 0}
    order = [init]
    queue = deque([init])
    complete = True
    while queue:
        state = queue.popleft()
        if machine.invariant_violation(state):
            continue  # an error state: reported, never expanded (as the checker does)
        for _t, res in expander.expand(state)[0]:
            for _b, nxt in res:
                if nxt.__class__ is tuple and nxt not in index:
                    if len(order) >= max_states:
                        complete = False
                        continue
                    index[nxt] = len(order)
                    order.append(nxt)
                    queue.append(nxt)
    for state in must:
        if state.__class__ is tuple and state not in index:
            index[state] = len(order)
            order.append(state)
    return order, index, complete


def _hang_facts(machine: Machine, state: tuple) -> dict[str, Any]:
    """What a stuck state says about itself; the page finishes the verdict from the learner's path.

    The rule is :func:`~.._check.verdict.classify_hang`'s: a requested shutdown is a
    ``shutdown_hang``; else a stuck thread asleep on a condvar whose predicate holds, with
    no notify of that condvar since it began to hold, is a ``lost_wakeup``; else a
    ``deadlock``. ``tests/test_site_export.py`` checks these messages against
    ``classify_hang`` on every stuck state of the catalog.
    """
    stuck = [t for t in range(len(machine.thread_names)) if state[machine.pc_index[t]] != DONE]
    names = ", ".join(f"{machine.thread_names[t]} at {machine.pc(state, t)!r}" for t in stuck)
    if machine.shutdown_pred is not None and machine.shutdown_pred(machine.view(state)):
        return {"shutdown": f"shutdown was requested but threads never return: {names}"}
    lost = []
    for t in stuck:
        wait = machine.waits.get((t, machine.pc(state, t)))
        if wait is None or wait[1] is None or not wait[1](*machine.views(state, t)):
            continue
        who = machine.thread_names[t]
        lost.append({"thread": t, "cond": wait[0], "key": f"{t} {machine.pc(state, t)}",
                     "message": f"{who} sleeps on {wait[0]} although what it waits for already holds, "
                                f"and no notify follows (blocked: {names})"})
    return {"deadlock": f"all threads blocked: {names}", "lost": lost}


def _holds(machine: Machine, state: tuple) -> list[str]:
    """The wait predicates (``"thread pc"``) that hold in ``state``: the lost-wakeup test reads them."""
    out = []
    for (t, pc), (_cond, until) in machine.waits.items():
        if until is not None and until(*machine.views(state, t)):
            out.append(f"{t} {pc}")
    return out


def _move(machine: Machine, state: tuple, t: int, b: int, nxt: Any, index: Mapping[tuple, int],
          held: bool) -> dict[str, Any]:
    """One enabled step of ``state``: who, its name, where it goes, and the facts the page's rules read."""
    name = choice_step(machine, state, (t, b))
    info = machine.step_info(state, t)
    move: dict[str, Any] = {"thread": t, "branch": b, "step": name.step}
    if name.branch is not None:
        move["branch_name"] = name.branch
    if isinstance(nxt, StepViolation):
        status = play_status(machine, [state, nxt], [(t, b)])
        move["violation"] = {"kind": status.kind, "headline": status.headline, "message": status.detail}
    else:
        move["to"] = index.get(nxt)
    if info.kind in ("notify_one", "notify_all") and woke_a_sleeper(machine, state, nxt, info.obj):
        move["notifies"] = info.obj
    if machine.spurious_move(state, t, b):
        move["spurious"] = True
    if _is_progress(machine, info):
        move["progress"] = True
    if held:
        move["held"] = True
    return move


def _is_progress(machine: Machine, info: Any) -> bool:
    return info.pc in machine.progress_labels or info.label in machine.progress_labels


def _victims(machine: Machine) -> list[int]:
    """The threads that can starve: those with a progress step (a thread without one cannot be said to), in
    the order the checker names them (under strict priority the most important first, as its lasso does)."""
    victims = [t for t, infos in enumerate(machine.infos) if any(_is_progress(machine, i) for i in infos.values())]
    if machine.config.get("policy") == "priority":
        victims.sort(key=lambda t: -machine.priorities[t])
    return victims


def _held_threads(machine: Machine, state: tuple, moves: list) -> set[int]:
    """Threads the strict-priority policy does not let run in a state with ``moves`` (none when fair): the
    checker's rule (:func:`~safeprefetch._check.lasso.by_priority`), a sleeper's timeout or spurious wakeup
    neither held back nor holding others back."""
    if machine.config.get("policy") != "priority":
        return set()
    succ = [((t, b), n) for t, res in moves for b, n in res if n.__class__ is tuple]
    allowed = {t for (t, _b), _n in by_priority(machine, state, succ)} if succ else {t for t, _res in moves}
    return {t for t, _res in moves if t not in allowed}


def _state_record(machine: Machine, expander: Expander, state: tuple,
                  index: Mapping[tuple, int]) -> dict[str, Any]:
    """One exported state: fields, places, moves, and its verdict as far as the state decides it."""
    record: dict[str, Any] = {
        "values": [json_value(v) for v in state],
        "shown": [format_value(machine, i, v) for i, v in enumerate(state)],
        "holds": _holds(machine, state),
        "moves": [],
        "blocked": {},
        "status": None,
    }
    bad = machine.invariant_violation(state)
    if bad:
        record["status"] = {"kind": bad[0], "headline": f"invariant broken: {bad[0]}", "message": bad[1]}
        return record
    moves, stuck = expander.expand(state)
    held = _held_threads(machine, state, moves)
    record["moves"] = [_move(machine, state, t, b, nxt, index, t in held) for t, res in moves for b, nxt in res]
    movable = {m["thread"] for m in record["moves"] if not m.get("spurious")}
    for t, name in enumerate(machine.thread_names):
        if t in held:
            record["blocked"][name] = "a thread of higher priority is ready (strict-priority policy)"
        elif t not in movable and state[machine.pc_index[t]] != DONE:
            record["blocked"][name] = blocked_reason(machine, state, t)
    if stuck:
        end = terminal(machine, state)
        if end is HANG:
            record["status"] = {"hang": _hang_facts(machine, state)}
        else:
            status = play_status(machine, [state], [])
            record["status"] = {"kind": status.kind, "headline": status.headline, "message": status.detail}
    return record


def _checker(machine: Machine, result: CheckResult) -> dict[str, Any]:
    """The checker's verdict at this machine, and its counterexample as choices the page can play."""
    v = result.violation
    out: dict[str, Any] = {"verdict": result.verdict, "exhaustive": result.exhaustive, "states": result.states,
                           "message": v.message if v else "", "trace": [], "cycle_start": None}
    if v is not None:
        _states, choices = replay_choices(machine, v.trace)
        out["trace"] = [[t, b] for t, b in choices]
        out["steps"] = [s.to_json() for s in v.trace]
        out["cycle_start"] = v.cycle_start
    return out


def export_graph(machine: Machine, *, max_states: int = MAX_STATES,
                 result: CheckResult | None = None) -> dict[str, Any]:
    """The state graph of ``machine`` as one JSON-ready dict (a bounded excerpt past ``max_states``).

    Keys: ``format``; ``model`` and ``config``; ``threads`` (name, program role);
    ``programs`` (role -> each step's label, kind, primitives and declared targets,
    in declaration order); ``fields`` (every state field's name); ``places`` (per
    thread, each pc -> the program step it stands at, or "" before it starts, and
    a note: asleep, woken, timed out, not started, done); ``states`` (see below; state 0 is the initial state); ``complete`` (False for an excerpt) and
    ``max_states``; ``checker`` (verdict, message, whether exhaustive, stored states,
    the counterexample as ``[thread, branch]`` choices and by name, ``cycle_start``
    for a starvation lasso); ``progress`` (whether the model has progress steps, so
    the page looks for starvation cycles) and ``victims`` (the threads that have
    one: only they can starve).

    Each state: ``values`` (one per name of ``fields``), ``shown`` (each value as a
    trace table shows it), ``moves`` (each
    enabled step: ``thread``, ``branch``, ``step``, ``branch_name`` when named, and
    ``to`` -- a state number, or null outside the excerpt -- or ``violation``; plus
    the flags ``notifies`` (a notify that woke a sleeping waiter), ``spurious``, ``progress``,
    ``held``), ``blocked`` (thread name -> why it cannot move), ``holds`` (the wait
    predicates that hold, ``"thread pc"``) and ``status``: null while the run can go
    on, ``{kind, headline, message}`` when the state decides its verdict, or
    ``{"hang": {...}}`` for a stuck state, whose verdict needs the path.
    """
    if max_states < 1:
        raise ValueError("max_states must be at least 1")
    if result is None:
        result = check(machine, reduce="none")
    expander = Expander(machine, "none")
    must = replay_choices(machine, result.violation.trace)[0] if result.violation else []
    order, index, complete = _excerpt(machine, expander, max_states, must)
    return {
        "format": FORMAT,
        "model": machine.name,
        "config": json_value(dict(machine.config)),
        "threads": [{"name": n, "role": r} for n, r in zip(machine.thread_names, machine.thread_roles)],
        "programs": {role: [{"label": s.label, "kind": s.kind, "objects": list(s.objects), "to": list(s.targets)}
                            for s in steps.values()] for role, steps in machine.graph.items()},
        "fields": list(machine.field_names),
        "places": [_places(machine, t) for t in range(len(machine.thread_names))],
        "states": [_state_record(machine, expander, s, index) for s in order],
        "complete": complete,
        "max_states": max_states,
        "checker": _checker(machine, result),
        "progress": bool(machine.progress_labels),
        "victims": _victims(machine),
    }


def export_model(model: type[Model], overrides: Mapping[str, Any] | None = None, *,
                 max_states: int = MAX_STATES) -> dict[str, Any]:
    """Every variant a model's page switches between: the model and its fix, under each of :data:`SEMANTICS`.

    ``overrides`` sets parameters (not the condvar settings, which the page
    switches). The fix is compiled at the model's configuration as ``explain``
    does (:func:`~.fix.fix_report`), so "open the fixed design" opens it at the
    same shape.
    """
    overrides = {k: v for k, v in (overrides or {}).items() if k not in ("notify", "spurious")}
    doc = model_doc(model)
    base = model.compile(overrides)
    variants: dict[str, Any] = {}
    fix_name = None
    for notify, spurious in SEMANTICS:
        machine = model.compile({**overrides, "notify": notify, "spurious": spurious})
        result = check(machine, reduce="none")
        variants[variant_key("model", notify, spurious)] = export_graph(machine, max_states=max_states,
                                                                       result=result)
        report = fix_report(model, machine.config) if model.expected != "ok" else None
        if report is not None:
            fix_name = report.fix.name
            fixed = report.fix.compile(report.config)
            variants[variant_key("fix", notify, spurious)] = export_graph(fixed, max_states=max_states)
    declared = check(base, reduce="none")
    return {
        "format": FORMAT,
        "model": model.name,
        "summary": doc.summary,
        "fix_text": doc.fix or "",
        "expected": model.expected,
        "difficulty": difficulty(declared),
        "fix": fix_name,
        "default": variant_key("model", base.config.get("notify", "fifo"), base.config.get("spurious", "off")),
        "variants": variants,
    }
