"""The checker's values: a trace, a violation, a result.

What it guarantees
------------------
Everything a search reports is a frozen value with a documented field for
each fact, so no caller ever parses a message to learn something the checker
knew (STYLE.md: "Violations are values (kind, trace), not strings"). A
message is for people; the kind, the trace, the state, the step at which the
violation shows and, for a starvation lasso, the step where its cycle begins
are fields.

A :class:`Trace` stores a schedule by name (thread name, step label, branch
name), not by index, so it survives a reordering of the model's threads and
reads naturally in JSON; :meth:`Trace.to_json` and :meth:`Trace.from_json`
round-trip it, and a malformed file raises :class:`TraceError`. Replaying a
trace that no longer matches the model raises :class:`ReplayDivergence`
(see :mod:`.replay`), named after Hypothesis's ``Flaky``.

These types are the public face of the checking layer: ``safeprefetch``
re-exports them, and :mod:`.explore` keeps them importable from there too.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["CheckResult", "ReplayDivergence", "Trace", "TraceError", "TraceStep", "Violation"]


class TraceError(ValueError):
    """A trace file or JSON value is malformed."""


class ReplayDivergence(Exception):
    """A recorded trace asks for a step the model does not offer at that point."""



def json_value(value: Any) -> Any:
    """``value`` as strict JSON (RFC 8259) can hold it: infinities and NaN as the strings Python prints
    (``"inf"``, ``"-inf"``, ``"nan"``), sets sorted into lists, tuples as lists, anything else JSON has no
    type for as its ``repr``. A configuration may hold any of these; ``--json`` must stay JSON."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((json_value(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    return repr(value)


@dataclass(frozen=True)
class TraceStep:
    """One step of a trace."""

    #: The name of the thread that stepped.
    thread: str
    #: The label of the step, verbatim from the model.
    step: str
    #: The branch taken, for nondeterministic steps; None otherwise.
    branch: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"thread": self.thread, "step": self.step}
        if self.branch is not None:
            d["branch"] = self.branch
        return d


@dataclass(frozen=True)
class Trace:
    """A schedule: the list of choices from the initial state."""

    steps: tuple[TraceStep, ...]

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self):
        return iter(self.steps)

    def to_json(self) -> list[dict[str, Any]]:
        return [s.to_json() for s in self.steps]

    def dumps(self) -> str:
        return json.dumps(self.to_json())

    @classmethod
    def from_json(cls, value: Any) -> "Trace":
        if isinstance(value, dict) and "trace" in value:
            value = value["trace"]
        if not isinstance(value, list):
            raise TraceError("a trace must be a JSON list of steps (or an object with a 'trace' list)")
        steps = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise TraceError(f"trace step {i} must be an object, not {type(item).__name__}")
            thread, step = item.get("thread"), item.get("step")
            if not isinstance(thread, str) or not isinstance(step, str):
                raise TraceError(f"trace step {i} needs string 'thread' and 'step' fields")
            branch = item.get("branch")
            if branch is not None and not isinstance(branch, str):
                raise TraceError(f"trace step {i}: 'branch' must be a string")
            steps.append(TraceStep(thread, step, branch))
        return cls(tuple(steps))

    @classmethod
    def loads(cls, text: str) -> "Trace":
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise TraceError(f"trace is not valid JSON: {e}") from None
        return cls.from_json(value)


