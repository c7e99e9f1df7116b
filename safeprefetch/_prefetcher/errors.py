"""What a Prefetcher raises: named exceptions, each saying what to do about it."""

from __future__ import annotations

from .lifecycle import PrefetcherForked

__all__ = ["LeaseHeld", "LeaseReleased", "PrefetchTimeout", "PrefetcherClosed", "PrefetcherExhausted", "PrefetcherForked",
           "PrefetcherWarning", "SourceErrorNotSent"]


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
