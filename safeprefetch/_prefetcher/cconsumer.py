"""The consumer's common call in C: a batch of a run, the take before it and the release after it.

What it guarantees
------------------
With ``runtime="typed"``, ``copy_prefetched``, ``get`` and ``next`` first ask ``F_Consumer.serve`` (Cython,
:data:`SOURCE`, built once per machine and cached like the typed transitions). It serves the common case:
nothing is stashed, backlogged or put back, no lease is out, no close has begun, no timeline is kept, no
SIGINT is deferred, the call is not made from inside another call of ours or from one of our workers, the
timeout is the default, None or a number of seconds up to 10^9, and, for a copy, ``out`` is a plain writeable
contiguous array of the batches' shape whose dtype object is the batches' own. Then it does what ``_serve``
does, in the same order, under the gate: the caller's pace folded into the run policy; when the run is used
up, a take (the occupancy sampled, a run of the length the policy picks asked of the kernel, the wait timed,
the run recorded); the slot copied out, the run advanced, the batch counted, the hand-out time recorded; and
after a run's last batch, its release. The take and the release are the kernel's own steps, made through
``Runtime.step`` (the C step under its protected Python frame), as the Python path makes them. For anything
else -- a stream that ended, a take with an autotuner, a take left unrecorded or a release left undone by an
interrupted call, an argument the Python path refuses -- it returns 0 having decided nothing, and the
call takes the Python path (``consumer.py``). A take that times out raises PrefetchTimeout, as there.

Why it is still interrupt-safe
------------------------------
The Python path's safety rests on where the interpreter can raise (``interrupts.py``). This C function has
no eval-breaker point of its own: apart from the kernel's steps it calls only C functions (the gate's
``_is_owned``, ``acquire(False)`` and ``release``, ``time.perf_counter``, numpy's copy or ``memmove`` for a
dtype that holds no objects, so that no element's finalizer runs), and it never waits for the gate: one
another thread holds sends the call to the Python path. Its allocation a collection can start at before
the hand-out is recorded, the outcome's tuple, comes before the checks that decide. Where it can raise:

* **At a take that ended the stream** (``F_out`` site 2): ``record_terminal``, protected, stashes how
  under the gate as ``_take_run`` does, and the call takes the Python path, which hands it out; raised
  before it, the next call finds the model consumer done and records it.
* **At a kernel step** (``F_out``: the take's, the release's), which is the protected Python wrapper. A
  SIGINT there is deferred, and delivered when the wrapper returns (it is the outermost protected frame),
  so it surfaces as an exception from the step, like any other the step raises. A take that raises before
  it is applied leaves nothing changed; one applied but not recorded is found by the next call
  (``_run_changed``) and served by the Python path; a release that raises leaves the run held and used up,
  and the next call gives it back. The outcome is recorded before the release, so a raise there finds it
  in ``handing`` (below).
* **At its return**, in the public method's frame, which is not protected: a signal that arrived since is
  handled there. So the outcome is not returned; it is recorded under the gate in ``handing``, keyed by
  the thread, and the public method takes it out of there on the line that returns it, with no call in
  between (a membership test, a subscript, a ``del`` and the store of ``last_index``'s position: the batch
  is the thread's only once handed out). An exception at the return or from a step finds it there:
  ``ConsumerSide.unhand`` puts it back for the next call, as ``unreturn`` does for the Python path (a copy
  outcome with its batch copied into memory the prefetcher owns, since the caller may write ``out`` before
  the next call). A consumer call made at that return (a signal handler's, a finalizer's) may take it
  first (``unhand``): the interrupted call then serves the next batch by the Python path.

``tests/test_cconsumer.py`` raises a ``KeyboardInterrupt`` at every call back into Python (``F_inject``)
and at the public methods' return, and checks that every batch arrives once and in order; the same calls
with the fast path and without give the same stream and statistics.

The numpy array fields it reads (the number of dimensions, the dimensions, the dtype, the flags, the data
address) are at their offsets in numpy's ``PyArrayObject_fields``, which have not moved since numpy 1.7
(no numpy headers are needed to build it); :func:`load` checks them against numpy's own answers for
arrays of several layouts, and without a match the fast path is off. The core's fields are read and
stored at their slots' offsets (``Core.__slots__``), found from their member descriptors.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any, Callable

import numpy as np

from .._check.extension import CompileUnavailable, build
from .._dsl.model import DONE
from .._runtime.ckernel import MEMBER_DECLS
from .._runtime.errors import StepTimeout
from .._runtime.interrupts import guard
from .errors import PrefetchTimeout
from ..models import _protocol as P
from . import cfetch, policy
from .consumer import COPY, DEFAULT, GET
from .policy import EWMA
from .sources import EXECUTING
from .waits import Gate

__all__ = ["SOURCE", "fast_path_for", "load"]

SOURCE = '''
# cython: language_level=3
from cpython.object cimport PyObject
from cpython.pythread cimport PyThread_get_thread_ident
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.float cimport PyFloat_FromDouble, PyFloat_AS_DOUBLE, PyFloat_CheckExact
from libc.string cimport memmove

cdef extern from *:
    \"\"\"
    typedef struct { PyObject_HEAD char *data; int nd; Py_ssize_t *dimensions; Py_ssize_t *strides;
                     PyObject *base; PyObject *descr; int flags; } F_Array;
    \"\"\"
    ctypedef struct F_Array:
        char* data
        int nd
        Py_ssize_t* dimensions
        PyObject* descr
        int flags

''' + MEMBER_DECLS + '''
# numpy's flags: C_CONTIGUOUS, F_CONTIGUOUS, WRITEABLE; WRITEBACKIFCOPY and the warn-on-write mark of a
# broadcast result (a write to one warns: Python code) send the call to the Python path.
cdef enum:
    F_C_CONTIG = 0x1
    F_CONTIG = 0x3
    F_WRITEABLE = 0x400
    F_REFUSED = 0x2000 | (1 << 31)
    F_NOGIL_BYTES = 65536  # a copy from this size on is made with the GIL released, as numpy's would be

import types as F_types
cdef object F_MemberDescriptor = F_types.MemberDescriptorType
cdef object F_ndarray = None
cdef object F_copyto = None
cdef object F_array = None
cdef object F_perf = None
cdef object F_guard = None
cdef object F_EXECUTING = None
cdef object F_DEFAULT = None
cdef object F_COPY = None
cdef object F_GET = None
cdef object F_RELEASE = None
cdef object F_NO = "no"
cdef object F_FALSE = False
cdef object F_is_owned = None
cdef object F_acquire = None
cdef object F_release = None
cdef double F_EWMA = 0.0
cdef long long F_served = 0


cdef object F_StepTimeout = None
cdef object F_PrefetchTimeout = None


def F_timeouts(step_timeout, prefetch_timeout):
    \"\"\"The kernel's StepTimeout and the PrefetchTimeout a take that timed out raises instead.\"\"\"
    global F_StepTimeout, F_PrefetchTimeout
    F_StepTimeout, F_PrefetchTimeout = step_timeout, prefetch_timeout


def F_bind(ndarray, copyto, array, perf, guard, executing, default, copy, get, release, double ewma, rlock):
    \"\"\"The Python values the fast path uses (bound once, after loading); ``rlock``: the gate's C base class,
    whose methods it calls unbound (no bound method is made).\"\"\"
    global F_ndarray, F_copyto, F_array, F_perf, F_guard, F_EXECUTING, F_DEFAULT, F_COPY, F_GET, F_RELEASE
    global F_EWMA, F_is_owned, F_acquire, F_release
    F_ndarray, F_copyto, F_array, F_perf, F_guard = ndarray, copyto, array, perf, guard
    F_EXECUTING, F_DEFAULT, F_COPY, F_GET, F_RELEASE, F_EWMA = executing, default, copy, get, release, ewma
    F_is_owned, F_acquire, F_release = rlock._is_owned, rlock.acquire, rlock.release


def F_fields(a):
    \"\"\"What the fast path reads of array ``a``: (dimensions, the dtype object, the flags, the data address).\"\"\"
    cdef F_Array* p = <F_Array*><PyObject*>a
    return tuple([p.dimensions[i] for i in range(p.nd)]), <object>p.descr, p.flags, <size_t>p.data


def F_count():
    \"\"\"How many batches the fast path served (all prefetchers).\"\"\"
    return F_served


# The test hook, as the kernel's C step has (ckernel.K_inject): every call back into Python counts, per thread;
# the one that brings F_countdown to zero on thread F_thread raises F_exception instead of being made.
cdef long long F_countdown = -1
cdef unsigned long F_thread = 0
cdef object F_exception = None
cdef long long F_site_calls[3]


def F_inject(long long countdown, unsigned long thread, exception):
    \"\"\"Raise ``exception`` at the ``countdown``-th call back into Python on ``thread`` from now instead of
    making it (-1: never), and count that thread's calls per site (F_SITES) from zero.\"\"\"
    global F_countdown, F_thread, F_exception
    F_countdown, F_thread, F_exception = countdown, thread, exception
    F_site_calls[0] = F_site_calls[1] = F_site_calls[2] = 0


def F_sites():
    \"\"\"Since ``F_inject``: its thread's calls back into Python, per site.\"\"\"
    return [F_site_calls[0], F_site_calls[1], F_site_calls[2]]


cdef inline int F_out(int site) except -1:
    global F_countdown
    if F_thread != 0 and PyThread_get_thread_ident() == F_thread:
        F_site_calls[site] += 1
        if F_countdown >= 0:
            F_countdown -= 1
            if F_countdown < 0:
                raise F_exception
    return 0


cdef Py_ssize_t F_offset(object klass, str name) except -1:
    \"\"\"The offset of ``klass``'s slot ``name`` (an object slot, found first along its MRO), else TypeError.\"\"\"
    for base in klass.__mro__:
        found = vars(base).get(name)
        if found is not None:
            if type(found) is not F_MemberDescriptor \\
                    or (<PyMemberDescrObject*><PyObject*>found).d_member.type != 16 \\
                    or (<PyMemberDescrObject*><PyObject*>found).d_member.flags != 0:
                break
            return (<PyMemberDescrObject*><PyObject*>found).d_member.offset
    raise TypeError(f"{klass.__name__}.{name} is not an object slot the fast path can read")


cdef inline PyObject* F_get(object o, Py_ssize_t off):
    return (<PyObject**>((<char*><PyObject*>o) + off))[0]


cdef inline void F_put(object o, Py_ssize_t off, object value):
    cdef PyObject** at = <PyObject**>((<char*><PyObject*>o) + off)
    cdef PyObject* old = at[0]
    Py_INCREF(value)
    at[0] = <PyObject*>value
    Py_XDECREF(old)


cdef inline int F_copy(object dst, object src, bint raw, Py_ssize_t nbytes) except -1:
    """Copy array ``src`` into ``dst``, of the same shape and dtype object: their bytes when the dtype is plain
    and both are C-contiguous (with the GIL released from F_NOGIL_BYTES, as numpy's copy would), else numpy's
    copy. (``memmove``: nothing here rules out that they overlap.)"""
    cdef char* d = (<F_Array*><PyObject*>dst).data
    cdef char* s = (<F_Array*><PyObject*>src).data
    if not (raw and ((<F_Array*><PyObject*>dst).flags & F_C_CONTIG)
            and ((<F_Array*><PyObject*>src).flags & F_C_CONTIG)):
        F_copyto(dst, src, F_NO)
    elif nbytes >= F_NOGIL_BYTES:
        with nogil:
            memmove(d, s, nbytes)
    else:
        memmove(d, s, nbytes)
    return 0


cdef inline void F_fill(tuple t, Py_ssize_t j, object v):
    Py_INCREF(v)
    PyTuple_SET_ITEM(t, j, v)


# The core's slots the fast path reads or stores, in this order (cconsumer.CORE_SLOTS).
cdef enum:
    C_FORKED, C_STASH, C_RETURNED, C_BACKLOG, C_HANDING, C_CLOSE_STARTED, C_ENDED_WITH, C_LEASE_OUT, C_SPANS
    C_RUN, C_RUN_NEXT, C_RUN_DELIVERED, C_N


cdef class F_Consumer:
    \"\"\"One prefetcher's fast path: what it reads that never changes, and the offsets of what does.\"\"\"
    cdef object core, gate, worker_idents, rt, i_pc, i_delivered, runs, counts, slot_views, last_seen, dtype
    cdef object consumer, i_slots, i_lease, branches, policy, done, ready, failed, timeout
    cdef Py_ssize_t off[C_N]
    cdef Py_ssize_t o_state, o_ewma, o_last_call, o_delivered, o_wait, o_occ_sum, o_occ_n, o_occ_max
    cdef Py_ssize_t nd, nbytes
    cdef Py_ssize_t shape[32]
    cdef bint gets, raw, takes

    def __init__(self, core, tuple slots, bint gets, bint raw, bint takes, policy, done, ready, failed):
        cdef Py_ssize_t j
        for j, name in enumerate(slots):
            self.off[j] = F_offset(type(core), name)
        self.core, self.gate, self.worker_idents, self.rt = core, core.gate, core.worker_idents, core.rt
        self.i_pc, self.i_delivered = core.i_consumer_pc, core.i_delivered
        self.runs, self.counts = core.runs, core.counts
        self.slot_views, self.last_seen, self.dtype = list(core.slot_views), core.last_seen, core.dtype
        self.o_state = F_offset(type(core.rt), "_state")
        self.o_ewma, self.o_last_call = F_offset(type(core.runs), "ewma"), F_offset(type(core.runs), "last_call")
        self.o_delivered = F_offset(type(core.counts), "delivered")
        shape = tuple(core.shape)
        if len(shape) > 32:
            raise TypeError("more than 32 dimensions")
        self.nd = len(shape)
        for j in range(self.nd):
            self.shape[j] = shape[j]
        self.nbytes = self.slot_views[0].nbytes
        self.gets, self.raw, self.takes = gets, raw, takes
        self.timeout = core.timeout  # the prefetcher's own, for a call's default
        # The take: the model consumer's thread, the state's fields it reads, a branch tuple per run length (the
        # run policy's ``branches``, made once), the policy module (its RUN_BUDGET, read at each take).
        self.consumer, self.i_slots, self.i_lease = core.consumer, core.i_slots, core.i_lease
        self.branches = tuple([(t,) + tuple(core.runs.stream_ends) for t in core.runs.takes])
        self.policy, self.done, self.ready, self.failed = policy, done, ready, failed
        counted = type(core.counts)
        self.o_wait, self.o_occ_sum = F_offset(counted, "wait_seconds"), F_offset(counted, "occupancy_sum")
        self.o_occ_n, self.o_occ_max = F_offset(counted, "occupancy_samples"), F_offset(counted, "occupancy_max")

    cdef object branch(self):
        """The run policy's ``branches(single=False)``: a run of the length the caller's pace allows."""
        cdef Py_ssize_t n = len(self.branches), r
        cdef double q, per
        cdef PyObject* p = F_get(self.runs, self.o_ewma)
        if p == NULL or not PyFloat_CheckExact(<object>p) or n == 1:
            return self.branches[0]
        per = PyFloat_AS_DOUBLE(<object>p)
        if per <= 0:
            return self.branches[n - 1]
        q = <double>self.policy.RUN_BUDGET / per
        r = n if q >= n else (<Py_ssize_t>q if q >= 1 else 1)
        return self.branches[r - 1]

    cdef bint take_run(self, object state, object wait) except -1:
        """``_take_run``'s common path, the lock-free part in C and the step by the kernel: False when the
        stream ended (the Python path then says how)."""
        cdef Py_ssize_t ready = 0
        cdef double t0
        cdef object counts = self.counts, core = self.core, after
        for pair in <tuple>state[self.i_slots]:
            st = (<tuple>pair)[0]
            if st == self.ready or st == self.failed:
                ready += 1
        F_put(counts, self.o_occ_sum, <object>F_get(counts, self.o_occ_sum) + ready)
        F_put(counts, self.o_occ_n, <object>F_get(counts, self.o_occ_n) + 1)
        if ready > <Py_ssize_t><object>F_get(counts, self.o_occ_max):
            F_put(counts, self.o_occ_max, ready)
        branch = self.branch()
        t0 = PyFloat_AS_DOUBLE(F_perf())
        try:
            F_out(0)
            self.rt.step(self.consumer, branch, wait, chain=False, then=branch)
        except F_StepTimeout:
            raise F_PrefetchTimeout("no batch within the timeout") from None
        finally:
            F_put(counts, self.o_wait, PyFloat_FromDouble(
                PyFloat_AS_DOUBLE(<object>F_get(counts, self.o_wait)) + (PyFloat_AS_DOUBLE(F_perf()) - t0)))
        after = <object>F_get(self.rt, self.o_state)
        if after[self.i_pc] == self.done:
            # The stream ended: its outcome recorded now, under the gate, as ``_take_run`` does (left to the
            # Python path's next look, a close begun meanwhile turned the take's own outcome into "is closed").
            F_out(2)
            core.record_terminal()
            return False
        slots = after[self.i_slots]
        run = tuple([(k, slots[k][1]) for k in after[self.i_lease]])
        F_put(core, self.off[C_RUN], run)
        F_put(core, self.off[C_RUN_NEXT], 0)
        F_put(core, self.off[C_RUN_DELIVERED], after[self.i_delivered])
        return True

    cdef inline bint fits(self, object out):
        cdef F_Array* a = <F_Array*><PyObject*>out
        cdef Py_ssize_t i
        if a.descr != <PyObject*>self.dtype or (a.flags & F_WRITEABLE) == 0 or (a.flags & F_CONTIG) == 0 \\
                or (a.flags & F_REFUSED) != 0 or a.nd != self.nd:
            return False
        for i in range(self.nd):
            if a.dimensions[i] != self.shape[i]:
                return False
        return True

    def serve(self, out, timeout, bint copy):
        \"\"\"Serve this call's batch if the common case holds: the calling thread's ident, its outcome
        recorded in ``core.handing`` under that ident; 0 (nothing done) otherwise.\"\"\"
        global F_served
        cdef Py_ssize_t i
        cdef PyObject* p
        cdef object core = self.core, ident, pos, value, data, view
        cdef tuple entry, run
        cdef double per
        cdef Py_ssize_t nbytes = self.nbytes
        p = F_get(core, self.off[C_RUN])
        if p == NULL or type(<object>p) is not tuple or F_get(core, self.off[C_RUN_NEXT]) == NULL:
            return 0
        run = <tuple>p
        i = <Py_ssize_t><object>F_get(core, self.off[C_RUN_NEXT])
        if i >= len(run) and not self.takes:  # a take with an autotuner: the Python path
            return 0
        if timeout is F_DEFAULT:
            wait = self.timeout
        elif timeout is None or (type(timeout) is float and 0.0 <= <double>timeout <= 1e9) \\
                or (type(timeout) is int and 0 <= timeout <= 1000000000):
            wait = timeout  # a valid timeout the step takes as it is (any other: the Python path's error)
        else:
            return 0
        if F_guard.deferred or F_EXECUTING:
            return 0
        if copy:
            if type(out) is not F_ndarray or not self.fits(out):
                return 0
        elif not self.gets:
            return 0
        # The outcome's tuple before the checks that decide: a collection this allocation starts runs its
        # finalizers (which may close the prefetcher) before them.
        entry = PyTuple_New(5)
        if F_get(core, self.off[C_STASH]) != <PyObject*>None or F_get(core, self.off[C_ENDED_WITH]) != <PyObject*>None \
                or F_get(core, self.off[C_LEASE_OUT]) != <PyObject*>None \
                or F_get(core, self.off[C_SPANS]) != <PyObject*>None \
                or F_get(core, self.off[C_FORKED]) != <PyObject*>F_FALSE \
                or F_get(core, self.off[C_CLOSE_STARTED]) != <PyObject*>F_FALSE \
                or F_get(core, self.off[C_RETURNED]) == NULL or F_get(core, self.off[C_BACKLOG]) == NULL \
                or F_get(core, self.off[C_HANDING]) == NULL or F_get(core, self.off[C_RUN_DELIVERED]) == NULL:
            return 0
        if <object>F_get(core, self.off[C_RETURNED]) or <object>F_get(core, self.off[C_BACKLOG]) \
                or <object>F_get(core, self.off[C_HANDING]):
            return 0
        if F_get(core, self.off[C_RUN]) != <PyObject*>run \
                or <Py_ssize_t><object>F_get(core, self.off[C_RUN_NEXT]) != i:
            return 0
        if F_is_owned(self.gate):
            return 0
        ident = PyThread_get_thread_ident()
        if ident in self.worker_idents or not F_acquire(self.gate, False):
            return 0
        try:
            p = F_get(self.rt, self.o_state)
            if p == NULL:
                return 0
            state = <object>p
            pc = state[self.i_pc]
            if pc == F_RELEASE:
                if state[self.i_delivered] != <object>F_get(core, self.off[C_RUN_DELIVERED]) or i >= len(run):
                    return 0  # a take whose call was interrupted, or a release left undone: the Python path
            elif i < len(run) or pc == self.done:
                return 0
            runs = self.runs
            p = F_get(runs, self.o_last_call)
            if p != NULL and PyFloat_CheckExact(<object>p):
                per = PyFloat_AS_DOUBLE(F_perf()) - PyFloat_AS_DOUBLE(<object>p)
                p = F_get(runs, self.o_ewma)
                if p != NULL and PyFloat_CheckExact(<object>p):
                    F_put(runs, self.o_ewma, PyFloat_FromDouble(
                        PyFloat_AS_DOUBLE(<object>p) + F_EWMA * (per - PyFloat_AS_DOUBLE(<object>p))))
                else:
                    F_put(runs, self.o_ewma, PyFloat_FromDouble(per))
            if i >= len(run):
                if not self.take_run(state, wait):
                    return 0  # the stream ended: the Python path hands out how
                run, i = <tuple>F_get(core, self.off[C_RUN]), 0
            slot, pos = <tuple>run[i]
            view = self.slot_views[slot]
            if copy:
                F_copy(out, view, self.raw, nbytes)
                value, data = True, out
            else:
                data = value = F_array(view)
            F_fill(entry, 0, F_COPY if copy else F_GET); F_fill(entry, 1, value); F_fill(entry, 2, pos)
            F_fill(entry, 3, data); F_fill(entry, 4, None)
            # The outcome is recorded, and the run advanced past it, with no call back into Python between.
            (<dict>F_get(core, self.off[C_HANDING]))[ident] = entry
            F_put(core, self.off[C_RUN_NEXT], i + 1)
            F_put(self.counts, self.o_delivered, <object>F_get(self.counts, self.o_delivered) + 1)
            F_put(runs, self.o_last_call, F_perf())
            F_served += 1
            if i + 1 >= len(run):  # the run's last batch: given back now, as ``_release_run`` does
                F_out(1)
                self.rt.step(self.consumer)
        finally:
            F_release(self.gate)
        # (``last_pos`` is set by the public method as it hands the batch out: a batch put back is not this
        # thread's until it is handed out again.)
        return ident
'''

#: The loaded module (one per process), or None when it could not be built or failed its check.
_LOADED: list[Any] = []


def load() -> ModuleType | None:
    """The built module, bound (built on first use, then cached); None without Cython or a C compiler, or
    when the array fields it reads are not where it reads them."""
    if _LOADED:
        return _LOADED[0]
    try:
        module = build(SOURCE + cfetch.SOURCE, "safeprefetch consumer fast path")
    except CompileUnavailable:
        module = None
    serve = None
    if module is not None and _fields_match(module[0]):
        m: ModuleType = module[0]
        m.F_bind(np.ndarray, getattr(np.copyto, "_implementation", np.copyto), np.array, time.perf_counter, guard,
                 EXECUTING, DEFAULT, COPY, GET, P.RELEASE, EWMA, Gate.__mro__[1])
        m.F_timeouts(StepTimeout, PrefetchTimeout)
        serve = m
    _LOADED.append(serve)
    return serve


def _fields_match(module: ModuleType) -> bool:
    """Whether the fields the fast path reads agree with numpy's own answers, for arrays of every layout."""
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    ro = np.zeros((5, 2), dtype=np.int64)
    ro.flags.writeable = False
    cases = [base, np.asfortranarray(base), base[:, ::2], ro, np.zeros((), np.uint8), base.T,
             np.broadcast_arrays(base, base)[0], np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])]
    for a in cases:
        dims, descr, flags, data = module.F_fields(a)
        want = (a.flags.c_contiguous * 0x1 | a.flags.f_contiguous * 0x2 | a.flags.writeable * 0x400)
        if dims != a.shape or descr is not a.dtype or (flags & 0x403) != want \
                or data != a.__array_interface__["data"][0]:
            return False
    return True


