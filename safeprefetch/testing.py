"""Helpers for checking models from pytest, and an independent oracle.

``assert_verdict`` is the one-liner for a model's test::

    from safeprefetch.testing import assert_verdict
    def test_my_buffer_is_correct():
        assert_verdict(MyBuffer, "ok", capacity=2)

``enumerate_schedules`` is the oracle the explorer is tested against: it
walks *every schedule* as a tree, with no state hashing and no parent map,
down to a depth bound. Every state is reachable within its BFS depth, so
with ``depth >= explorer.max_depth`` it must reach exactly the explorer's
set of states, and the shortest violation it sees must have the explorer's
trace length. It is exponential; use it on small models only.

What the oracle checks independently is the *search*: visited-set hashing,
parent maps, level order, the state cap, shortest-first reporting. What a
state's moves are and what a terminal state means are not the search's to
decide: the oracle takes them from the same expansion function
(:class:`~safeprefetch._check.expand.Expander`, with no reduction) and the
same terminal classifier (:mod:`safeprefetch._check.verdict`) as every
other driver, so a disagreement can only come from the search.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from dataclasses import dataclass
from typing import Any

from ._check.expand import Expander
from ._check.explore import CheckResult, check
from ._check.verdict import judge_terminal
from ._check.trace import format_table
from ._dsl.model import Machine, Model, ModelError

__all__ = ["OracleResult", "assert_verdict", "enumerate_schedules", "recording_runtimes", "thread_count"]

from ._prefetcher.lifecycle import thread_count as thread_count


def assert_verdict(model: type[Model], verdict: str, trace_length: int | None = None,
                   **config: Any) -> CheckResult:
    """Check ``model`` at ``config`` and assert its verdict (and shortest trace length).

    A failure says what the checker found, with its trace as a table; a step
    whose own code raised fails with its thread, label, ``file:line`` and the
    schedule that reached it.
    """
    try:
        result = check(model, config or None)
    except ModelError as e:
        table = getattr(e, "table", None)
        raise AssertionError(f"{model.name} {config}: {e}" + (f"\n{table}" if table else "")) from e
    assert result.exhaustive, f"{model.name}: search was cut by the state bound"
    if result.verdict != verdict:
        found = f" ({result.violation.message})" if result.violation else ""
        raise AssertionError(f"{model.name} {config}: expected {verdict}, got {result.verdict}{found}"
                             + _table(model, result))
    if trace_length is not None and len(result.trace) != trace_length:
        raise AssertionError(f"{model.name} {config}: shortest trace has {len(result.trace)} steps, expected "
                             f"{trace_length}" + _table(model, result))
    return result


def _table(model: type[Model], result: CheckResult) -> str:
    if result.violation is None:
        return ""
    return "\n" + format_table(model.compile(result.config), result.trace, result.violation)


@dataclass(frozen=True)
class OracleResult:
    #: Every state reached by some schedule of at most ``depth`` steps.
    states: frozenset
    #: ``(length, kind)`` for every violating schedule seen.
    violations: frozenset
    #: Number of schedules (tree leaves and cut-offs) walked.
    schedules: int

    @property
    def shortest(self) -> int | None:
        return min((n for n, _ in self.violations), default=None)

    def kinds_at_shortest(self) -> set[str]:
        n = self.shortest
        return {k for m, k in self.violations if m == n}


def enumerate_schedules(machine: Machine, depth: int, limit: int = 2_000_000) -> OracleResult:
    """Walk every schedule of ``machine`` up to ``depth`` steps (no hashing, no pruning)."""
    expand = Expander(machine).expand  # no reduction: every schedule
    states: set = set()
    violations: set = set()
    count = 0

    def walk(path: list, choices: list) -> None:
        nonlocal count
        state = path[-1]
        states.add(state)
        d = len(choices)
        bad = machine.invariant_violation(state)  # every state visited, new or not: no visited set here
        if bad:
            violations.add((d, bad[0]))
            count += 1
            return
        moves, stuck = expand(state)
        if stuck:
            found = judge_terminal(machine, path, choices)
            if found:
                violations.add((d, found[0]))
            count += 1
            if not moves:
                return
        if d >= depth:
            count += 1
            return
        if count > limit:
            raise RuntimeError("oracle schedule limit exceeded; use a smaller model")
        for t, res in moves:
            for b, nxt in res:
                if nxt.__class__ is not tuple:  # a step violation, one step further
                    violations.add((d + 1, nxt.kind))
                    count += 1
                    continue
                path.append(nxt)
                choices.append((t, b))
                walk(path, choices)
                path.pop()
                choices.pop()

    walk([machine.init], [])
    return OracleResult(frozenset(states), frozenset(violations), count)


@contextlib.contextmanager
def recording_runtimes() -> Iterator[list]:
    """Inside the block, every live runtime a Prefetcher builds records its steps; yields the list of them.

    Check a prefetcher's run against its model afterwards:
    ``verify_record(rt.machine, rt.record)`` (``safeprefetch.lowlevel``).
    """
    from ._prefetcher import core
    from ._runtime.kernel import Runtime

    runtimes: list = []

    def recording(machine: Any, actions: Any, **kw: Any) -> Runtime:
        rt = Runtime(machine, actions, record=True, **kw)
        runtimes.append(rt)
        return rt

    core.runtime_factory.insert(0, recording)
    try:
        yield runtimes
    finally:
        core.runtime_factory.remove(recording)
