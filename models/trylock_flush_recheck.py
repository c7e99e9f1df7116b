"""trylock_flush_recheck: the holder of the flush lock looks at the buffer again after releasing it, so an item left by a writer that found the lock busy is always flushed.

Source: the fix of ``trylock_flush``: the pattern of "flat combining" and of
``concurrent.futures``-style wakeup coalescing -- whoever holds the lock
re-checks for work after releasing, so a skipped ``try`` never strands it.

Minimal config: writers=2; proved over the ``sweep`` (up to four writers),
under every condvar semantics.

Expected verdict: ok. Whenever a writer finds the lock busy, its append
happened before the holder's release, and the holder's look at the buffer is
atomic with that release: it sees the item and takes the lock again (or a
newer writer does).
"""

from safeprefetch.models.trylock_flush import TrylockFlush


class TrylockFlushRecheck(TrylockFlush):
    name = "trylock_flush_recheck"
    expected = "ok"
    fix = None
    sweep = {"writers": [1, 2, 3, 4]}
    recheck = True