#: The core's slots the fast path reads or stores, at their offsets (the order of the C enum ``C_*``).
CORE_SLOTS = ("forked", "stash", "returned", "backlog", "handing", "close_started", "ended_with", "lease_out",
              "spans", "run", "run_next", "run_delivered")


def fast_path_for(core: Any, runtime: str) -> Callable[..., int] | None:
    """The fast path for ``core`` (``runtime="typed"``, a real gate, a dtype that holds no objects and a
    known batch shape, its slots C-contiguous), as a bound ``serve(out, timeout, copy)``; else None: every
    call takes the Python path."""
    if runtime != "typed" or type(core.gate) is not Gate or core.pool is None or core.dtype.hasobject \
            or not core.slot_views or not all(v.flags.c_contiguous for v in core.slot_views) \
            or len(core.shape) > 32:  # (F_Consumer keeps at most 32 dimensions; numpy 2 allows 64)
        return None
    module = load()
    if module is None:
        return None
    dtype = core.dtype
    gets = core.own_copy is np.array
    raw = dtype.fields is None and dtype.subdtype is None  # a plain dtype: the batch is its bytes, copied whole
    takes = core.autotuner is None  # a take with nothing to tune after it
    serve = module.F_Consumer(core, CORE_SLOTS, gets, raw, takes, policy, DONE, P.READY, P.FAILED).serve
    cfetch.install(core, module)
    return serve
