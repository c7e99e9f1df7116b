"""Bitstate search ("supertrace"): a last resort for models too big even for fingerprints.

What it guarantees, and what it does not
----------------------------------------
SPIN's bitstate hashing: the visited set is a bit array of ``2**b`` bits,
and a state is marked by setting ``k`` bits chosen by hashing it (double
hashing over its 64-bit fingerprint, :mod:`.fingerprint`). A state whose
``k`` bits are already set is taken as visited, so once the array fills
up, states that were never seen are skipped, and everything below them
with them. A violation it reports is real: its trace is the depth-first
path to it, replayed from the initial state, though not the shortest. An
"ok" is not a proof; the result carries SPIN's estimate of the coverage
instead:

* the hash factor, bits per stored state; SPIN's rule of thumb is that
  above 100 the search very likely covered everything;
* the chance that a new state met at the end of the search was taken for
  a visited one, ``f**k`` for the fraction ``f`` of bits set (Holzmann, "An
  analysis of bitstate hashing", 1998). A skipped state hides everything
  only reachable through it, so no formula bounds the states missed; two
  runs with different ``seed`` values (independent hash functions) that
  store the same number of states are the practical evidence.

Memory is the array, fixed before the search (``2**b / 8`` bytes), plus the
depth-first stack. Use it when ``store="fingerprint"`` would not fit; run
it twice with different ``seed`` values (different hash functions) to
cover what one run skipped, as SPIN users do.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np

from .._dsl.model import Machine, ModelError
from .budget import format_bytes, resident_bytes
from .explorer import DEFAULT_MAX_STATES, Explorer
from .fingerprint import fingerprinter, stable_digest
from .liveness import STARVATION_CAPPED, bounded_starvation
from .result import CheckResult
from .verdict import terminal

__all__ = ["BitstateExplorer"]

_MASK = (1 << 64) - 1
#: Default array: 2**27 bits, 16 MiB, SPIN's -w27; a budget (``memory``) sets it instead.
DEFAULT_BITS_LOG2 = 27


class _Bits:
    """The bit array as the partial-order reduction's proviso asks it: ``state in known`` (no marking)."""

    def __init__(self, bits_log2: int, hashes: int, seed: int, fingerprint: Any):
        self.array = bytearray(1 << max(bits_log2 - 3, 0))
        self.mask = (1 << bits_log2) - 1
        self.hashes = hashes
        self.salt = (seed * 0x9E3779B97F4A7C15) & _MASK
        self.fingerprint = fingerprint

    def _positions(self, state: tuple) -> list[int]:
        # Double hashing (Kirsch and Mitzenmacher): k positions from two hashes, the fingerprint
        # (salted by the seed) and a SplitMix64 scramble of it; h2 odd, so it cycles the whole array.
        h1 = self.fingerprint(state) ^ self.salt
        z = (h1 ^ (h1 >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK
        h2 = (z ^ (z >> 31)) | 1
        mask = self.mask
        return [(h1 + i * h2) & mask for i in range(self.hashes)]

    def fill(self) -> float:
        """The fraction of bits set."""
        a, step = np.frombuffer(self.array, np.uint8), 1 << 24
        if hasattr(np, "bitwise_count"):  # numpy >= 2.0
            ones = sum(int(np.bitwise_count(a[i:i + step]).sum(dtype=np.int64)) for i in range(0, len(a), step))
        else:
            ones = sum(int(np.unpackbits(a[i:i + step]).sum(dtype=np.int64)) for i in range(0, len(a), step))
        return ones / (len(a) * 8)

    def __contains__(self, state: tuple) -> bool:
        a = self.array
        return all(a[p >> 3] >> (p & 7) & 1 for p in self._positions(state))

    def mark(self, state: tuple) -> bool:
        """Set ``state``'s bits; True if they were all set already (taken as visited)."""
        a = self.array
        seen = True
        for p in self._positions(state):
            byte, bit = p >> 3, 1 << (p & 7)
            if not a[byte] & bit:
                seen = False
                a[byte] |= bit
        return seen


def _bits_for_budget(memory: int) -> int:
    """The array size for a memory budget: half of what the process has left, as a power of two
    (SPIN's -w does the same), between 2**10 and 2**40 bits."""
    resident = resident_bytes()
    try:  # a budget past the machine's memory gets the machine's
        memory = min(memory, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        pass
    left = memory - resident
    if left < 256:
        raise ModelError(f"memory budget {format_bytes(memory)} leaves no room for a bitstate array: "
                         f"this process already holds {format_bytes(resident)}; give more, e.g. "
                         f"--memory {format_bytes(resident + (64 << 20)).replace(' ', '')}")
    return min(40, max(10, int(math.log2(left // 2 * 8))))


class BitstateExplorer(Explorer):
    """Depth-first search over a bit array (see the module). ``bits_log2``: the array has 2**bits_log2 bits."""

    def __init__(self, machine: Machine, *, max_states: int = DEFAULT_MAX_STATES, bits_log2: int | None = None,
                 hashes: int = 3, seed: int = 0, **kw: Any):
        super().__init__(machine, strategy="dfs", max_states=max_states, **kw)
        if bits_log2 is None:
            bits_log2 = DEFAULT_BITS_LOG2 if self.memory is None else _bits_for_budget(self.memory)
        if not 10 <= bits_log2 <= 40:
            raise ModelError(f"bitstate array of 2**{bits_log2} bits: choose 2**10 to 2**40")
        if not 1 <= hashes <= 8:
            raise ModelError("bitstate hashes must be between 1 and 8")
        self.bits_log2, self.hashes = bits_log2, hashes
        try:
            self.known = _Bits(bits_log2, hashes, seed, fingerprinter(machine.init, stable_digest))
        except MemoryError:
            raise ModelError(f"cannot allocate a bitstate array of 2**{bits_log2} bits "
                             f"({format_bytes((1 << bits_log2) / 8)}): choose a smaller one") from None
        self.stored = 0
        self._generated = 0  # transitions computed so far
        self._path: list[tuple] = []

    # Paths come from the depth-first stack, not from a parent map.
    def path_to(self, state: tuple) -> tuple[list[tuple], list[tuple[int, int]]]:
        path = self._path
        end = len(path) if path and path[-1] == state else path.index(state) + 1
        return self.walk(path[1:end], lambda x: x)

    def _run(self) -> CheckResult:
        m = self.machine
        t0 = time.perf_counter()
        self._root = self.expander.root()
        self.expander.known = self.known
        self.known.mark(self._root)
        self.stored = 1
        found: list[tuple[int, Any]] = []
        exhaustive = True
        bad = m.invariant_violation(m.init)
        if bad:
            self._path = [self._root]
            found.append((0, self.violation_at(self._root, bad)))
        else:
            exhaustive = self._search(found)
        if not found and exhaustive and m.progress_labels:
            lasso, exhaustive = bounded_starvation(m, self.max_states)  # the policy's own graph, as in Explorer
            if not exhaustive:
                self.stop_detail = STARVATION_CAPPED
            if lasso is not None:
                found.append((len(lasso.trace), lasso))
        violation = min(found, key=lambda x: x[0])[1] if found else None
        if violation is None and exhaustive:
            # Finished, but a bitstate "ok" is never a proof: states whose bits were all set were
            # taken as visited. Said as a stop reason, so it cannot pass for an exhaustive search.
            self.stop_reason = "bitstate"
        return CheckResult(
            model=m.name, config=dict(m.config), strategy="dfs", exhaustive=violation is not None,
            verdict=violation.kind if violation else "ok", states=self.stored, transitions=self.transitions,
            seconds=time.perf_counter() - t0, violation=violation, max_depth=self._max_depth, store="bitstate",
            collision_probability=self.known.fill() ** self.hashes, hash_factor=(1 << self.bits_log2) / self.stored,
            **self._stop_fields(violation is not None))

    def _stop_fields(self, exhaustive: bool) -> dict[str, Any]:
        if exhaustive or self.stop_reason != "bitstate":
            return super()._stop_fields(exhaustive)
        return {"stop_reason": "bitstate", "stop_message":
                f"a bitstate search is not a proof: states whose {self.hashes} bits were already set "
                f"were skipped; hash factor {(1 << self.bits_log2) / self.stored:,.1f}"}

    def _search(self, found: list) -> bool:
        check_inv, known = self.expander.invariant, self.known
        stop, report = self.stop_at_first, self._reporter()
        path = self._path = [self._root]
        stack = [self._successors(self._root, found)]
        max_depth = counter = 0
        if stack[0] is None:
            return self._stopped(0, self._generated, True)
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                path.pop()
                continue
            if known.mark(nxt):
                continue
            self.stored += 1
            if self.stored > self.max_states:
                self.stored -= 1
                return self._stopped(max_depth, self._generated, False)
            path.append(nxt)
            if check_inv is not None:
                bad = check_inv(nxt)
                if bad:
                    found.append((len(path) - 1, self.violation_at(nxt, bad)))
                    if stop:
                        return self._stopped(len(path) - 1, self._generated, True)
                    path.pop()
                    continue
            max_depth = max(max_depth, len(path) - 1)
            it = self._successors(nxt, found)
            if it is None:  # a violation on or at this state, and the search stops at the first
                return self._stopped(max_depth, self._generated, True)
            stack.append(it)
            counter += 1
            if not counter & 1023:
                if report is not None:
                    report(self.stored, len(stack), self._generated)
                if self.budget is not None and self._over_budget(self.stored, 0):
                    return self._stopped(max_depth, self._generated, False)
        return self._stopped(max_depth, self._generated, True)

    def _successors(self, state: tuple, found: list):
        """An iterator over ``state``'s successor states (None: a violation ended the search here)."""
        moves, stuck = self.expander.expand(state)
        depth = len(self._path) - 1
        succ = []
        for t, res in moves:
            self._generated += len(res)
            for b, nxt in res:
                if nxt.__class__ is not tuple:
                    found.append((depth + 1, self.violation_on(state, (t, b), nxt)))
                    if self.stop_at_first:
                        return None
                    continue
                succ.append(nxt)
        if stuck:
            bad = terminal(self.machine, state)
            if bad is not None:
                found.append((depth, self.violation_at(state, bad)))
                if self.stop_at_first:
                    return None
        return iter(succ)
