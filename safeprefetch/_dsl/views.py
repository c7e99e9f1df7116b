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

A check that reads threads (``invariant(name, lambda s, threads: ...)``)
gets a :class:`ThreadsView`: each thread's locals, program counter and
whether it is done, read-only, over the same state.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import itemgetter
from typing import Any, Callable, Sequence

from .program import DONE
from .violations import ModelError

__all__ = ["ThreadView", "ThreadsView", "make_local_view", "make_shared_view", "make_threads_view"]


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


#: What a thread's local may not be named: what a check's view of a thread answers itself, and the views' slots.
_RESERVED = frozenset({"index", "name", "pc", "done", "_s", "_t", "_where"})


def make_local_view(index: int, thread_name: str, names: Mapping[str, int]) -> type:
    """The ``me`` of thread ``index``: its locals by name over the shared list, plus ``name`` and ``index``."""
    ns: dict[str, Any] = {"__slots__": (), "index": index, "name": thread_name}
    for name, i in names.items():
        if name in _RESERVED:
            # ``pc`` and ``done`` too: an invariant's or end check's view of a thread answers those itself
            # (its program counter, whether it ended), so a local of that name would be hidden there.
            raise ModelError(f"thread {thread_name!r}: local {name!r} is reserved (checks read a thread's index, "
                             "name, pc and done; _s, _t and _where are its views' own); give the local another name")
        ns[name] = _local_prop(i)
    return type("LocalView", (_LocalViewBase,), ns)


class ThreadView:
    """One thread as an invariant or end check sees it: its locals, ``pc``, ``done``, ``name``, ``index``.

    Read-only: a check observes the state, it never changes it.
    """

    __slots__ = ("_s", "_t", "_where")

    def __init__(self, s: Any, t: int, where: tuple):
        object.__setattr__(self, "_s", s)
        object.__setattr__(self, "_t", t)
        object.__setattr__(self, "_where", where)

    def __getattr__(self, attr: str) -> Any:
        name, pc, local = self._where
        if attr == "pc":
            return self._s[pc]
        if attr == "done":
            return self._s[pc] == DONE
        if attr == "name":
            return name
        if attr == "index":
            return self._t
        i = local.get(attr)
        if i is None:
            import difflib

            close = difflib.get_close_matches(attr, [*local, "pc", "done", "name", "index"], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise AttributeError(f"thread {name!r} has no local {attr!r}{hint}")
        return self._s[i]

    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError(f"thread {self._where[0]!r}: a check cannot change a thread's {attr!r}")

    def __repr__(self) -> str:
        name, pc, local = self._where
        fields = ", ".join(f"{k}={self._s[i]!r}" for k, i in local.items())
        return f"<thread {name} at {self._s[pc]!r}{', ' + fields if fields else ''}>"


class ThreadsView(Mapping):
    """Every thread by name, over one state: what ``check(s, threads)`` receives."""

    __slots__ = ("_s", "_where")

    def __init__(self, s: Any, where: tuple):
        self._s, self._where = s, where

    def __getitem__(self, name: str) -> ThreadView:
        for t, w in enumerate(self._where):
            if w[0] == name:
                return ThreadView(self._s, t, w)
        raise KeyError(name)

    def __iter__(self):
        return (w[0] for w in self._where)

    def __len__(self) -> int:
        return len(self._where)


def make_threads_view(names: Sequence[str], pc_index: Sequence[int],
                      local_index: Sequence[Mapping[str, int]]) -> Callable[[Any], ThreadsView]:
    """``state -> ThreadsView``: the ``threads`` argument of a check that reads threads."""
    where = tuple((n, pc, dict(loc)) for n, pc, loc in zip(names, pc_index, local_index))
    return lambda s: ThreadsView(s, where)
