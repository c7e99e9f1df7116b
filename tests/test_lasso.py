"""Starvation counterexamples are the shortest fair lassos, under weak and strong fairness.

The checker's lasso (stem plus cycle) is compared with an independent brute
force that enumerates every schedule up to a length bound and tests every
loop-back for fairness directly from the definitions:

* weak: a thread enabled in every state of the cycle steps in it;
* strong: a step (thread at a program counter) enabled in some state of the
  cycle is taken in it;
* the cycle takes no spurious wakeup and no progress step of the victim,
  and the victim is running (not done) throughout.

It is run on random models, on the issue's two examples (a writer-preferring
reader-writer lock under strict priorities, 8 steps where 5 suffice, and a
smaller model, 4 where 2 suffice), and the fairness settings are pinned on
the models the issue names.
"""

from __future__ import annotations

import random

import pytest

from safeprefetch import check
from safeprefetch._check.expand import Expander
from safeprefetch._check.explore import replay
from safeprefetch._check.liveness import starvation
from safeprefetch.model import DONE, Model

# -- the oracle ----------------------------------------------------------------------------------


def _policy_moves(machine, state):
    moves = [(c, n) for c, n in Expander(machine).successors(state)[0] if isinstance(n, tuple)]
    if machine.config.get("policy") == "priority" and moves:
        top = max(machine.priorities[t] for (t, _), _ in moves)
        moves = [(c, n) for c, n in moves if machine.priorities[c[0]] == top]
    return moves


def _enabled_steps(machine, state, moves):
    """``{(thread, pc)}`` of the threads with a move that is not a spurious wakeup."""
    pcs = machine.pc_index
    return {(t, state[pcs[t]]) for (t, _), _ in moves if state[pcs[t]] not in machine.spurious_pcs[t]}


def _progress(machine, state, t):
    info = machine.step_info(state, t)
    return info is not None and info.label in machine.progress_labels


def _fair_cycle(machine, states, choices, victim, fairness):
    """Whether ``choices`` (from ``states[0]`` back to it) starve ``victim`` fairly."""
    pcs = machine.pc_index
    enabled = []
    for s in states[:-1]:
        if s[pcs[victim]] == DONE:
            return False
        enabled.append(_enabled_steps(machine, s, _policy_moves(machine, s)))
    taken = set()
    for s, (t, _b) in zip(states, choices):
        if s[pcs[t]] in machine.spurious_pcs[t]:
            return False
        if t == victim and _progress(machine, s, t):
            return False
        taken.add((t, s[pcs[t]]))
    if fairness == "weak":
        threads = range(len(machine.thread_names))
        always = [t for t in threads if all(any(u == t for u, _ in en) for en in enabled)]
        return all(any(u == t for u, _ in taken) for t in always)
    return set().union(*enabled) <= taken


def brute_force_lasso(machine, depth):
    """The length of the shortest fair starving lasso with at most ``depth`` steps, or None."""
    fairness = machine.config.get("fairness", "weak")
    victims = [t for t in range(len(machine.thread_names))
               if any(i.label in machine.progress_labels for i in machine.infos[t].values())]
    best = [None]
    memo: dict = {}

    def moves(state):
        if state not in memo:
            memo[state] = _policy_moves(machine, state)
        return memo[state]

    def walk(states, choices):
        n = len(choices)
        if best[0] is not None and n >= best[0]:
            return
        for k in range(n):
            if states[k] == states[-1] and any(
                    _fair_cycle(machine, states[k:], choices[k:], v, fairness) for v in victims):
                best[0] = n
                return
        if n == depth:
            return
        for c, nxt in moves(states[-1]):
            walk(states + [nxt], choices + [c])

    walk([machine.init], [])
    return best[0]


