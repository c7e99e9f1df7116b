"""Driving a runtime from outside its hot path: a thread run to completion, and the record as a trace.

:class:`Driving` is a part of :class:`~.kernel.Runtime` (a base class), kept
apart because neither method is on the path a Prefetcher's step takes:
``run_thread`` runs a model's thread autonomously (``run_live``, the tests),
choosing branches at random when asked; ``trace`` reads a recorded run back
as the checker's :class:`Trace`, for ``verify_record`` and for people.
"""

from __future__ import annotations

import random
import time
from typing import Any

from .._check.replay import choice_step
from .._check.result import Trace
from .._dsl.model import DONE
from .errors import NeverStarted
from .stuck import names_at_run_time

__all__ = ["Driving"]


class Driving:
    """``run_thread`` and ``trace`` of a Runtime (see the module doc); uses only the Runtime's own fields."""

    machine: Any
    record: Any
    actions: Any
    _lock: Any
    _state: tuple
    _pci: Any
    _schedule: Any

    def trace(self) -> Trace:
        """The recorded steps as a trace (needs ``record=True``)."""
        if self.record is None:
            raise ValueError("this runtime does not record its steps")
        m = self.machine
        steps, state = [], m.init
        for t, b, nxt in self.record:
            steps.append(choice_step(m, state, (t, b)))
            if isinstance(nxt, tuple):
                state = nxt
        return Trace(tuple(steps))

    def run_thread(self, t: int, *, rng: random.Random | None = None, jitter: float = 0.0) -> None:
        """Run thread ``t`` to completion (autonomous threads). Branches are chosen by ``rng`` if given."""
        m = self.machine
        while True:
            with self._lock:
                self._check()
                if self._state[self._pci[t]] == DONE:
                    return
                branch: Any = None
                at = self._state[self._pci[t]]
                if rng is not None and self._schedule is None:
                    # Every candidate branch, in a random order: the step takes the first one enabled *when it
                    # runs*. (Choosing one now, among those enabled now, and waiting for it would wait forever
                    # if another thread's step disables it meanwhile and leaves another enabled.) Also the
                    # outcome of an external step with no action bound (the kernel takes a tuple there too).
                    info = m.step_info(self._state, t)
                    if len(info.branches) > 1:
                        branch = tuple(rng.sample(info.branches, len(info.branches)))
                    elif names_at_run_time(m, info):
                        # Branches named at run time: "wake X" for any waiter X; None (nobody waits) last.
                        names = [f"wake {x}" for x in m.thread_names]
                        branch = (*rng.sample(names, len(names)), None)
            if jitter and rng is not None:
                time.sleep(rng.random() * jitter)
            try:
                self.step(t, branch)
            except NeverStarted:
                return  # nobody spawned it, and the run is over: finished, as the model counts it
            except ValueError:
                # The branches were chosen for the step the thread was at; another thread's step (a notify)
                # moved it on before this one began, and the step it is at has none of them: choose again.
                # (Refused before anything happened: a name the step does not have is checked first.)
                if branch is None or self._state[self._pci[t]] == at:
                    raise
