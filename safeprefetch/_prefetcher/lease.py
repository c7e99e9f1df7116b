"""Lease: a zero-copy, read-only view of one batch in the slot pool, valid until released.

The view is taken from a read-only alias of the pool (``as_strided(...,
writeable=False)``), so its ``writeable`` flag cannot be set back. Entering a
Lease (``with pf.lease() as view``) is C-level from end to end (a property, an
``attrgetter`` and the array's own ``__array__``): between ``lease()``
returning and ``view`` being bound there is no point where Ctrl-C can land.
Leaving it is protected: an interrupt at its entry is delivered once the lease
is released. A Lease the caller drops unreleased is released by the
Prefetcher's next call.
"""

from __future__ import annotations

import operator
import sys
from typing import Any

import numpy as np

from .._runtime.interrupts import deliver, guard, outermost, protected
from .errors import LeaseReleased

__all__ = ["Lease", "Leases", "NotCopyable", "RELEASED_ARRAY"]


class NotCopyable:
    """Pickling, copy and deepcopy raise a clear TypeError (they would otherwise fail deep inside, on a lock)."""

    __slots__ = ()

    def _refuse(self) -> Any:
        raise TypeError(f"a {type(self).__name__} cannot be pickled or copied: it owns running threads and a slot "
                        "pool shared with them; create a new one from the same source (and arguments) instead")

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self._refuse()

    def __copy__(self) -> Any:
        return self._refuse()

    def __deepcopy__(self, memo: Any) -> Any:
        return self._refuse()


class _ReleasedArray:
    """What a released Lease holds instead of its array: entering it raises."""

    __slots__ = ()

    def __array__(self, *args: Any, **kw: Any) -> Any:
        raise LeaseReleased("this lease was released; its slot may hold another batch now")


#: What a released Lease holds instead of its array.
RELEASED_ARRAY = _ReleasedArray()


class Lease(NotCopyable):
    """A zero-copy, read-only view of one prefetched batch, valid until released.

    Use it as a context manager (``with pf.lease() as batch:`` binds the
    array) or call :meth:`release`. Releasing twice is harmless. After
    release the slot is refilled by a worker: :attr:`array` then raises
    :class:`LeaseReleased` (an array bound earlier, e.g. by ``with``, cannot
    be revoked: do not keep it). The view's ``writeable`` flag cannot be set.
    """

    __slots__ = ("_core", "_array", "position", "index", "_released", "_private", "__weakref__")

    def __init__(self, core: Any, array: np.ndarray, position: int, index: int | None, private: bool = False):
        self._core = core
        self._array = array
        #: Position in the stream (0, 1, 2, ...).
        self.position = position
        #: Index in the source (differs from ``position`` under a shard or shuffle plan).
        self.index = index
        self._released = False
        self._private = private  # a copy made for an interrupted call: no slot behind it

    @property
    def array(self) -> np.ndarray:
        """The batch: a read-only view into the slot pool. Raises :class:`LeaseReleased` after release."""
        if self._released:
            raise LeaseReleased(f"the lease of position {self.position} was released; its slot may hold "
                                "another batch now")
        return self._array  # type: ignore[return-value]

    @property
    def released(self) -> bool:
        return self._released

    @protected
    def release(self) -> None:
        """Give the slot back to the workers. Idempotent."""
        if not self._released:
            self._core.release_lease(self)
        if guard.deferred and outermost(sys._getframe()):
            deliver()

    #: ``with pf.lease() as view`` binds the array. A C-level chain (property -> attrgetter -> the
    #: array's ``__array__``, which returns the array itself), not a Python method: between
    #: ``lease()`` returning and ``view`` being bound there is then no point where Ctrl-C can land,
    #: so an interrupt cannot drop a handed-out lease on the floor. After release, ``_array`` is a
    #: marker whose ``__array__`` raises LeaseReleased.
    __enter__ = property(operator.attrgetter("_array.__array__"))

    @protected
    def __exit__(self, *exc: Any) -> None:
        # Protected: a Ctrl-C landing on entry is delivered once the lease is released.
        if not self._released:
            self._core.release_lease(self)
        if guard.deferred and outermost(sys._getframe()):
            deliver()

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        shape = "" if self._released else f" shape={self._array.shape}"  # type: ignore[union-attr]
        return f"<Lease position={self.position} index={self.index}{shape} {state}>"


class Leases:
    """``Prefetcher.leases()``: the stream as Leases, each released when the loop asks for the next one.

    An iterator object, not a generator: an exception from a call (a Ctrl-C, a ``PrefetchTimeout``)
    would finish a generator, and a loop resumed on it would end as if the stream had, silently, with
    batches left. Here the next ``next()`` goes on where the failed one stopped (the batch an
    interrupted call was handing out comes first, as with ``for batch in pf``). A loop that stops early
    (``break``, an exception it does not resume from) drops the iterator, whose finalizer releases the
    last lease, as a generator's ``finally`` did; :meth:`close` does it at once.
    """

    __slots__ = ("_lease_call", "_timeout", "_held", "_over")

    def __init__(self, lease_call: Any, timeout: Any):
        self._lease_call, self._timeout = lease_call, timeout
        self._held: Lease | None = None
        self._over = False

    def __iter__(self) -> "Leases":
        return self

    def __next__(self) -> Lease:
        if self._over:
            raise StopIteration
        held = self._held
        if held is not None:
            held.release()  # first, then forgotten: a Ctrl-C delivered as it returns leaves it released
            self._held = None
        try:
            lease = self._lease_call(self._timeout)
        except StopIteration:
            self._over = True
            raise
        self._held = lease
        return lease

    def __del__(self) -> None:
        # The core's release, not Lease.release: a finalizer must not deliver a deferred Ctrl-C (it would be
        # printed as ignored, and lost); release_lease itself is safe from inside a call on this thread.
        held = self._held
        if held is not None and not held._released:
            try:
                held._core.release_lease(held)
            except Exception:  # noqa: BLE001 - nothing to tell from a finalizer; the next call releases it
                pass

    def close(self) -> None:
        """Release the lease handed out last and end the iteration (as a generator's ``close``)."""
        self._over = True
        held = self._held
        if held is not None:
            held.release()
            self._held = None