def assert_shortest_fair_lasso(machine, depth=9):
    """The starvation check (what every search calls) agrees with the brute force: its lasso replays, loops
    back, is fair, and is shortest; or neither finds one."""
    v = starvation(machine)
    shortest = brute_force_lasso(machine, depth)
    if v is None:
        assert shortest is None, f"the brute force finds a {shortest}-step lasso the checker missed"
        return v
    states = replay(machine, v.trace)
    choices = _choices(machine, states, v.trace)
    assert states[v.cycle_start] == states[-1]
    victim = machine.thread_names.index(v.message.split(" never makes progress")[0])
    assert _fair_cycle(machine, states[v.cycle_start:], choices[v.cycle_start:], victim,
                       machine.config.get("fairness", "weak"))
    if len(v.trace) <= depth:
        assert len(v.trace) == shortest
    else:
        assert shortest is None
    return v


def _choices(machine, states, trace):
    """The ``(thread, branch)`` choices of ``trace`` (steps in these models have one branch)."""
    return [(machine.thread_names.index(step.thread), 0) for step in trace]


# -- the issue's examples ------------------------------------------------------------------------


class WriterPreferringRWLock(Model):
    """writer_preferring_rwlock: readers wait while a writer writes or waits; strict priorities.

    The issue's first example: the old search reported an 8-step lasso (its
    first fair component in Tarjan's order); the shortest has 5 steps.
    """

    name = "writer_preferring_rwlock"
    settings = {"policy": "priority"}

    def build(self, m):
        m.shared(readers=0, writing=False, waiting=0)
        m.mutex("gate")

        def enter(s, me):
            s.readers += 1

        def leave(s, me):
            s.readers -= 1

        def announce(s, me):
            s.waiting += 1

        def start(s, me):
            s.waiting -= 1
            s.writing = True

        def stop(s, me):
            s.writing = False

        r = m.program("reader")
        r.step("enter", enter, guard=lambda s, me: not s.writing and not s.waiting, next="read")
        r.step("read", next="relock")
        r.acquire("relock", "gate", next="leave")
        r.step("leave", leave, next="unlock")
        r.release("unlock", "gate", next="enter")
        w = m.program("writer")
        w.acquire("lock", "gate", next="announce")
        w.step("announce", announce, next="unlock")
        w.release("unlock", "gate", next="enter")
        w.step("enter", start, guard=lambda s, me: not s.readers and not s.writing, next="write")
        w.step("write", next="relock")
        w.acquire("relock", "gate", next="leave")
        w.step("leave", stop, next="release")
        w.release("release", "gate", next="lock")
        m.thread("reader0", r)
        m.thread("writer0", w)
        m.thread("writer1", w)
        m.priority("reader0", 3)
        m.priority("writer0", 2)
        m.priority("writer1", 3)
        m.progress("read", "write")


class TogglerAndSpinner(Model):
    """toggler_and_spinner: a high-priority toggler flips a flag forever; nobody reaches a progress step.

    The issue's second, smaller example: the old search reported 4 steps (a
    detour through the setter before the cycle); the shortest has 2.
    """

    name = "toggler_and_spinner"
    settings = {"policy": "priority"}

    def build(self, m):
        m.shared(x=0, flag=False)

        def toggle(s, me):
            s.flag = not s.flag

        def clear(s, me):
            s.x = 0

        def raise_x(s, me):
            s.x = 1

        spinner = m.program("spinner")
        spinner.step("spin", guard=lambda s, me: s.x == 1, next="spin")
        toggler = m.program("toggler")
        toggler.step("toggle", toggle, next="toggle")
        toggler.step("reset", clear, guard=lambda s, me: s.x != 0, next="toggle")
        setter = m.program("setter")
        setter.step("raise", raise_x, guard=lambda s, me: s.flag, next="raise")
        setter.step("reset", clear, guard=lambda s, me: s.x == 0, next="reset")
        m.thread("spinner", spinner)
        m.thread("toggler", toggler)
        m.thread("setter", setter)
        m.priority("spinner", 1)
        m.priority("toggler", 2)
        m.priority("setter", 2)
        m.progress("reset")


@pytest.mark.parametrize("model, steps", [(WriterPreferringRWLock, 5), (TogglerAndSpinner, 2)])
def test_the_issues_examples_report_their_shortest_lassos(model, steps):
    assert assert_shortest_fair_lasso(model.compile()) is not None
    result = check(model)
    assert result.verdict == "starvation" and len(result.trace) == steps
    assert result.violation.cycle_start == 0  # both cycles start at the initial state


