"""trylock_flush: a writer that finds the flush lock busy leaves its item to the holder, which has already looked: the item is never flushed.

Source: the "someone else is already doing it" shortcut around
``lock.acquire(blocking=False)``: a logging handler, a metrics exporter or a
write-combining buffer appends, then flushes only if it can take the lock
without waiting, assuming the current holder will pick its entry up. The
holder takes its snapshot before the append, and releases after it.

Minimal config: writers=2.

Expected verdict: lost_item. Writer 0 appends, takes the lock and flushes
(the buffer is now empty); writer 1 appends, finds the lock busy and leaves;
writer 0 releases. Everyone is done and one item sits in the buffer.

Fix: after releasing, the holder looks at the buffer again and retries if it
is not empty (``trylock_flush_recheck``). A writer that finds the lock busy
may then leave, because the holder's look comes after the release.
"""

from safeprefetch.model import DONE, Model


class TrylockFlush(Model):
    name = "trylock_flush"
    expected = "lost_item"
    fix = "trylock_flush_recheck"
    params = {"writers": 2}
    #: Whether the holder looks at the buffer again after releasing (the fix).
    recheck = False

    def build(self, m, writers):
        m.shared(pending=0, flushed=0)
        m.mutex("flush_lock")

        def append(s, me):
            s.pending += 1

        def flush(s, me):
            s.flushed += s.pending
            s.pending = 0

        w = m.program("writer")
        w.step("append", append, next="try lock")
        # lock.acquire(blocking=False): if busy, assume the holder flushes our item.
        w.try_acquire("try lock", "flush_lock", next="flush", busy=DONE)
        w.step("flush", flush, next="unlock")
        if self.recheck:
            w.release("unlock", "flush_lock", next=lambda s, me: "try lock" if s.pending else DONE,
                      to=["try lock", DONE])
        else:
            w.release("unlock", "flush_lock", next=DONE)
        for i in range(writers):
            m.thread(f"writer{i}", w)
        m.symmetric(*(f"writer{i}" for i in range(writers)))

        def everything_flushed(s):
            if s.pending:
                return "lost_item", f"{s.pending} appended item(s) never flushed"
            return None
        m.at_end(everything_flushed)
