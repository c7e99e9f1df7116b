"""The worker's fetch in C: a map-style source's item read and copied into its slot.

What it guarantees
------------------
With ``runtime="typed"``, the model's external action "fetch into slot" is ``F_Fetcher.fetch`` (Cython,
:data:`SOURCE`, built into the same module as the consumer's call, ``cconsumer.py``) in place of
``FetchSide._fetch``. It does what ``_fetch`` and ``_fill`` do for the common case, in the same order: the
worker's position and slot from the step's snapshot; nothing after close; nothing once the Prefetcher is
collected; the source index from the plan; the source's ``__getitem__``; an item that is a plain array of the
batch's shape and dtype object copied into the slot (a ``memmove`` of its bytes when both are C-contiguous and
the dtype is plain, with the GIL released from 64 KiB as numpy's copy would, else numpy's copy), or, for a
``fetch_into`` source, its call on the slot judged by ``fill_into``; the seconds counted as fetch time. Any
other item goes through ``_check`` (its error, or the same copy as the Python path), and any exception is
published at its position by ``fetch_failed``, the Python path's own code. A source with a lock
(``thread_safe=False``), an executor, an iterator, a preloaded first item or a timeline takes ``_fetch``
itself, called from here.

Why it is safe to run here
--------------------------
It runs on a worker thread, inside the kernel's external step, outside the kernel lock, where ``_fetch``
runs; the slot it writes is FILLING by this worker in the step's snapshot, as there. It calls Python only
where ``_fetch`` does (the source, ``_check``, ``fetch_failed``, ``_fetch`` itself), and every exception it
can meet there is published at the item's position, as ``_fetch`` does. The fields it reads are the
SourceBox's and the ActionContext's slots (the latter only in an ActionContext whose slots are set: anything
else takes ``_fetch``), the core's ``spans`` and the runtime's ``_state``, at their offsets. ``tests/test_cfetch.py`` compares its stream and
its errors with the Python action's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._runtime.entries import ActionContext
from ..models import _protocol as P
from .filling import fill_into
from .sources import SourceBox

__all__ = ["SOURCE", "install"]

SOURCE = '''

# ---- The worker's fetch in C: safeprefetch/_prefetcher/cfetch.py ----

cdef object F_ok = "ok"


cdef class F_Fetcher:
    """One prefetcher's fetch action: what it reads that never changes, and the offsets of what does."""
    cdef object core, rt, worker_fields, source_ref, plan_item, slot_views, fetch_seconds, dtype
    cdef object py_fetch, failed, check, np_copyto, fill_into, where, context
    cdef Py_ssize_t i_closing, o_state, o_spans, nd, nbytes
    cdef Py_ssize_t o_thread, o_snapshot, o_getitem, o_lock, o_executor, o_fetch_into, o_iterator, o_preloaded
    cdef Py_ssize_t shape[32]
    cdef bint raw

    def __init__(self, core, context, box, bint raw, np_copyto, fill_into):
        cdef Py_ssize_t j
        self.core, self.rt, self.worker_fields = core, core.rt, dict(core.worker_fields)
        self.source_ref, self.slot_views, self.dtype = core.source_ref, list(core.slot_views), core.dtype
        self.plan_item = core.plan.item if core.plan is not None else None
        self.fetch_seconds = core.counts.fetch_seconds
        self.py_fetch, self.failed, self.check, self.np_copyto = core._fetch, core.fetch_failed, core._check, np_copyto
        self.fill_into, self.where, self.context = fill_into, core._where, context
        self.i_closing = core.i_closing
        self.o_state, self.o_spans = F_offset(type(core.rt), "_state"), F_offset(type(core), "spans")
        self.o_thread, self.o_snapshot = F_offset(context, "thread"), F_offset(context, "state")
        self.o_getitem, self.o_lock = F_offset(box, "getitem"), F_offset(box, "lock")
        self.o_executor, self.o_fetch_into = F_offset(box, "executor"), F_offset(box, "fetch_into")
        self.o_iterator, self.o_preloaded = F_offset(box, "iterator"), F_offset(box, "preloaded")
        shape = tuple(core.shape)
        self.nd = len(shape)
        for j in range(self.nd):
            self.shape[j] = shape[j]
        self.nbytes, self.raw = self.slot_views[0].nbytes, raw

    cdef inline bint fits(self, object item):
        cdef F_Array* a = <F_Array*><PyObject*>item
        cdef Py_ssize_t i
        if a.descr != <PyObject*>self.dtype or a.nd != self.nd:
            return False
        for i in range(self.nd):
            if a.dimensions[i] != self.shape[i]:
                return False
        return True

    def fetch(self, ctx):
        """The action "fetch into slot" for the step whose context is ``ctx``: "ok" or "error"."""
        cdef double t0
        cdef PyObject* p
        cdef Py_ssize_t nbytes = self.nbytes
        if type(ctx) is not self.context or F_get(ctx, self.o_thread) == NULL \\
                or F_get(ctx, self.o_snapshot) == NULL:
            return self.py_fetch(ctx)  # its slots are read at their offsets: only in an ActionContext that has them
        w, i_idx, i_slot = self.worker_fields[<object>F_get(ctx, self.o_thread)]
        snapshot = <object>F_get(ctx, self.o_snapshot)
        pos, k = snapshot[i_idx], snapshot[i_slot]
        if (<object>F_get(self.rt, self.o_state))[self.i_closing]:
            return F_ok  # the model discards a fetch that lands after close
        box = self.source_ref()
        if box is None:
            return F_ok  # the Prefetcher was collected: its finalizer has asked for the close
        if F_get(self.core, self.o_spans) != <PyObject*>None or F_get(box, self.o_lock) != <PyObject*>None \\
                or F_get(box, self.o_executor) != <PyObject*>None or F_get(box, self.o_fetch_into) == NULL \\
                or F_get(box, self.o_iterator) != <PyObject*>None or F_get(box, self.o_getitem) == NULL \\
                or F_get(box, self.o_preloaded) == NULL or <object>F_get(box, self.o_preloaded):
            return self.py_fetch(ctx)
        fetch_into = <object>F_get(box, self.o_fetch_into)
        if fetch_into is None and F_get(box, self.o_getitem) == <PyObject*>None:
            return self.py_fetch(ctx)
        slot = self.slot_views[k]
        t0 = PyFloat_AS_DOUBLE(F_perf())
        try:
            index = pos if self.plan_item is None else self.plan_item(pos)
            if fetch_into is not None:  # the source fills the slot itself: fill_into judges what it did
                problem = self.fill_into(fetch_into, index, slot)
                if problem is not None:
                    raise TypeError(f"{self.where(pos)}: {problem}")
                return F_ok
            item = (<object>F_get(box, self.o_getitem))(index)
            if type(item) is F_ndarray and self.fits(item):
                F_copy(slot, item, self.raw, nbytes)
            else:
                self.check(pos, item)
                self.np_copyto(slot, item, casting="no")
            return F_ok
        except BaseException as e:
            return self.failed(box, pos, e)
        finally:
            self.fetch_seconds[w] += PyFloat_AS_DOUBLE(F_perf()) - t0
'''


def install(core: Any, module: Any) -> None:
    """Make ``module.F_Fetcher`` ``core``'s fetch action (before its workers start), for any batch dtype the
    consumer's fast path takes (an item of another dtype object, or of a dtype that is not plain, is checked
    and copied by numpy as ``_fill`` does); ``_fetch`` stays only for a plan that is not a 1-d integer array."""
    if core.plan is not None and (core.plan.dtype.kind not in "iu" or core.plan.ndim != 1):
        return
    dtype = core.dtype
    raw = dtype.fields is None and dtype.subdtype is None
    fetcher = module.F_Fetcher(core, ActionContext, SourceBox, raw, np.copyto, fill_into)
    core.rt.actions[P.ACTION_FETCH] = fetcher.fetch