def test_a_lasso_takes_the_stem_that_makes_the_whole_lasso_shortest():
    """Entering at the nearest state of a fair component is not enough: the stem plus cycle is minimized."""
    result = check(TogglerAndSpinner)
    assert [s.step for s in result.trace] == ["toggle", "toggle"]
    assert "toggler never makes progress" in result.violation.message


# -- random models --------------------------------------------------------------------------------

GUARDS = [None, ("x", 0), ("x", 1), ("not x", 0), ("flag", True), ("flag", False)]
EFFECTS = [None, "inc", ("set", 0), ("set", 1), "toggle"]


def _guard(g):
    if g is None:
        return None
    kind, c = g
    if kind == "x":
        return lambda s, me: s.x == c
    if kind == "not x":
        return lambda s, me: s.x != c
    return lambda s, me: s.flag == c


def _effect(e):
    if e is None:
        return None
    if e == "inc":
        def effect(s, me):
            s.x = (s.x + 1) % 3
    elif e == "toggle":
        def effect(s, me):
            s.flag = not s.flag
    else:
        def effect(s, me, c=e[1]):
            s.x = c
    return effect


def _branching(a, b):
    return lambda s, me: a if s.x == 0 else b


def random_model(seed):
    """Two or three threads of one to three guarded steps over ``x`` and ``flag``, random progress labels,
    policy, priorities, fairness and a mutex some steps take."""
    rng = random.Random(seed)
    threads = rng.choice([2, 2, 3])
    programs = []
    for _t in range(threads):
        k = rng.choice([1, 2, 3])
        labels = [f"s{j}" for j in range(k)] + ([DONE] if rng.random() < 0.15 else [])
        steps = []
        for i in range(k):
            kind = rng.choice(["step", "step", "step", "acquire", "release"])
            steps.append((f"s{i}", kind, rng.choice(GUARDS), rng.choice(EFFECTS), rng.choice(labels),
                          rng.choice(labels) if rng.random() < 0.3 else None))
        programs.append(steps)
    progress = sorted({f"s{rng.randrange(3)}" for _ in range(rng.choice([1, 2]))})
    # Only labels some program has (an unknown progress label is a model error); every program has s0.
    progress = [p for p in progress if any(p == step[0] for steps in programs for step in steps)] or ["s0"]
    settings = {"policy": rng.choice(["fair", "priority"]), "fairness": rng.choice(["weak", "strong"]),
                "spurious": rng.choice(["off", "on"])}
    priorities = [rng.choice([1, 2]) for _ in range(threads)]
    waits = rng.random() < 0.3

    class Random(Model):
        """random: generated for the lasso tests."""

        name = f"random_{seed}"

        def build(self, m):
            m.shared(x=0, flag=False)
            m.mutex("lock")
            m.condvar("changed")
            for t, steps in enumerate(programs):
                p = m.program(f"p{t}")
                for label, kind, guard, effect, nxt, alt in steps:
                    target = dict(next=nxt) if alt in (None, nxt) else dict(next=_branching(nxt, alt), to=[nxt, alt])
                    if kind == "acquire":
                        p.acquire(label, "lock", **target)
                    elif kind == "release" and waits and t == 0:
                        p.wait(label, "changed", "lock", **target)
                    elif kind == "release":
                        p.notify_all(label, "changed", **target)
                    else:
                        p.step(label, _effect(effect), guard=_guard(guard), **target)
                m.thread(f"t{t}", p)
                m.priority(f"t{t}", priorities[t])
            m.progress(*progress)

    return Random.compile(settings)


@pytest.mark.parametrize("seed", range(40))
def test_random_models_get_the_brute_forces_shortest_fair_lasso(seed):
    assert_shortest_fair_lasso(random_model(seed))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40, 600))
def test_many_random_models_get_the_brute_forces_shortest_fair_lasso(seed):
    assert_shortest_fair_lasso(random_model(seed))
