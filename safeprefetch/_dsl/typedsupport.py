"""The C support code every typed transitions module starts with (``typedgen.py`` writes the rest).

What it guarantees
------------------
The C values a typed transition computes on, and the only ways between them and Python objects. A pair is
a struct of its state and index, a tuple of pairs a fixed C array (the slot pool's size), a short tuple of
ints an array with its length. Unboxing accepts exactly the Python values those hold -- an ``int`` in 64
bits (not a bool), a slot state that is one of the model's own singletons, a tuple of the right length --
and raises ``Fallback`` for anything else; so does every operation Python would answer differently or with
an error (an index out of range, an item not found, ``_set`` at a negative index). The module's wrappers
turn any exception into a call of the generated Python function on the same state (``typedgen.py``).
Boxing gives back the objects Python would build: the singletons, interned labels, new tuples only where a
value changed (an unchanged pair, or slot tuple, is the very object read).

The last tuple of pairs unboxed or built is kept with its C value (``PAIRS_OBJ``, ``PAIRS_VAL``): a step's
successor is the next step's state, so the next unboxing of that very object is a copy of the C value. It is
exact because the cache holds the tuple (no other object can take its identity) and tuples are immutable;
only a tuple that unboxed whole, or that boxing built, is kept. ``tests/test_typed_pairs_cache.py`` checks
every typed function against the Python one on states in any order, and a mutation that answers from the
cache without the identity check fails the translation validation.

A typed function checks the state's length on entry, then reads its fields unchecked (``SF``); a state of
another length is the Python function's to decide.
"""

__all__ = ["HEADER", "RESERVED"]

import re

