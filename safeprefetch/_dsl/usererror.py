"""Turning an exception raised by a model's own code into a :class:`StepError` that points at that code.

What it guarantees
------------------
A step's effect, guard or ``next`` function, a timed wait's ``until``, a
mutex chooser: when one raises (a ``ZeroDivisionError``, a typo like
``s.hist``), the error names the thread, the step label, and the user's own
``file:line`` -- the innermost frame of the traceback outside the DSL,
which for a specialized function is still the user's file and line (the
rewriter compiles under the user's file name, see ``specialize.py``). An
invariant or end check that raises is named the same way, by its name (a
:class:`CheckError`). An ``AttributeError`` on the state or on ``me`` names
the variables the model does have, with a "did you mean". The search that
meets the error adds the schedule that reached it (``_check/explore.py``).
"""

from __future__ import annotations

import os
import traceback
from typing import Any, Mapping

from .graph import did_you_mean
from .views import _LocalViewBase
from .violations import CheckError, StepError, exit_call

__all__ = ["check_error", "step_error"]

_DSL = os.path.dirname(os.path.abspath(__file__))


def step_error(thread: str, label: str, error: BaseException, state: tuple, shared: Mapping[str, int],
               local: Mapping[str, int]) -> StepError:
    """The :class:`StepError` for ``error``, raised by thread ``thread``'s step ``label`` in ``state``."""
    return StepError(thread, label, error, _user_frame(error), state, _detail(error, state, shared, local))


def check_error(check: str, error: BaseException, state: tuple, shared: Mapping[str, int]) -> CheckError:
    """The :class:`CheckError` for ``error``, raised by the invariant or end check ``check`` in ``state``."""
    return CheckError(None, check, error, _user_frame(error), state, _detail(error, state, shared, {}))


def _user_frame(error: BaseException) -> str | None:
    """``file:line`` of the innermost frame outside the DSL, or None."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if os.path.dirname(os.path.abspath(f.filename)) != _DSL]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.filename}:{f.lineno}"


def _detail(error: BaseException, state: tuple, shared: Mapping[str, int], local: Mapping[str, int]) -> str:
    if isinstance(error, SystemExit):
        return f"the model called {exit_call(error)}, which a model's code may not do"
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, AttributeError) and isinstance(getattr(error, "name", None), str):
        obj: Any = getattr(error, "obj", None)
        if isinstance(obj, list) and len(obj) == len(state):  # the state: a view, or the specialized plain list
            return f"{text} (the model has no shared variable {error.name!r}{did_you_mean(error.name, shared)})"
        if isinstance(obj, _LocalViewBase):
            known = [*local, "name", "index"]
            return f"{text} (the thread has no local {error.name!r}{did_you_mean(error.name, known)})"
    return text
