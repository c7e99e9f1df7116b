"""Fingerprint storage: the visited set as 64-bit fingerprints, TLC's design.

What it guarantees
------------------
The full explorer stores every state (a tuple of a few hundred bytes); this
mode stores, per state, its 64-bit fingerprint and its BFS parent's, in an
open-addressing table of two ``numpy.uint64`` arrays kept at most 3/4 full:
about 16 to 43 bytes a state, 24 on average, whatever the state's size. The
search is the same level-synchronous BFS over the same expansion
(:mod:`.expand`) and classifier (:mod:`.verdict`), and it reports the same
first shortest violation: successors are deduplicated in the order the full
explorer meets them, and their invariant and step violations are replayed in
that order. A counterexample is rebuilt from the chain of parent
fingerprints, by re-expanding each state on the path and picking the
successor whose fingerprint is the next link, so it is a real, shortest
trace.

What it gives up is certainty: two distinct states with one fingerprint are
taken for one, and the second is never explored. The result says
``probabilistic``, and reports TLC's optimistic estimate of the chance that
any collision happened, ``n * (m - n) / 2**64`` for ``n`` distinct states and
``m`` generated ones.

The frontier (the states of the level being expanded and of the next) is
the other memory cost; past ``frontier_limit`` states a level is written to
a temporary file in chunks and read back in order (TLC's disk queue).

Decisions, and why
------------------
* The fingerprint is the 64-bit SipHash that Python keeps for bytes and
  strings, over the state's ``marshal`` bytes (fields marshal refuses are
  replaced by ids, told apart by ``==``, never by ``repr``): computed
  in C, stable within a process, which is all one search needs. It is not
  ``hash(state)``, which is faster but maps -1 and -2 to one value, so
  would merge distinct states for certain (:func:`fingerprint`). SipHash
  is keyed per process, so fingerprints are not comparable across
  processes.
* Insertion is vectorized per chunk of expanded states: the candidates'
  fingerprints go through ``numpy.unique`` (first occurrences, in encounter
  order) and a few rounds of linear probing over the whole batch at once.
  Only the states found new are kept as tuples.
* 0 marks an empty slot; a fingerprint of 0 is stored as 1.
* Across processes (the cluster search: dask workers do not share a hash
  secret) the fingerprint is :func:`stable_fingerprint`, BLAKE2b cut to 64
  bits over the same bytes: every process computes it alike, at about
  twice the cost of SipHash.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import pickle
import tempfile
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .._dsl.model import ModelError

_dumps = marshal.dumps
_blake2b = hashlib.blake2b

__all__ = ["FingerprintTable", "Frontier", "collision_probability", "fingerprint", "fingerprinter",
           "stable_digest", "stable_fingerprint", "stable_fingerprinter"]

_MASK = (1 << 64) - 1
#: Fibonacci hashing multiplier: spreads fingerprints that differ in low bits over the table.
_MULT = np.uint64(0x9E3779B97F4A7C15)
#: The table grows (doubles) before it is more than this full: linear probing stays short.
_MAX_LOAD = 0.75


def fingerprint(state: tuple) -> int:
    """The 64-bit fingerprint of a state that ``marshal`` takes (never 0): the hash of its bytes.

    Not ``hash(state)``: CPython hashes -1 as -2 (-1 is its error code), so
    two states that differ only by a -1 where the other has a -2 would share
    every fingerprint, a certain collision rather than a chance one. The
    bytes are ``marshal`` format 2, which has no back-references, so equal
    states give equal bytes whatever objects they share. Raises
    ``ValueError`` for a state holding a value marshal refuses; a search
    uses :func:`fingerprinter`, which handles those exactly.
    """
    return (hash(_dumps(state, 2)) & _MASK) or 1


def _interning(width: int, digest: Callable[[bytes], int] = hash) -> Callable[[tuple], int]:
    """The exact encoding for states holding values marshal refuses: such a field is replaced by an id.

    Each top-level field marshal refuses is replaced by a small id from that
    position's own table, a dict, so values are told apart by ``==``, exactly
    as the full store tells states apart: two unequal values never share an
    id. (The earlier ``repr`` fallback did not have that property: two
    unequal values with one ``repr``, say a dataclass with a ``repr=False``
    field, took one fingerprint for certain and the second state was never
    checked.) A bit mask records which positions hold ids, and the bytes
    start with a byte no marshal output starts with, so this encoding and the
    plain one never produce the same bytes for different states.
    """
    tables: list[dict] = [{} for _ in range(width)]

    def interned(state: tuple) -> int:
        out = list(state)
        mask = 0
        for i, v in enumerate(state):
            try:
                _dumps(v, 2)
            except ValueError:
                if i >= len(tables):
                    tables.extend({} for _ in range(i + 1 - len(tables)))
                ids = tables[i]
                n = ids.get(v)
                if n is None:
                    n = ids[v] = len(ids)
                out[i] = n
                mask |= 1 << i
        return (digest(b"\x01" + _dumps((mask, tuple(out)), 2)) & _MASK) or 1
    return interned


def _marshal_first(slow: Callable[[tuple], int], digest: Callable[[bytes], int] = hash) -> Callable[[tuple], int]:
    def fp(state: tuple) -> int:
        try:
            return (digest(_dumps(state, 2)) & _MASK) or 1
        except ValueError:
            return slow(state)
    fp.marshal_first = digest is hash  # type: ignore[attr-defined]  # lets a batch inline the fast path
    return fp


def _by_field_ids(positions: tuple[int, ...], slow: Callable[[tuple], int],
                  digest: Callable[[bytes], int] = hash) -> Callable[[tuple], int]:
    """Marshal bytes with the values at ``positions`` replaced by small ids, one per distinct value.

    For states whose unmarshalable values sit in a few top-level fields, as
    the prefetcher's named slot states sit in ``slots``: those fields repeat
    across states, so each distinct value gets an id the first time it is
    met (a dict, so values are told apart by ``==``, as the full explorer
    tells states apart) and the state is marshalled with the ids in their
    place. The function is generated for ``positions``, straight-line: this
    is the per-successor hot path of the search. A state with a refused value
    in any other field goes, always, to the exact slow encoding
    (:func:`_interning`), whose bytes never equal these.
    """
    names = {"dumps": _dumps, "slow": slow, "MASK": _MASK, "hash": digest}
    lines = ["def fp(state):"]
    parts = []
    start = 0
    for k, p in enumerate(positions):
        names[f"ids{k}"] = {}
        if p > start:
            parts.append(f"state[{start}:{p}]")
        lines += [f"    v = state[{p}]",
                  f"    i{k} = ids{k}.get(v)",
                  f"    if i{k} is None:",
                  f"        i{k} = ids{k}[v] = len(ids{k})"]
        parts.append(f"i{k}")
        start = p + 1
    parts.append(f"state[{start}:]")
    lines += ["    try:",
              f"        return (hash(dumps(({', '.join(parts)},), 2)) & MASK) or 1",
              "    except ValueError:",
              "        return slow(state)"]
    exec("\n".join(lines), names)  # the source is built above from integers only
    return names["fp"]


def fingerprinter(sample: tuple, digest: Callable[[bytes], int] = hash) -> Callable[[tuple], int]:
    """A fresh fingerprint function for one search whose states look like ``sample`` (its root).

    Plain marshal bytes when ``sample`` marshals. Otherwise marshal with the
    refused top-level fields replaced by ids (:func:`_by_field_ids`), or,
    when there are many such fields, the exact slow encoding for every state
    (:func:`_interning`). Each is a function of the state's value alone, so
    one search never gives one state two fingerprints, and two unequal states
    share one only by a 64-bit hash collision. The id tables belong to the
    function: use one function for one search. ``digest`` hashes the bytes:
    Python's ``hash`` (keyed per process), or :func:`stable_digest` where
    one search must store the same fingerprints in every process (bitstate's
    ``--seed``; the ids are given in the order states are met, which one
    search's order fixes).

    Equal values of different types (``True`` and ``1``, ``1`` and ``1.0``,
    ``0.0`` and ``-0.0``, a named int and its plain value) marshal
    differently. Where ``sample`` holds a float or a complex, every state is
    fingerprinted in its canonical form (:func:`_canonical`, numbers in one
    form per ``==`` class), as the cluster's :func:`stable_fingerprinter`
    does: otherwise ``0.0`` and ``-0.0`` (a float field's two zeros, one
    type) were merged by ``==`` within a chunk of a level and told apart
    across levels, and the store's verdict depended on the level each twin
    first appeared at, against the full store's and the cluster's. A search
    that starts with no float pays nothing; there a model that mixes
    ``True`` and ``1`` in one field is counted with more states here than by
    the full store, which merges them by ``==`` (the README asks a model to
    keep a field to one type).
    """
    odd = _has_odd_numbers(sample)
    if odd:
        sample = _canonical(sample)
    slow = _interning(len(sample), digest)
    refused = _refused_fields(sample)
    if refused is None:
        fp = _marshal_first(slow, digest)
    elif 0 < len(refused) <= 4:
        fp = _by_field_ids(refused, slow, digest)
    else:
        fp = slow
    if not odd:
        return fp
    return lambda state: fp(_canonical(state))


def _refused_fields(sample: tuple) -> tuple[int, ...] | None:
    """None if ``sample`` marshals; else the positions of its top-level fields that marshal refuses."""
    if _marshals(sample):
        return None
    return tuple(i for i, v in enumerate(sample) if not _marshals(v))


def _marshals(value: Any) -> bool:
    try:
        _dumps(value, 2)
    except ValueError:
        return False
    return True


def collision_probability(states: int, generated: int) -> float:
    """TLC's optimistic estimate that some fingerprint collision happened: n * (m - n) / 2**64."""
    return states * max(generated - states, 0) / 2.0 ** 64


class FingerprintTable:
    """Fingerprint -> parent fingerprint, in open addressing with linear probing (0 is empty)."""

    def __init__(self, capacity: int = 1 << 16):
        size = 1 << max(4, (capacity - 1).bit_length())
        self._alloc(size)
        self.count = 0
        #: New fingerprints the last :meth:`add_new` left out because of its ``limit``.
        self.refused = 0

    def _alloc(self, size: int) -> None:
        self.size = size
        self.shift = np.uint64(64 - (size.bit_length() - 1))
        self.mask = np.uint64(size - 1)
        self.keys = np.zeros(size, np.uint64)
        self.parents = np.zeros(size, np.uint64)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.parents.nbytes

    def __len__(self) -> int:
        return self.count

    def _home(self, keys: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return (keys * _MULT) >> self.shift

    def growth_soon(self, margin: int) -> int:
        """Bytes the table will allocate if it grows within ``margin`` more entries (else 0): the doubled
        arrays, and the copies of the old entries re-placed into them, while the old arrays live."""
        if self.count + margin <= self.size * _MAX_LOAD:
            return 0
        return 3 * self.nbytes

    def _grow(self, need: int) -> None:
        size = self.size
        while need > size * _MAX_LOAD:
            size *= 2
        if size == self.size:
            return
        keys, parents = self.keys, self.parents
        used = keys != 0
        self._alloc(size)
        self.count = 0
        self._place(keys[used], parents[used])

    def _probe(self, keys: np.ndarray, insert: bool, parents: np.ndarray | None = None) -> np.ndarray:
        """For unique ``keys``: True where the key was absent (and, with ``insert``, is now stored)."""
        n = len(keys)
        absent = np.zeros(n, bool)
        if not n:
            return absent
        pos = self._home(keys)
        pending = np.arange(n)
        table = self.keys
        mask = self.mask
        while pending.size:
            p = pos[pending]
            cur = table[p]
            k = keys[pending]
            empty = cur == 0
            if insert:
                e = pending[empty]
                table[pos[e]] = keys[e]                # colliding claims: the last write wins
                won = table[pos[e]] == keys[e]
                winners = e[won]
                absent[winners] = True
                self.parents[pos[winners]] = parents[winners]
                retry = np.concatenate((pending[~empty & (cur != k)], e[~won]))
            else:
                absent[pending[empty]] = True
                retry = pending[~empty & (cur != k)]
            pos[retry] = (pos[retry] + np.uint64(1)) & mask
            pending = retry
        if insert:
            self.count += int(absent.sum())
        return absent

    def _place(self, keys: np.ndarray, parents: np.ndarray) -> None:
        self._probe(keys, True, parents)

    def add_new(self, fps: Sequence[int] | np.ndarray, parents: Sequence[int] | np.ndarray,
                limit: int | None = None) -> np.ndarray:
        """Store the fingerprints not yet known (first occurrence in list order); return the mask of those.

        With ``limit``, at most that many are stored: the first ones, in list order;
        :attr:`refused` then says how many new ones were left out.
        """
        self.refused = 0
        if not len(fps):
            return np.zeros(0, bool)
        arr = fps if isinstance(fps, np.ndarray) else np.fromiter(fps, np.uint64, len(fps))
        _, first = np.unique(arr, return_index=True)
        first.sort()
        keys = arr[first]
        if limit is not None:
            absent = self._probe(keys, False)
            self.refused = max(int(absent.sum()) - limit, 0)
            if self.refused:
                keep = np.flatnonzero(absent)[:limit]
                first, keys = first[keep], keys[keep]
        self._grow(self.count + len(keys))
        par = (parents if isinstance(parents, np.ndarray) else np.fromiter(parents, np.uint64, len(parents)))[first]
        absent = self._probe(keys, True, par)
        new = np.zeros(len(fps), bool)
        new[first[absent]] = True
        return new

    def add_root(self, fp: int) -> None:
        self._grow(self.count + 1)
        self._probe(np.array([fp], np.uint64), True, np.zeros(1, np.uint64))

    def __contains__(self, fp: int) -> bool:
        return not bool(self._probe(np.array([fp], np.uint64), False)[0])

    def parent(self, fp: int) -> int:
        """The parent fingerprint of a stored ``fp`` (0 for the root)."""
        pos = int(self._home(np.array([fp], np.uint64))[0])
        mask = self.size - 1
        while True:
            k = int(self.keys[pos])
            if k == fp:
                return int(self.parents[pos])
            if k == 0:
                raise KeyError(fp)
            pos = (pos + 1) & mask


class Frontier:
    """A BFS level of states with their fingerprints: appended in order, read back in order as
    ``(state, fingerprint)`` pairs; written to disk in chunks past ``limit`` states."""

    def __init__(self, limit: int):
        self.limit = max(1, limit)
        self.memory: list[tuple] = []
        self.fps: list[int] = []
        self.file: Any = None
        self.chunks = 0
        self.count = 0
        self.spilled = 0
        #: True once a chunk could not be pickled: the level then stays in memory.
        self.unpicklable = False

    def append(self, state: tuple, fp: int) -> None:
        self.memory.append(state)
        self.fps.append(fp)
        self.count += 1
        if len(self.memory) >= self.limit:
            self._spill()

    def extend(self, states: list[tuple], fps: list[int]) -> None:
        self.memory.extend(states)
        self.fps.extend(fps)
        self.count += len(states)
        if len(self.memory) >= self.limit:
            self._spill()

    def _spill(self) -> None:
        if self.unpicklable:
            return
        try:
            data = pickle.dumps((self.memory, self.fps), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError):
            # States holding values pickle refuses (a record class defined inside build(), say)
            # stay in memory: the search goes on, and a memory budget stops it if it must.
            self.unpicklable = True
            return
        if self.file is None:
            self.file = tempfile.TemporaryFile(prefix="safeprefetch-frontier-")
        self.file.write(data)
        self.spilled += len(self.memory)
        self.chunks += 1
        self.memory, self.fps = [], []

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[tuple[tuple, int]]:
        if self.file is not None:
            self.file.seek(0, os.SEEK_SET)
            for _ in range(self.chunks):
                states, fps = pickle.load(self.file)
                yield from zip(states, fps)
        yield from zip(self.memory, self.fps)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


# -- the same, across processes ---------------------------------------------------------------


def stable_fingerprint(state: tuple) -> int:
    """A 64-bit fingerprint of ``state`` (never 0) that every process and machine computes alike.

    :func:`fingerprint` hashes with Python's SipHash, keyed per process: fine
    for one search in one process, useless for routing a state to its owner
    in another. This is BLAKE2b with an 8-byte digest over the same bytes:
    ``marshal`` format 2, whose encoding of ints, bools, strings, None and
    tuples depends on their values only (format 2 writes no references and
    no interning flags), or, for a state marshal refuses, its ``repr``.
    """
    try:
        data = _dumps(state, 2)
    except ValueError:
        data = repr(state).encode()
    return _digest(data)


def _digest(data: bytes) -> int:
    return int.from_bytes(_blake2b(data, digest_size=8).digest(), "little") or 1


#: BLAKE2b's 8-byte digest of some bytes, as an int: the same in every process.
stable_digest = _digest


def _stable_canonical(state: tuple) -> int:
    """:func:`stable_fingerprint` of ``state`` with its numbers in one form each (:func:`_canonical`).

    Equal states must get one fingerprint, and ``marshal`` does not follow ``==`` for numbers: ``0.0`` and
    ``-0.0``, or ``1``, ``1.0`` and ``True``, encode apart, and ``--cluster`` routed equal states to
    different owners (more states than the sequential search, and another verdict where the model's code
    told the equal values apart). Chosen for a search whose first state holds a float or a complex
    (:func:`stable_fingerprinter`): re-encoding costs about 5 µs a state, and a model that keeps each field
    to one type, as the README asks, mixes numbers of different types nowhere else.
    """
    return stable_fingerprint(_canonical(state))


_PLAIN = frozenset({int, str, bool, type(None)})
#: What marks a record's canonical form (a plain tuple that starts with it stands for that record).
_RECORD = "\x00record"
_ODD = frozenset({float, complex})


def _has_odd_numbers(values: Any) -> bool:
    """Whether the tuple or frozenset ``values`` holds, at any depth (records, a tuple's subclasses, too), a
    float or a complex."""
    kinds = set(map(type, values))
    if kinds <= _PLAIN:
        return False
    if kinds & _ODD:
        return True
    return any(_has_odd_numbers(v) for v in values if isinstance(v, (tuple, frozenset)))


def _canonical(value: Any) -> Any:
    """``value`` with every number in one form per ``==`` class: a bool or an integral float as an int (so
    ``-0.0`` is ``0``), a complex with no imaginary part as its real part, and no negative zero in a
    complex. Tuples and frozensets are rebuilt, a record as a plain tuple led by its kind; anything else is
    itself."""
    kind = type(value)
    if kind is tuple:
        return tuple(map(_canonical, value))
    if isinstance(value, tuple):  # a record (a named tuple): its kind, then its fields, as a plain tuple
        return (_RECORD, f"{kind.__module__}.{kind.__qualname__}", *map(_canonical, value))
    if kind is bool:
        return int(value)
    if kind is float:
        return int(value) if value.is_integer() else value
    if kind is complex:
        if value.imag == 0:
            return _canonical(value.real)
        return complex(value.real + 0.0, value.imag + 0.0)  # (x + 0.0: -0.0 becomes 0.0)
    if kind is frozenset:
        return frozenset(map(_canonical, value))
    return value


def _stable_by_reprs(positions: tuple[int, ...], canonical: bool = False) -> Callable[[tuple], int]:
    """:func:`stable_fingerprint` of the state with the values at ``positions`` replaced by their ``repr``.

    Those fields repeat across states, so each distinct value's ``repr`` is
    computed once (told apart by ``==``, as the explorer tells states apart).
    A ``repr`` that hides a field would merge unequal values for certain; two
    such values met in one process are refused with a :class:`ModelError`
    (across processes, and in the whole-state ``repr`` fallback, this is not
    detected: there the ``repr`` must name the value).
    Unlike :func:`_by_field_ids`, whose ids follow the order a process meets
    values in, a ``repr`` is the same in every process. ``canonical``: every
    number in one form first (:func:`_stable_canonical`), in the ``repr``s too,
    so that the first of two equal values a process meets names both alike.
    """
    caches = [(p, {}, {}) for p in positions]
    form = _canonical if canonical else _same

    def fp(state: tuple) -> int:
        parts = list(form(state))
        for p, cache, seen in caches:
            v = state[p]
            r = cache.get(v)
            if r is None:
                r = cache[v] = repr(parts[p])
                # Two unequal values that print alike would share every fingerprint, for certain:
                # refuse, rather than skip a state silently (caught where one process meets both).
                other = seen.setdefault(r, v)
                if other != v:
                    raise ModelError(f"two unequal values print alike, {r}: a cluster search tells values "
                                     f"marshal refuses apart by repr; give {type(v).__name__} a repr that "
                                     "shows every field, or search on one machine")
            parts[p] = r
        try:
            data = _dumps(parts, 2)
        except ValueError:
            data = repr(form(state)).encode()
        return _digest(data)

    return fp


def _same(value: Any) -> Any:
    return value


def stable_fingerprinter(sample: tuple) -> Callable[[tuple], int]:
    """The process-independent fingerprint function for states that look like ``sample`` (the root).

    The choice of encoding mirrors :func:`fingerprinter` and depends on
    ``sample`` alone, so every process of one search picks the same function.
    """
    refused, odd = _refused_fields(sample), _has_odd_numbers(sample)
    if refused is not None and 0 < len(refused) <= 4:
        return _stable_by_reprs(refused, canonical=odd)
    return _stable_canonical if odd else stable_fingerprint
