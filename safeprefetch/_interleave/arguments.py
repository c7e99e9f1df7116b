"""Checking the arguments of a check up front, so that a bad one is named before anything runs.

What it guarantees
------------------
``check``, ``replay`` and ``@test`` promise that a bad argument raises
``ValueError`` (a value out of range, an unknown name) or ``TypeError`` (a
value of the wrong type) naming the argument, before the test body runs
once. Python's own errors deeper down (``'<' not supported between 'str'
and 'int'``, or none at all: a ``time_budget="x"`` that is never compared)
would name nothing, and some would come only after a run. ``bool`` is not
accepted as a number (``depth=True`` is a mistake, not ``1``), and numbers
are not accepted as flags.
"""

from __future__ import annotations

import inspect
import numbers
import types
from typing import Any, Callable

__all__ = ["body", "choice", "flag", "names", "patch_table", "seconds", "whole"]


def whole(name: str, value: Any, least: int | None, optional: bool = False) -> None:
    """An ``int`` of at least ``least`` (any, when None; or None itself, when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int{' or None' if optional else ''}, not {value!r}")
    if least is not None and value < least:
        raise ValueError(f"{name} must be at least {least}, not {value!r}")


def seconds(name: str, value: Any, optional: bool = False) -> None:
    """A positive real number of seconds (or None, when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds{' or None' if optional else ''}, not {value!r}")
    if not value > 0:
        raise ValueError(f"{name} must be positive, not {value!r}")


def flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")


def choice(name: str, value: Any, known: tuple[str, ...]) -> None:
    if value not in known:
        raise ValueError(f"{name} must be {' or '.join(repr(k) for k in known)}, not {value!r}")


def names(name: str, value: Any) -> tuple[str, ...]:
    """Thread names: one string, or an iterable of strings."""
    if isinstance(value, str):
        return (value,)
    try:
        out = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be a thread name or a sequence of them, not {value!r}") from None
    if not all(isinstance(n, str) for n in out):
        raise TypeError(f"{name} must hold thread names (strings), not {value!r}")
    return out


def patch_table(value: Any) -> None:
    """``patch_globals``: a dict from ``(module, name)`` (a module, or a globals dict) to the replacement."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise TypeError(f"patch_globals must be a dict {{(module, name): replacement}}, not {value!r}")
    for key in value:
        ok = (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], (types.ModuleType, dict))
              and isinstance(key[1], str))
        if not ok:
            raise TypeError(f"patch_globals keys must be (module, name) pairs -- a module or a globals dict, "
                            f"and a string -- not {key!r}")


def body(fn: Callable[..., Any]) -> None:
    """A callable the check can call with no arguments."""
    if not callable(fn):
        raise TypeError(f"check needs a zero-argument callable, not {fn!r}")
    runs_when_called(fn)
    try:
        inspect.signature(fn).bind()
    except TypeError as e:
        raise TypeError(f"check needs a zero-argument callable; {getattr(fn, '__qualname__', fn)!r} "
                        f"cannot be called without arguments ({e})") from None
    except ValueError:
        pass  # no signature to read (a builtin): it will say so when called


def runs_when_called(fn: Callable[..., Any]) -> None:
    """Refuse a function whose call runs none of its body: the check would explore one empty run, "ok"."""
    for test, what in ((inspect.iscoroutinefunction, "an async def (calling it only makes a coroutine)"),
                       (inspect.isasyncgenfunction, "an async generator function (calling it runs nothing)"),
                       (inspect.isgeneratorfunction, "a generator function (calling it only makes a generator)")):
        if test(fn):
            raise TypeError(f"check needs a plain function that runs the test when called; "
                            f"{getattr(fn, '__qualname__', fn)!r} is {what}: its body would never run. "
                            "The checker schedules threads, not an event loop: test threading code in a def")
