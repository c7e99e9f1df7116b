"""The kernel's step in C: ``Runtime.step``'s common path, compiled with the typed transitions.

What it guarantees
------------------
``Runtime(..., kernel=K)`` (the Prefetcher's ``runtime="typed"``) runs ``step`` through :data:`SOURCE`,
Cython appended to the typed transitions' module and built with it. It is ``kernel.py``'s step, line for
line, with its common path written in C: enter, take the thread's generated step (its typed ``first``, or
the branch asked for), store the successor with its debt, count and record, wake the parked threads of the
branch's wake set, park and take the step again when it is not enabled, chain the next plain step, and the
external step's two critical sections around its action. Everything else -- the wait itself, a debt or a
failure found on entry, a branch only the generic path serves, a violation, an invariant to check outside
the transition, a re-entrant call, the run's end -- calls the Python method that handles it (``_begin``,
``_park``, ``_still_wanted``, ``_take``, ``_apply``, ``_enabled``, ``_settle``, ``_wake_enabled``, ``_fail``,
``_thread_index``, ``_reentered``, ``detect``) at the same point and with the lock in the same hands as the
Python step would. So every path the C step does not decide itself is the Python kernel's, and the ones it
does decide are the same stores in the same order: ``tests/test_ckernel.py`` runs the two side by side on the
same calls and compares the records and the states, step by step.

Why it is still interrupt-safe
------------------------------
The Python kernel's safety rests on where the interpreter can raise: at its eval-breaker points, which the
injection sweeps (``tests/test_interrupts.py``, ``python -m safeprefetch inject``) stop at one by one. C
code has none of its own. A signal handler, a finalizer or an exception can reach the C step only where it
calls back into Python: a transition or guard (the typed ones call the generated Python function on a
fallback), an action, a Python method of the kernel, ``lock.acquire`` (which runs signal handlers while
it blocks), or, on 3.11, an allocation that starts a collection whose finalizers run. The arrangement
around those points is the Python kernel's, and is checked the same way:

* Every call back into Python goes through ``K_out()``, which can raise instead of making the call, or run
  a function there first (a test hook, ``K_inject``: the k-th call on a given thread). (Clearing a reused
  context's slots after its action, outside the lock, can free what the action wrote there and run its
  finalizer, as dropping the context at the step's end always could: nothing of the kernel's is held there.)
  ``tests/test_ckernel.py`` raises a ``KeyboardInterrupt`` at every one of them in turn, on the consumer's
  and on a worker's thread, and checks that the run still delivers every batch once, in order, and leaves
  no lock held and no wakeup owed -- the C analogue of injecting at every line; and runs a signal
  handler's ``close()`` at every one of them, which must return within its bound.
* The lock is taken by ``acquire`` and released in a ``finally`` with nothing between them: there is no
  point there where anything can run.
* A step's successor, its debt (``_owed``), its count and its record are stored with no call back into
  Python between the first store and the last: the record's tuple, the one allocation, is built before
  the first. (Replacing the state frees the old one: model values, which run no finalizer.)
* The wakeups owed are paid by the next entry if the wake-up loop is cut short (the guard calls in it
  call Python), and a woken thread is unmarked, counted and given its token with no call between.
* A finalizer or handler that runs inside a call back into Python on this thread finds the lock owned and
  only records a failure (``fail``) or refuses to re-enter (``_reentered``), as with the Python step; the
  C step checks ``_failure`` after its stores, as ``_wake_set`` and ``step`` do.
* The wrapper in ``Runtime.step`` stays Python and protected: a SIGINT arriving while the C step runs (in
  a call back into Python) finds a protected frame and is deferred, then delivered when the step returns,
  as before.

The fields the C step reads and writes (:data:`FIELDS`) are ``Runtime``'s slots, and it reaches them at the
slots' offsets, as their descriptors do: the new value is stored, then the old one dropped (whose freeing runs
no Python code: model values, counts, debts). Python reads them through the same slots. ``K_Kernel`` refuses a
runtime class that puts anything else under one of those names (a property, a slot of its own: the stores
would bypass it). An external step's ``ActionContext`` is filled at its slots' offsets too, and one that
nobody kept after its action returned -- its reference count is the C step's one; it takes no weak
reference -- has every slot cleared (whatever the action wrote there too) and is filled again by the next
external step on that thread, unless someone took it from the cache meanwhile (``gc.get_objects()``): a
context anyone keeps is never touched again, and the cache holds nothing (no runtime, no cycle). The cache's
list is reachable too (``gc.get_referents`` of the kernel): only an ``ActionContext`` found there is refilled.
``K_Kernel.step`` refuses, in C, an object that is not an instance of the class whose slot offsets it holds:
in anything else they are raw memory. A runtime class that overrides one of the methods whose work the C step
does itself (:data:`REPLACED`) is given the Python step (``Runtime.__init__``): the override would be
bypassed. (A method replaced on an instance after construction is not seen.)
"""

