"""What a Prefetcher raises: named exceptions, each saying what to do about it."""

from __future__ import annotations

from .lifecycle import PrefetcherForked

__all__ = ["CALLER_SIGNALS", "LeaseHeld", "LeaseReleased", "PrefetchTimeout", "PrefetcherClosed", "PrefetcherExhausted",
           "PrefetcherForked", "PrefetcherWarning", "SourceErrorNotSent", "from_source"]


class PrefetcherClosed(RuntimeError):
    """The prefetcher was closed (or abandoned); it cannot deliver any more batches."""


class PrefetchTimeout(TimeoutError):
    """``get(timeout=...)`` (or ``copy_prefetched`` / ``lease``, or the constructor's first read) found no batch in time.

    Nothing was consumed: calling again continues the stream where it was.
    """


class LeaseHeld(RuntimeError):
    """A batch was requested while a lease is still held.

    The reference model allows at most one lease; release it first
    (``lease.release()``, or leave its ``with`` block).
    """


class LeaseReleased(RuntimeError):
    """The Lease was released: its slot belongs to the workers again, and its array may be overwritten."""


class PrefetcherExhausted(RuntimeError):
    """A second pass over a Prefetcher whose stream has ended. A Prefetcher is one pass; make a new one."""


class PrefetcherWarning(RuntimeWarning):
    """``close()`` gave up waiting for a worker stuck inside a fetch; its daemon thread was left running."""


class SourceErrorNotSent(RuntimeError):
    """The source raised in an executor's process an exception that cannot travel back (it does not survive
    pickling). This stands in for it, at the same position: its type, message and the traceback there, as text.

    Sent as it was, it would have broken the executor itself (``BrokenProcessPool``: every later task of the
    caller's pool fails too).
    """


#: What a prefetcher raises to its own caller about itself: a timeout (retry), closed, exhausted, forked, a
#: lease. Raised by a source -- a prefetcher or lease the source reads from -- each would read as this
#: prefetcher's own, so it is delivered wrapped (:func:`from_source`).
CALLER_SIGNALS = (PrefetchTimeout, PrefetcherClosed, PrefetcherExhausted, PrefetcherForked, LeaseHeld, LeaseReleased)


def from_source(where: str, e: BaseException) -> BaseException:
    """What a source's exception is delivered as: itself, or, for one of :data:`CALLER_SIGNALS`, a
    ``RuntimeError`` naming it, with it as the cause.

    An inner prefetcher's ``PrefetchTimeout``, delivered as itself, was taken for the outer's own: the caller
    retried, as the timeout says to, and the next call found the stream ended there (the error ends it), so
    the rest was lost without a word. Its ``PrefetcherClosed`` said the outer was closed when it was not.
    """
    if not isinstance(e, CALLER_SIGNALS):
        return e
    why = ("this prefetcher's own timeout, and a retry would find the stream ended here"
           if isinstance(e, PrefetchTimeout) else f"this prefetcher's own {type(e).__name__}")
    err = RuntimeError(f"{where}: the source raised {type(e).__name__} ({e}) from a prefetcher or lease it reads; "
                       f"raised as itself it would read as {why}")
    err.__cause__ = e
    return err
