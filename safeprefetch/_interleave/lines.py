"""Line mode: scheduling points at line events, stores and deletes, for data races on plain attributes.

What it adds
------------
At synchronization granularity, the code between two synchronization
operations runs atomically, so a data race on a plain attribute is invisible:
``self.count += 1`` in two threads always adds two. With ``lines=True`` the
scheduler also stops each controlled thread at every line event of the
code under test, and right before every store instruction (``STORE_ATTR``,
``STORE_SUBSCR``, ``STORE_GLOBAL``, ``STORE_DEREF``, ``STORE_NAME``) and
every delete of the same kinds (``DELETE_ATTR``, ``DELETE_SUBSCR``, ...), so
the read and the write of ``x += 1``, or the check and the delete of ``if k
in d: del d[k]``, can be separated by another thread: the lost update, or
the ``KeyError``, is then one of the schedules. Locals (``STORE_FAST``,
``DELETE_FAST``) are the frame's own and get no point.

Which code is traced: every file that is not part of the standard library,
of an installed package's ``site-packages``, or of the scheduler itself. A line step
depends on everything (nothing is known about what it touches), so partial
order reduction does not prune around it: keep line-mode tests small, and
bound their preemptions.
"""

from __future__ import annotations

import dis
import linecache
import os
import sys
import sysconfig
from typing import Any

from .scheduler import Op, current

__all__ = ["DELETES", "STORES", "trace_current_thread", "traced_file"]

_SHARED = ("ATTR", "SUBSCR", "GLOBAL", "DEREF", "NAME")  # what another thread can see, unlike a FAST local
#: The opcodes a store point precedes.
STORES = frozenset(dis.opmap[f"STORE_{n}"] for n in _SHARED if f"STORE_{n}" in dis.opmap)
#: The opcodes a delete point precedes.
DELETES = frozenset(dis.opmap[f"DELETE_{n}"] for n in _SHARED if f"DELETE_{n}" in dis.opmap)

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBS = tuple({os.path.abspath(p) for k in ("stdlib", "platstdlib", "purelib", "platlib")
               if (p := sysconfig.get_paths().get(k))})
_cache: dict[str, bool] = {}


def traced_file(filename: str) -> bool:
    """Whether line mode stops in code from ``filename``."""
    hit = _cache.get(filename)
    if hit is None:
        path = os.path.abspath(filename)
        # Code with no file is the user's too: ``python -c``/``-``, the REPL, ``exec``'d or generated code,
        # doctests (left out, a racy counter there was "ok, exhaustive"); the frozen modules are Python's own.
        hit = not (filename.startswith("<frozen ") or (not filename.startswith("<") and (
            path.startswith(_HERE) or path.startswith(_LIBS))))
        _cache[filename] = hit
    return hit


def _local(frame: Any, event: str, arg: Any) -> Any:
    if event == "line":
        kind = "line"
    elif event == "opcode":
        opcode = frame.f_code.co_code[frame.f_lasti]
        if opcode in STORES:
            kind = "store"
        elif opcode in DELETES:
            kind = "delete"
        else:
            return _local
    else:
        return _local
    c = current()
    if c is not None:
        ex, vt = c
        code = frame.f_code
        text = linecache.getline(code.co_filename, frame.f_lineno).strip()
        ex.point(vt, Op(kind, None, (), star=True, where=(code.co_filename, frame.f_lineno),
                        label=f"{kind}: {text[:40]}"))
    return _local


def _global(frame: Any, event: str, arg: Any) -> Any:
    if event == "call" and traced_file(filename := frame.f_code.co_filename) and (
            filename[:1] != "<" or _users_namespace(frame.f_globals)):  # ("": compile(src, "", "exec"))
        frame.f_trace_opcodes = True
        return _local
    return None


def _users_namespace(namespace: dict) -> bool:
    """Whether code with no file of its own runs in the user's namespace: ``python -c``, the REPL, a doctest,
    ``exec`` in a module of theirs -- not a namedtuple's methods, nor a dataclass's made by this package or
    the standard library (a scheduling point inside the scheduler's own record broke the run)."""
    if str(namespace.get("__name__", "")).startswith("namedtuple_"):
        return False
    module_file = namespace.get("__file__")
    return not isinstance(module_file, str) or traced_file(module_file)


def trace_current_thread(on: bool) -> None:
    """Turn line mode on or off for the calling thread."""
    sys.settrace(_global if on else None)
