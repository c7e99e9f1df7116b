"""Interleaving tests for real threading code.

Model the design, then test the code: ``check`` runs a test body that starts
plain ``threading``/``queue`` threads under a deterministic scheduler, at
every schedule that matters, and reports a violation (deadlock, lost wakeup,
an uncaught exception or failed assertion, a leaked thread, a hang in
virtual time, a lock released by a non-owner) with a minimized, replayable
trace::

    from safeprefetch import interleavings

    result = interleavings.check(my_test_body, preemption_bound=2)
    print(interleavings.render(result))

``@interleavings.test(...)`` does the same from pytest; ``python -m
safeprefetch check-code FILE.py::TEST`` from the command line. See
docs/interleavings.md.

"Every schedule that matters" is DPOR's (the default ``reduce="dpor"``): every
schedule up to its equivalence, exact for race-free code only -- shared plain
data always accessed under one common lock. For code that updates the same
data under two different locks, or under none, use ``reduce="none"`` or
``lines=True`` (docs/interleavings.md, "What DPOR assumes").
"""

from ._interleave.api import InterleavingFailure as InterleavingFailure
from ._interleave.api import check as check
from ._interleave.api import replay as replay
from ._interleave.api import test as test
from ._interleave.check import Fresh as Fresh
from ._interleave.check import InterleavingWarning as InterleavingWarning
from ._interleave.check import Interrupt as Interrupt
from ._interleave.explore import Nondeterministic as Nondeterministic
from ._interleave.queues import ShutDown as ShutDown
from ._interleave.report import CodeCheckResult as CodeCheckResult
from ._interleave.report import StepDetail as StepDetail
from ._interleave.report import render_text as render
from ._interleave.report import svg_text as svg
from ._interleave.report import write_svg as write_svg
from ._interleave.scheduler import SchedulerStuck as SchedulerStuck

__all__ = [
    "CodeCheckResult",
    "Fresh",
    "InterleavingFailure",
    "InterleavingWarning",
    "Interrupt",
    "Nondeterministic",
    "SchedulerStuck",
    "ShutDown",
    "StepDetail",
    "check",
    "render",
    "replay",
    "svg",
    "test",
    "write_svg",
]
