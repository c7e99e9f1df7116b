"""Views: how user code reads and writes the flat state by name.

A step function is written against names -- ``s.count += 1``,
``me.left -= 1`` -- but the state is one flat tuple. Before a step runs, the
compiled step copies the tuple into a list; a *shared view* is a ``list``
subclass whose properties map each shared variable to its index, and a
*local view* wraps that same list and maps a thread's locals to that
thread's indices (plus the constants ``me.name`` and ``me.index``). So a step
may mutate ``s`` freely: it is a private copy, turned back into a tuple after
the step.

The specializer (``specialize.py``) rewrites most step functions to index
the list directly, and then no view is built at all; views are the path for
everything it cannot rewrite, and the meaning of both paths is the same.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Mapping

from .violations import ModelError

__all__ = ["make_local_view", "make_shared_view"]


def _prop(i: int) -> property:
    def setter(self, value, i=i):
        list.__setitem__(self, i, value)

    return property(itemgetter(i), setter)


def _local_prop(i: int) -> property:
    def getter(self, i=i):
        return self._s[i]

    def setter(self, value, i=i):
        self._s[i] = value

    return property(getter, setter)


class _SharedViewBase(list):
    """A mutable copy of the state, with shared variables as attributes."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<state {self._layout_repr()}>"


class _LocalViewBase:
    __slots__ = ("_s",)

    def __init__(self, s: list):
        self._s = s


def make_shared_view(names: Mapping[str, int]) -> type:
    """A list subclass with one property per shared variable (``names``: variable -> index)."""
    ns: dict[str, Any] = {"__slots__": ()}
    for name, i in names.items():
        ns[name] = _prop(i)
    ns["_layout_repr"] = lambda self: ", ".join(f"{n}={self[i]!r}" for n, i in names.items())
    return type("SharedView", (_SharedViewBase,), ns)


def make_local_view(index: int, thread_name: str, names: Mapping[str, int]) -> type:
    """The ``me`` of thread ``index``: its locals by name over the shared list, plus ``name`` and ``index``."""
    ns: dict[str, Any] = {"__slots__": (), "index": index, "name": thread_name}
    for name, i in names.items():
        if name in ("index", "name"):
            raise ModelError(f"thread {thread_name!r}: local {name!r} is reserved")
        ns[name] = _local_prop(i)
    return type("LocalView", (_LocalViewBase,), ns)