from __future__ import annotations

__all__ = ["FIELDS", "MEMBER_DECLS", "REPLACED", "SITES", "SOURCE"]

#: The calls back into Python, by the number ``K_out`` gives each (``K_sites``).
SITES = (
    "thread index", "deadline", "re-entered", "acquire", "action context", "action", "acquire again",
    "acquire to fail", "fail", "begin", "begin, done", "settle", "transition", "python take", "wake enabled",
    "detect at done", "detect at spurious", "wake all", "wake guard", "chain's truth", "python apply", "park",
    "still wanted",
)

#: The runtime fields the C step reads or stores: ``Runtime``'s slots, at their offsets (in this order).
FIELDS = ("_state", "_owed", "_failure", "_nparked", "steps", "record", "actions")

#: The runtime's methods the C step does the work of on its common path (it calls the others). A runtime class
#: that overrides one of them keeps the Python step: the C step would bypass the override.
REPLACED = ("_begin", "_take_locked", "_take", "_chain", "_apply", "_wake_set", "_enabled")

#: CPython's member descriptor, as the compiled modules that read slots at their offsets declare it (this one,
#: and the consumer's, ``_prefetcher/cconsumer.py``).
MEMBER_DECLS = '''cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
'''

SOURCE = '''

# ---- The kernel's step in C: safeprefetch/_runtime/ckernel.py (appended to the typed transitions) ----

from cpython.pythread cimport PyThread_get_thread_ident
from cpython.object cimport PyObject, PyTypeObject, PyObject_TypeCheck
from cpython.ref cimport Py_INCREF, Py_XDECREF, Py_REFCNT

''' + MEMBER_DECLS + '''
# The runtime's fields (FIELDS, in that order) are slots of Runtime: the C step reads and stores them at their
# offsets, as the slots' descriptors do (store the new value, then drop the old one), without a lookup.
cdef enum:
    K_STATE = 0
    K_OWED = 1
    K_FAILURE = 2
    K_NPARKED = 3
    K_STEPS = 4
    K_RECORD = 5
    K_ACTIONS = 6
    K_NFIELDS = 7
    K_T_OBJECT_EX = 16  # structmember.h's T_OBJECT_EX: an object slot, NULL while unset
import types as K_types
cdef object K_MemberDescriptor = K_types.MemberDescriptorType


cdef object K_slot(object klass, str name):
    """``klass``'s own slot ``name`` (an object slot that can be set): its descriptor, else TypeError."""
    found = vars(klass).get(name)
    if type(found) is not K_MemberDescriptor \
            or (<PyMemberDescrObject*><PyObject*>found).d_member.type != K_T_OBJECT_EX \
            or (<PyMemberDescrObject*><PyObject*>found).d_member.flags != 0:
        raise TypeError(f"{klass.__name__}.{name} is not an object slot the C step can store")
    return found


cdef inline Py_ssize_t K_offset(object slot):
    return (<PyMemberDescrObject*><PyObject*>slot).d_member.offset


cdef inline object K_get(object rt, Py_ssize_t off):
    cdef PyObject* p = (<PyObject**>((<char*><PyObject*>rt) + off))[0]
    if p is NULL:
        raise AttributeError("a runtime field the C step reads is not set")
    return <object>p


cdef inline int K_put(object rt, Py_ssize_t off, object value) except -1:
    cdef PyObject** at = <PyObject**>((<char*><PyObject*>rt) + off)
    cdef PyObject* old = at[0]
    Py_INCREF(value)
    at[0] = <PyObject*>value
    Py_XDECREF(old)
    return 0

cdef object K_GENERIC = None
cdef object K_DONE = None
cdef object K_EVERYTHING = None
cdef object K_INF = float("inf")
cdef object K_detect = None
cdef object K_LiveError = None
cdef object K_ActionContext = None
# ActionContext's slots: runtime, thread, state, label, _me.
cdef Py_ssize_t K_ctx_off[5]
cdef object K_monotonic = None
cdef object K_seconds = None

# The test hook: every call back into Python counts, per thread; the one that brings K_countdown to zero on
# thread K_thread raises K_exception instead of being made.
cdef long long K_calls = 0
cdef long long K_countdown = -1
cdef unsigned long K_thread = 0
cdef object K_exception = None
cdef long long K_site_calls[@NSITES@]
cdef int K_fired = -1


def K_bind(generic, done, everything, detect, live_error, action_context, monotonic, seconds):
    """The Python values the C step uses (bound once, after loading)."""
    global K_GENERIC, K_DONE, K_EVERYTHING, K_detect, K_LiveError, K_ActionContext, K_monotonic, K_seconds
    K_GENERIC, K_DONE, K_EVERYTHING, K_detect = generic, done, everything, detect
    K_LiveError, K_ActionContext, K_monotonic, K_seconds = live_error, action_context, monotonic, seconds
    for i, name in enumerate(("runtime", "thread", "state", "label", "_me")):
        K_ctx_off[i] = K_offset(K_slot(action_context, name))


def K_inject(long long countdown, unsigned long thread, exception):
    """Raise ``exception`` at the ``countdown``-th call back into Python on ``thread`` (an ident, 0: none)
    from now, instead of making it (or, given a function, call it there with the site's number, then make
    the call: a signal handler or a finalizer running inside it); -1: never. Counts that thread's calls per
    site from zero. Returns how many calls back into Python were made so far (all threads)."""
    global K_countdown, K_thread, K_exception, K_fired
    K_countdown, K_thread, K_exception, K_fired = countdown, thread, exception, -1
    for i in range(@NSITES@):
        K_site_calls[i] = 0
    return K_calls


def K_sites():
    """Since ``K_inject``: the calls back into Python on its thread, per site, and the site it raised at
    (-1: none)."""
    return [K_site_calls[i] for i in range(@NSITES@)], K_fired


cdef inline int K_out(int site) except -1:
    global K_calls, K_countdown, K_fired
    K_calls += 1
    if K_thread != 0 and PyThread_get_thread_ident() == K_thread:
        K_site_calls[site] += 1
    if K_countdown >= 0 and PyThread_get_thread_ident() == K_thread:
        if K_countdown == 0:
            K_countdown = -1
            K_fired = site
            if isinstance(K_exception, BaseException) or (
                    isinstance(K_exception, type) and issubclass(K_exception, BaseException)):
                raise K_exception
            K_exception(site)  # code that runs there, as a signal handler or a finalizer would
        K_countdown -= 1
    return 0


cdef inline bint K_truth(x) except -1:
    """``if x:``, the call back into Python (a ``__bool__``) through ``K_out`` when ``x`` is not a bool."""
    if type(x) is bool:
        return x is True
    K_out(19)
    return True if x else False


cdef class K_Entry:
    """An ``Entry`` (``entries.py``) as C fields, with its generated step's per-branch functions: what the C
    step reads of it without an attribute lookup. Built once per runtime; entries do not change."""

    cdef object entry, first, label, action, names, writes, bwrites, wake
    cdef dict choice
    cdef tuple ones, tests
    cdef bint external, plain

    def __init__(self, e):
        self.entry, self.first, self.label, self.action = e, e.first, e.label, e.action
        self.external = e.external
        self.names = e.bindex
        self.choice = e.bindex if e.branches else {None: 0}  # the generated step's own (generated_entry)
        self.writes, self.bwrites, self.wake = e.writes, e.bwrites, e.wake
        self.ones, self.tests = e.ones, e.tests
        # Taken here: a generated step whose transitions check the invariants themselves.
        self.plain = e.first is not None and e.ones is not None and e.tests is not None and not e.inv


cdef class K_Kernel:
    """One runtime's C step: its entries, and the per-thread lists that never change identity. (It holds no
    reference to the runtime or its dict, which hold it: no cycle, so a runtime is still freed when its last
    reference goes.)"""

    cdef object acquire, release, is_owned
    cdef list tokens, parked, sleeping, want, entries
    # Per thread, an ActionContext its last external step made and nobody kept (every slot cleared):
    # the next one on that thread fills it instead of making one.
    cdef list ctxs
    cdef tuple pci
    cdef Py_ssize_t n
    cdef bint wake_sets
    cdef object spurious
    cdef Py_ssize_t off[K_NFIELDS]
    # The class whose slots those offsets are: the step reads and stores them only in its instances.
    cdef type home

    def __init__(self, rt, fields, home):
        cdef Py_ssize_t i
        if len(fields) != K_NFIELDS:
            raise ValueError(f"the C step stores {K_NFIELDS} fields, not {len(fields)}")
        for i, name in enumerate(fields):
            # The slot ``home`` (Runtime) declares, and no class before it redefining the name: a property or
            # another descriptor there would be bypassed by the stores.
            found = next((vars(k)[name] for k in type(rt).__mro__ if name in vars(k)), None)
            if found is not K_slot(home, name):
                raise TypeError(f"{type(rt).__name__} defines {name!r} on its class: the C step stores it in "
                                f"{home.__name__}'s slot and would bypass it")
            self.off[i] = K_offset(found)
        self.home = home
        self.ctxs = [None] * rt._n
        lock = rt._lock
        self.acquire, self.release, self.is_owned = lock.acquire, lock.release, lock._is_owned
        self.tokens, self.parked, self.sleeping = rt._tokens, rt._parked, rt._sleeping
        self.want = rt._want
        self.entries = [{pc: K_Entry(e) for pc, e in es.items()} for es in rt._entries]
        self.pci = tuple(rt._pci)
        self.n = rt._n
        self.wake_sets = rt._wake_sets
        self.spurious = rt._spurious

    def step(self, rt, t, branch, timeout, chain, then):
        """``Runtime.step`` (the wrapper there delivers deferred interrupts): the step's label."""
        cdef Py_ssize_t ti, i
        cdef K_Entry e
        cdef object state, deadline = None, action, outcome, ctx, acts
        # The offsets are ``home``'s: in anything else they are raw memory. Checked in C (``isinstance`` would
        # ask the object's own ``__class__``, which can say anything).
        if not PyObject_TypeCheck(rt, <PyTypeObject*>self.home):
            raise TypeError(f"the C step runs a {self.home.__name__}, not a {type(rt).__name__}")
        if type(t) is not int or t < 0 or t >= self.n:
            K_out(0); t = rt._thread_index(t)
        ti = t
        if timeout is not None and not timeout == K_INF:
            K_out(1); deadline = K_monotonic() + K_seconds(timeout)
        if self.is_owned() or self.sleeping[ti]:
            K_out(2); rt._reentered(ti)
        K_out(3); self.acquire()
        try:
            e = self.section(rt, ti, branch, deadline, chain, then, False)
            state = K_get(rt, self.off[K_STATE])
        finally:
            self.release()
        if e.external:  # its action runs outside the lock, on the snapshot taken above
            acts = K_get(rt, self.off[K_ACTIONS])
            action = (<dict>acts).get(e.action) if type(acts) is dict else acts.get(e.action)
            if action is not None:
                # ActionContext(rt, t, state, label), its __init__'s stores made here.
                ctx = self.ctxs[ti]
                self.ctxs[ti] = None
                # Reused only if, out of the cache, it is still ours alone: ``gc.get_objects()`` (a profiler, a
                # debugger) hands out what the cache holds, and a context someone took is theirs, never refilled.
                # The list itself is handed out too (``gc.get_referents``): only an ActionContext has the slots
                # filled below; in anything put there instead, their offsets are raw memory.
                if ctx is None or type(ctx) is not K_ActionContext or Py_REFCNT(ctx) != 1:
                    K_out(4); ctx = K_ActionContext.__new__(K_ActionContext)
                K_put(ctx, K_ctx_off[0], rt)
                K_put(ctx, K_ctx_off[1], ti)
                K_put(ctx, K_ctx_off[2], state)
                K_put(ctx, K_ctx_off[3], e.label)
                K_put(ctx, K_ctx_off[4], None)
                K_out(5); outcome = action(ctx)
                if Py_REFCNT(ctx) == 1:  # nobody kept it (it takes no weak reference): the next one reuses it
                    # Every slot cleared, not only those the step filled with its runtime and state: the action
                    # may have written anything into any of them (its runtime, making a cycle through the cache).
                    for i in range(5):
                        K_put(ctx, K_ctx_off[i], None)
                    self.ctxs[ti] = ctx
            else:
                outcome = branch
            if outcome is not None and outcome not in e.names and (
                    action is not None or type(outcome) is not tuple or not e.names.keys() >= set(outcome)):
                raise ValueError(f"action {e.action!r} returned unknown outcome {outcome!r}")
            K_out(6); self.acquire()
            try:
                self.section(rt, ti, outcome, deadline, chain, then, True)
            finally:
                self.release()
        if K_get(rt, self.off[K_FAILURE]) is not None:  # recorded while this step ran (a handler's fail()): raised
            K_out(7); self.acquire()
            try:
                K_out(8); rt._fail(K_get(rt, self.off[K_FAILURE]))
            finally:
                self.release()
        return e.label

    cdef K_Entry section(self, rt, Py_ssize_t t, branch, deadline, chain, then, bint second):
        """One critical section (lock held): ``_begin``, then ``_take_locked`` unless it is an external step's
        first half. Returns the entry."""
        cdef K_Entry e
        cdef object pc, nxt_e
        if K_get(rt, self.off[K_OWED]) is not None or K_get(rt, self.off[K_FAILURE]) is not None:
            K_out(9); rt._begin(t)  # pays the debt, raises the failure
        pc = (<tuple?>K_get(rt, self.off[K_STATE]))[<Py_ssize_t>self.pci[t]]
        if pc == K_DONE:
            K_out(10); rt._begin(t)  # raises: the thread is done
        e = (<dict?>self.entries[t])[pc]
        if not second and e.external:
            return e
        try:
            self.take(rt, t, e, branch, deadline)
            if K_truth(chain):  # judged here, after the first step, as ``_take_locked`` judges it
                nxt_e = (<dict?>self.entries[t]).get((<tuple?>K_get(rt, self.off[K_STATE]))[<Py_ssize_t>self.pci[t]])
                if nxt_e is not None and not (<K_Entry>nxt_e).external:
                    self.take(rt, t, <K_Entry>nxt_e, then, deadline)
        except BaseException:
            if K_get(rt, self.off[K_OWED]) is not None:
                K_out(11); rt._settle()
            raise
        return e

    cdef int take(self, rt, Py_ssize_t t, K_Entry e, branch, deadline) except -1:
        """``_take``: the generated step's branch (the first enabled, or the one asked for, as ``first`` and
        ``generated_entry``'s ``choose`` pick it), stored here, parking until there is one; anything else, by
        ``_take``."""
        cdef object r, nxt, rec, state, x, b
        cdef bint generic
        while True:
            rec = K_get(rt, self.off[K_RECORD])
            if not e.plain or not (rec is None or type(rec) is list):
                break
            state = K_get(rt, self.off[K_STATE])
            b = nxt = None
            generic = False
            if branch is None:
                K_out(12); r = e.first(state)
                if r is not None:
                    b, nxt = r[0], r[1]
            elif type(branch) is tuple:
                for name in <tuple>branch:
                    x = e.choice.get(name)
                    if x is None:
                        generic = True  # a name only the generic path serves
                        break
                    K_out(12); nxt = e.ones[<Py_ssize_t>x](state)
                    if nxt is not None:
                        b = x
                        break
            else:
                x = e.choice.get(branch)
                if x is None:
                    generic = True
                else:
                    K_out(12); nxt = e.ones[<Py_ssize_t>x](state)
                    if nxt is not None:
                        b = x
            if generic:
                break
            if b is not None:
                if type(nxt) is tuple:
                    self.apply(rt, t, e, b, <tuple>nxt, rec)
                    return 0
                # A violation, or a successor that breaks an invariant: ``_apply`` records and raises it, as
                # ``_take`` has it do (not computed again).
                K_out(20); rt._apply(t, e.entry, b, nxt)
                return 0
            # Not enabled: park until a step wakes this thread (or the deadline passes, or the run fails:
            # ``_park`` raises), then take the step it is at now, as ``_take`` does.
            K_out(21); rt._park(t, branch, deadline)
            K_out(22); branch = rt._still_wanted(t, branch)
            e = (<dict?>self.entries[t])[(<tuple?>K_get(rt, self.off[K_STATE]))[<Py_ssize_t>self.pci[t]]]
        # A branch only the generic path serves, an invariant to check here, a record that is not a list: the
        # Python step, from the start (the transitions are pure, and nothing was stored).
        K_out(13); rt._take(t, branch, deadline)
        return 0

    cdef int apply(self, rt, Py_ssize_t t, K_Entry e, b, tuple nxt, rec) except -1:
        """``_apply`` for a successor that is a state (and no invariant to check here)."""
        cdef object bw = e.bwrites, owed, item = None, pc, woke
        owed = bw[b] if bw is not None else (e.writes if e.writes is not None else K_EVERYTHING)
        if rec is not None:
            item = (t, b, nxt)  # the one allocation, before the first store
        # The step, its debt, its count and its record: no call back into Python from here to the last.
        K_put(rt, self.off[K_OWED], owed)
        K_put(rt, self.off[K_STATE], nxt)
        K_put(rt, self.off[K_STEPS], K_get(rt, self.off[K_STEPS]) + 1)
        if rec is not None:
            (<list>rec).append(item)
        if not K_get(rt, self.off[K_NPARKED]):
            woke = False
        elif self.wake_sets:
            woke = self.wake_set(rt, e.wake[b])
        else:
            K_out(14); woke = rt._wake_enabled(owed if owed is not K_EVERYTHING else None)
        K_put(rt, self.off[K_OWED], None)
        pc = nxt[<Py_ssize_t>self.pci[t]]
        if not woke and K_get(rt, self.off[K_NPARKED]) and pc == K_DONE:
            # The last runnable thread just finished and woke nobody: the parked ones may be stuck for good.
            try:
                K_out(15); K_detect(rt)
            except K_LiveError:
                pass
        elif self.spurious is not None and pc in self.spurious[t]:
            K_out(16); K_detect(rt)
        return 0

    cdef object wake_set(self, rt, tuple wake):
        """``_wake_set``: wake the parked threads of the branch's wake set whose step is now enabled."""
        cdef object woke = False, state, pc, want, ok, test
        cdef K_Entry eu
        cdef Py_ssize_t u
        if K_get(rt, self.off[K_FAILURE]) is not None:
            K_out(17); return rt._wake_enabled(None)
        state = K_get(rt, self.off[K_STATE])
        for u_, pcs in wake:
            u = u_
            if self.parked[u]:
                pc = (<tuple?>state)[<Py_ssize_t>self.pci[u]]
                if pc in pcs:
                    want = self.want[u]
                    eu = (<dict?>self.entries[u])[pc]
                    ok = False
                    if want is not None or eu.tests is None:
                        K_out(18); ok = rt._enabled(u, eu.entry, want)
                    else:
                        for test in eu.tests:  # generated_entry's ``enabled``: any branch's guard
                            K_out(18)
                            if test(state):
                                ok = True
                                break
                    if ok:
                        # Unmarked, counted and given its token with no call back into Python between.
                        self.parked[u] = False
                        K_put(rt, self.off[K_NPARKED], K_get(rt, self.off[K_NPARKED]) - 1)
                        self.tokens[u].release()
                        woke = True
        return woke
'''.replace("@NSITES@", str(len(SITES)))  # one counter per site, as many as SITES names