@dataclass(frozen=True)
class Violation:
    """A bug found by the checker: what kind, why, where, and the schedule that shows it."""

    #: One of the stable kind names (``deadlock``, ``lost_wakeup``, ...).
    kind: str
    #: A one-line human explanation. Everything in it that a program may need is also a field.
    message: str
    #: The shortest schedule (BFS) that reaches the violation.
    trace: Trace
    #: The state in which the violation holds (for a step violation, the state before the step).
    state: tuple = field(repr=False, default=())
    #: True when the violation is raised by the last step of the trace itself.
    on_step: bool = False
    #: For starvation (a lasso): the number of steps before the cycle that repeats forever, so
    #: ``trace.steps[cycle_start:]`` is the cycle. None for every other kind.
    cycle_start: int | None = None
    #: Where the violation shows, in steps of ``trace``: a violation at a state holds in the
    #: state reached after ``step`` steps; a violation on a step is raised by step number
    #: ``step`` (``trace.steps[step - 1]``). The checker's traces end where the violation
    #: shows, so it is ``len(trace)`` unless the maker says otherwise (filled in when omitted).
    step: int | None = None

    def __post_init__(self) -> None:
        if self.step is None:
            object.__setattr__(self, "step", len(self.trace))


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check."""

    #: The model's name.
    model: str
    #: The full configuration, settings included.
    config: Mapping[str, Any]
    #: The search strategy ("bfs" or "dfs").
    strategy: str
    #: True when every reachable state was visited (or a violation was found).
    exhaustive: bool
    #: "ok" or a violation kind.
    verdict: str
    #: Distinct states stored.
    states: int
    #: Transitions (successor computations) taken.
    transitions: int
    #: Wall-clock seconds of the search.
    seconds: float
    #: The violation, if any.
    violation: Violation | None = None
    #: The declared expected verdict of the model, if known.
    expected: str | None = None
    #: Depth of the deepest state reached.
    max_depth: int = 0
    #: How visited states were stored: "full" (exact), "fingerprint" (64-bit fingerprints: a collision
    #: could hide a state) or "bitstate" (bits: states are missed by design; a last resort).
    store: str = "full"
    #: For the probabilistic stores, the estimated chance of a collision: fingerprint, that any
    #: state was missed (TLC's optimistic n * (m - n) / 2**64); bitstate, that a new state met at
    #: the end was taken for a visited one (bits set ** hashes). None for "full".
    collision_probability: float | None = None
    #: Why a search that is not exhaustive stopped: "max_states" (the state cap), "memory" (the
    #: ``memory`` budget) or "bitstate" (it finished, but a bitstate search skips states by design);
    #: None when it finished. ``stop_message`` says it in a sentence.
    stop_reason: str | None = None
    stop_message: str = ""
    #: Bitstate only: bits of the array per stored state (SPIN: above 100, coverage is very likely
    #: complete).
    hash_factor: float | None = None
    #: What expanded the states: "plain" (the machine's step functions), "generated" (the expansion
    #: written out as Python) or "compiled" (the same, compiled by Cython); see ``_check/generated.py``.
    engine: str = "plain"
    #: Why the search ran another engine than the one asked for ("" when it ran the one asked for).
    engine_note: str = ""

    @property
    def probabilistic(self) -> bool:
        """True when states were stored as fingerprints or bits: "ok" is then very likely, not certain."""
        return self.store != "full"

    @property
    def ok(self) -> bool:
        return self.violation is None

    @property
    def trace(self) -> Trace:
        return self.violation.trace if self.violation else Trace(())

    def to_json(self) -> dict[str, Any]:
        v = self.violation
        return {
            "model": self.model,
            "config": {k: json_value(v) for k, v in self.config.items()},
            "strategy": self.strategy,
            "exhaustive": self.exhaustive,
            "verdict": self.verdict,
            "expected": self.expected,
            "states": self.states,
            "transitions": self.transitions,
            "seconds": round(self.seconds, 6),
            "max_depth": self.max_depth,
            "message": v.message if v else None,
            "step": v.step if v else None,
            "on_step": v.on_step if v else None,
            "cycle_start": v.cycle_start if v else None,
            "trace_length": len(self.trace) if v else None,  # null, not 0, when there is no trace
            "trace": self.trace.to_json(),
            "store": self.store,
            "probabilistic": self.probabilistic,
            "collision_probability": self.collision_probability,
            "stop_reason": self.stop_reason,
            "hash_factor": self.hash_factor,
            "engine": self.engine,
            "engine_note": self.engine_note or None,
        }