#: ``@CAP@`` (the pool size), ``@MAXI@`` (the longest int tuple held in C) and ``@NFN@`` (typed
#: functions) are filled in per module.
HEADER = '''\
# cython: language_level=3, binding=False, boundscheck=True, wraparound=False, overflowcheck=True
# cython: annotation_typing=False, infer_types=False
# Typed transitions, written by safeprefetch._dsl.typedgen from the generated ones. Regenerated, never edited.

from cpython.object cimport PyObject
from cpython.long cimport PyLong_Check, PyLong_AsLongLong
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM, PyTuple_GET_ITEM
from cpython.ref cimport Py_INCREF

cdef extern from "limits.h":
    long long LLONG_MIN

cdef long long OPT_NONE = LLONG_MIN

cdef struct Pair:
    long long tag
    long long idx

cdef struct Pairs:
    Pair a[@CAP@]

cdef struct Ints:
    Py_ssize_t n
    long long a[@MAXI@]

cdef Ints EMPTY_INTS
EMPTY_INTS.n = 0

TAGS = None
TAG_TYPES = None
LABELS = None
LABEL_IDS = None
FALLBACK = object()
#: The tags as C pointers (their objects are kept alive by TAGS), filled by bind_tags() after binding.
cdef PyObject* CTAGS[64]
cdef long long NTAGS = 0


def bind_tags():
    global NTAGS
    cdef Py_ssize_t i
    if len(TAGS) > 64:
        raise ValueError("more than 64 slot states")
    for i in range(len(TAGS)):
        CTAGS[i] = <PyObject*>TAGS[i]
    NTAGS = len(TAGS)
#: Per typed function, how often it fell back to the Python one (tests read it through fallbacks()).
cdef long long FALLBACKS[@NFN@]


def fallbacks():
    return [FALLBACKS[i] for i in range(@NFN@)]


def reset_fallbacks():
    for i in range(@NFN@):
        FALLBACKS[i] = 0


class Fallback(Exception):
    pass


cdef inline object SF(tuple state, Py_ssize_t i):
    """Field ``i`` of a state whose length the typed function checked on entry."""
    return <object>PyTuple_GET_ITEM(state, i)


cdef inline Pair mkpair(long long tag, long long idx):
    cdef Pair p
    p.tag = tag
    p.idx = idx
    return p


cdef inline bint pair_eq(Pair a, Pair b):
    return a.tag == b.tag and a.idx == b.idx


cdef inline long long notnone(long long x) except? -1:
    if x == OPT_NONE:
        raise Fallback()
    return x


cdef inline long long checked(long long x) except? -1:
    # An int result that would read as None (OPT_NONE is LLONG_MIN), and so whose negation would overflow
    # unchecked: Python's ints go on past it, so Python decides.
    if x == OPT_NONE:
        raise Fallback()
    return x


cdef long long unbox_int(object o) except? -1:
    if type(o) is not int:
        raise Fallback()
    cdef long long v = o
    if v == OPT_NONE:
        raise Fallback()
    return v


cdef bint unbox_bool(object o) except -1:
    if o is True:
        return 1
    if o is False:
        return 0
    raise Fallback()


cdef long long unbox_tag(object o) except? -1:
    # A tag is one of the model's singletons (an int subclass): its value, then its identity.
    cdef long long v
    if not PyLong_Check(o):
        raise Fallback()
    v = PyLong_AsLongLong(o)
    if v < 0 or v >= NTAGS or CTAGS[v] != <PyObject*>o:
        raise Fallback()
    return v


cdef long long unbox_label(object o) except? -1:
    if type(o) is not str:
        raise Fallback()
    return LABEL_IDS[o]


cdef Pair unbox_pair(object o) except *:
    if type(o) is not tuple or len(<tuple>o) != 2:
        raise Fallback()
    return mkpair(unbox_tag((<tuple>o)[0]), unbox_int((<tuple>o)[1]))


# The last tuple of pairs unboxed or boxed, and its C value: a step's successor is the next step's state, so
# most unboxings are of the tuple the step before built. The tuple is held, so no other object can have its
# identity while it is here, and tuples are immutable, so ``o is PAIRS_OBJ`` means ``o`` unboxes to
# PAIRS_VAL. Only a tuple that unboxed (or was boxed) whole is stored. Both are set with no call back into
# Python between (the value first; Cython sets the object before it drops the old one, a tuple of tags and
# ints whose freeing runs no Python code). Before anything is cached it is an object no field can be: with
# None there, a field that is None unboxed to a pool of zeros.
cdef object PAIRS_OBJ = object()
cdef Pairs PAIRS_VAL
cdef long long PAIRS_HITS = 0


def pairs_cache():
    """How many unboxings and boxings the cache of the last tuple of pairs answered (tests read it)."""
    return PAIRS_HITS


cdef Pairs unbox_pairs(object o) except *:
    global PAIRS_OBJ, PAIRS_VAL, PAIRS_HITS
    cdef Pairs s
    cdef Py_ssize_t i
    if o is PAIRS_OBJ:
        PAIRS_HITS += 1
        return PAIRS_VAL
    if type(o) is not tuple or len(<tuple>o) != @CAP@:
        raise Fallback()
    for i in range(@CAP@):
        s.a[i] = unbox_pair((<tuple>o)[i])
    PAIRS_VAL = s
    PAIRS_OBJ = o
    return s


cdef tuple box_pairs(Pairs* s, object old):
    """The tuple of pairs, reusing the old tuple's pair objects (and the old tuple) where equal."""
    global PAIRS_OBJ, PAIRS_VAL, PAIRS_HITS
    cdef Py_ssize_t i
    cdef bint same = True
    cdef Pair p
    cdef Pairs was
    cdef tuple out
    cdef object item
    if old is not PAIRS_OBJ:
        try:
            unbox_pairs(old)  # the old tuple is not the one cached: unbox it (and cache it) to compare with
        except Fallback:
            old = None
    else:
        PAIRS_HITS += 1
    if old is None:  # nothing to reuse
        same = False
    else:
        was = PAIRS_VAL
        for i in range(@CAP@):
            if not pair_eq(s.a[i], was.a[i]):
                same = False
                break
        if same:
            return <tuple>old
    out = PyTuple_New(@CAP@)
    for i in range(@CAP@):
        p = s.a[i]
        if old is not None and pair_eq(p, was.a[i]):
            item = <object>PyTuple_GET_ITEM(<tuple>old, i)
        else:
            item = (<object>CTAGS[p.tag], p.idx)
        Py_INCREF(item)
        PyTuple_SET_ITEM(out, i, item)
    PAIRS_VAL = s[0]
    PAIRS_OBJ = out
    return out


cdef Ints unbox_ints(object o) except *:
    cdef Ints s
    cdef Py_ssize_t i
    if type(o) is not tuple or len(<tuple>o) > @MAXI@:
        raise Fallback()
    s.n = len(<tuple>o)
    for i in range(s.n):
        s.a[i] = unbox_int((<tuple>o)[i])
    return s


cdef object box_int(long long v):
    return v


cdef object box_pair(Pair p):
    return (<object>CTAGS[p.tag], p.idx)


cdef tuple box_ints(Ints* s):
    cdef Py_ssize_t i
    cdef list out = []
    for i in range(s.n):
        out.append(s.a[i])
    return tuple(out)


cdef Pair pairs_get(Pairs* s, long long k) except *:
    if k < 0:
        k += @CAP@
    if k < 0 or k >= @CAP@:
        raise Fallback()
    return s.a[k]


cdef Pairs pairs_set(Pairs s, long long k, Pair v) except *:
    if k < 0 or k >= @CAP@:
        raise Fallback()  # Python's slices do something else with a negative or large k
    s.a[k] = v
    return s


cdef long long pairs_count(Pairs* s, Pair v) except? -1:
    cdef long long n = 0
    cdef Py_ssize_t i
    for i in range(@CAP@):
        if s.a[i].tag == v.tag and s.a[i].idx == v.idx:
            n += 1
    return n


cdef long long pairs_index(Pairs* s, Pair v) except? -1:
    cdef Py_ssize_t i
    for i in range(@CAP@):
        if s.a[i].tag == v.tag and s.a[i].idx == v.idx:
            return i
    raise Fallback()  # Python raises ValueError


cdef bint pairs_contains(Pairs* s, Pair v) except -1:
    cdef Py_ssize_t i
    for i in range(@CAP@):
        if s.a[i].tag == v.tag and s.a[i].idx == v.idx:
            return 1
    return 0


cdef bint pairs_eq(Pairs* a, Pairs* b) except -1:
    cdef Py_ssize_t i
    for i in range(@CAP@):
        if not pair_eq(a.a[i], b.a[i]):
            return 0
    return 1


cdef long long ints_get(Ints* s, long long k) except? -1:
    if k < 0:
        k += s.n
    if k < 0 or k >= s.n:
        raise Fallback()
    return s.a[k]


cdef Ints ints_append(Ints s, long long v) except *:
    if s.n >= @MAXI@:
        raise Fallback()
    s.a[s.n] = v
    s.n += 1
    return s


cdef Ints ints_slice(Ints* s, long long lo, bint has_lo, long long hi, bint has_hi) except *:
    """``s[lo:hi]`` as Python slices a tuple: negative bounds count from the end, then both are clamped."""
    cdef Ints out
    cdef long long n = s.n, i
    if not has_lo:
        lo = 0
    elif lo < 0:
        lo = lo + n if lo + n > 0 else 0
    elif lo > n:
        lo = n
    if not has_hi:
        hi = n
    elif hi < 0:
        hi = hi + n if hi + n > 0 else 0
    elif hi > n:
        hi = n
    out.n = 0
    i = lo
    while i < hi:
        out.a[out.n] = s.a[i]
        out.n += 1
        i += 1
    return out


cdef Ints ints_concat(Ints a, Ints* b) except *:
    cdef Py_ssize_t i
    if a.n + b.n > @MAXI@:
        raise Fallback()
    for i in range(b.n):
        a.a[a.n + i] = b.a[i]
    a.n += b.n
    return a


cdef long long ints_count(Ints* s, long long v) except? -1:
    cdef long long n = 0
    cdef Py_ssize_t i
    for i in range(s.n):
        if s.a[i] == v:
            n += 1
    return n


cdef long long ints_index(Ints* s, long long v) except? -1:
    cdef Py_ssize_t i
    for i in range(s.n):
        if s.a[i] == v:
            return i
    raise Fallback()


cdef bint ints_contains(Ints* s, long long v) except -1:
    cdef Py_ssize_t i
    for i in range(s.n):
        if s.a[i] == v:
            return 1
    return 0


cdef bint ints_eq(Ints* a, Ints* b) except -1:
    cdef Py_ssize_t i
    if a.n != b.n:
        return 0
    for i in range(a.n):
        if a.a[i] != b.a[i]:
            return 0
    return 1'''



def _defined(header: str) -> set[str]:
    """The names the support code defines at module level: functions, classes, structs, globals."""
    names = set()
    for line in header.splitlines():
        m = re.match(r"(?:cdef |def |class )[^(=\[:]*?(\w+)\s*(?:\(|\[|=|:|$)|(\w+) = ", line)
        if m:
            names.add(m.group(1) or m.group(2))
    return names


#: The names a helper's parameters and locals may not take: the C support code's own (a helper's local
#: ``checked`` would hide the function its arithmetic calls, and the module would not compile), Cython's
#: keywords and C type names (``cdef long long int`` is not a declaration), and the builtins the typed
#: code calls.
RESERVED = frozenset(_defined(HEADER)) | frozenset(
    "range len cdef cpdef ctypedef struct union enum extern inline public api readonly NULL sizeof cimport by gil "
    "nogil DEF IF ELIF ELSE include new const signed unsigned char short int long float double bint object void "
    "Py_ssize_t size_t PyObject LLONG_MIN PyLong_Check PyLong_AsLongLong PyTuple_New PyTuple_SET_ITEM PyTuple_GET_ITEM "
    "Py_INCREF".split())
