"""monitor: one lock, two condvars and ``while`` loops, with an OPEN -> DRAINING -> CLOSED | FAILED lifecycle, so close, end of stream and a producer's error all reach every thread.

Source: Hoare/Mesa monitors as in CPython's ``Lib/queue.py`` (``not_full`` and
``not_empty`` around one mutex), with the shutdown contract of Python 3.13's
``Queue.shutdown(immediate=False)``: once shut, puts fail and gets drain the
buffer before reporting the end. OSTEP ch. 30's final, working bounded buffer
is the same protocol without the lifecycle.

Minimal config: producers=1 consumers=1 capacity=1 items=1; proved over the
``sweep`` (up to 2 producers, 2 consumers, capacity 2, 2 items each, with
close and error injection), under every condvar semantics.

Expected verdict: ok.

Design
------
``state`` is OPEN while producers may put. It becomes DRAINING exactly once,
by the one idempotent ``close`` routine, which three callers share: the last
producer to finish, a closer thread (``close=True``: at any point), and a
producer whose source raises (``error=True``: instead of any put). After that:

* a ``put`` fails (the ShutDown of ``Queue.shutdown``) and the producer stops;
* ``get`` keeps taking items while there are any (the drain);
* the first ``get`` that finds the buffer empty moves DRAINING to CLOSED, or
  to FAILED when a producer's error caused the close, and reports end of
  stream or re-raises the error. Every later ``get`` reports the same.

The error therefore arrives *at its position*: after every item put before
it, and no item is put after it.

Condvars (the CPython ``queue`` convention: when each is notified):

* ``not_empty`` -- notified (one waiter) after a put, and (all) by close.
* ``not_full``  -- notified (one waiter) after a get, and (all) by close.

Every wait sits in a ``while`` loop whose test includes ``state``, so the
design is correct whether ``notify_one`` wakes FIFO or any waiter and with
spurious wakeups (``--set notify=any --set spurious=on``).
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation

OPEN, DRAINING, CLOSED, FAILED = "open", "draining", "closed", "failed"


class Monitor(Model):
    name = "monitor"
    expected = "ok"
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 1, "close": False, "error": False}
    sweep = {"producers": [1, 2], "consumers": [1, 2], "capacity": [1, 2], "items": [0, 1, 2],
             "close": [False, True], "error": [False, True]}

    def build(self, m, producers, consumers, capacity, items, close, error):
        if producers < 1 or consumers < 1 or capacity < 1 or items < 0:
            raise ModelError("monitor needs producers >= 1, consumers >= 1, capacity >= 1, items >= 0")
        m.shared(
            buf=(),            # the buffer, oldest first (item ids)
            state=OPEN,        # OPEN -> DRAINING -> CLOSED | FAILED
            writers=producers,  # producers that have not finished
            failed=False,      # a producer's error caused the close
            sealed=-1,         # len(produced) when the close happened (-1: still open)
            produced=(),       # every item a put accepted, in order
            received=(),       # every item a get returned, in order
            error_seen=-1,     # len(received) when a get first re-raised the error
            close_requested=False,
        )
        m.mutex("lock")
        m.condvar("not_full")   # notified after a get, and by close
        m.condvar("not_empty")  # notified after a put, and by close

        def shut(s):
            """The idempotent half of close (the lock is held): seal the stream once."""
            if s.state == OPEN:
                s.state = DRAINING
                s.sealed = len(s.produced)

        # -- producer: put each item, then finish (the last one closes) ------

        def check_space(s, me):
            if s.state != OPEN:
                return "finish"  # put raises ShutDown: stop producing
            return "wait not_full" if len(s.buf) == capacity else "put"

        def put(s, me, outcome):
            if outcome == "error":  # the source raised: fail the stream at this position
                s.failed = True
                s.writers -= 1
                shut(s)
                return "close: wake putters"
            item = me.who * items + (items - me.left)
            s.buf += (item,)
            s.produced += (item,)
            me.left -= 1
            return "notify not_empty"

        def finish(s, me):
            s.writers -= 1
            if s.writers == 0 and s.state == OPEN:
                shut(s)
                return "close: wake putters"
            return "unlock and return"

        p = m.program("producer", who=0, left=items)
        p.acquire("lock", "lock", next=lambda s, me: "check space" if me.left else "finish",
                  to=["check space", "finish"])
        p.step("check space", next=check_space, to=["finish", "wait not_full", "put"])
        p.wait("wait not_full", "not_full", "lock", next="check space",
               until=lambda s, me: len(s.buf) < capacity or s.state != OPEN)
        p.step("put", put, branches=("ok", "error") if error else ("ok",),
               to=["close: wake putters", "notify not_empty"])
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next="lock")
        p.step("finish", finish, to=["close: wake putters", "unlock and return"])
        p.notify_all("close: wake putters", "not_full", next="close: wake getters")
        p.notify_all("close: wake getters", "not_empty", next="unlock and return")
        p.release("unlock and return", "lock", next=DONE)

        # -- consumer: get until end of stream (or the error) ----------------

        def check_item(s, me):
            if s.buf:
                return "get"
            return "wait not_empty" if s.state == OPEN else "end of stream"

        def get(s, me):
            s.received += (s.buf[0],)
            s.buf = s.buf[1:]

        def end(s, me):
            if s.state == DRAINING:
                s.state = FAILED if s.failed else CLOSED
            if s.state == FAILED and s.error_seen < 0:
                s.error_seen = len(s.received)  # get() re-raises the producer's error

        c = m.program("consumer")
        c.acquire("lock", "lock", next="check item")
        c.step("check item", next=check_item, to=["get", "wait not_empty", "end of stream"])
        c.wait("wait not_empty", "not_empty", "lock", next="check item",
               until=lambda s, me: bool(s.buf) or s.state != OPEN)
        c.step("get", get, next="notify not_full")
        c.notify_one("notify not_full", "not_full", next="unlock")
        c.release("unlock", "lock", next="lock")
        c.step("end of stream", end, next="unlock and return")
        c.release("unlock and return", "lock", next=DONE)

        # -- closer: close() at any point; idempotent ------------------------

        def request_close(s, me):
            s.close_requested = True
            shut(s)

        cl = m.program("closer")
        cl.acquire("lock", "lock", next="close")
        cl.step("close", request_close, next="close: wake putters")
        cl.notify_all("close: wake putters", "not_full", next="close: wake getters")
        cl.notify_all("close: wake getters", "not_empty", next="unlock")
        cl.release("unlock", "lock", next=DONE)

        for i in range(producers):
            m.thread(f"producer{i}", p, who=i)
        for i in range(consumers):
            m.thread(f"consumer{i}", c)
        if close:
            m.thread("closer", cl)

        # -- checks ----------------------------------------------------------

        m.shutdown_when(lambda s: s.close_requested or s.failed)
        m.invariant("0 <= len(buf) <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        m.invariant("no put succeeds after close", lambda s: s.sealed < 0 or len(s.produced) == s.sealed,
                    "use_after_close")
        m.invariant("the lifecycle only moves forward",
                    lambda s: (s.state == OPEN) == (s.sealed < 0))

        everything = tuple(p * items + j for p in range(producers) for j in range(items))

        def at_end(s):
            # Gets drain: every item a put accepted is received, once, in put order.
            found = delivery_violation(s.produced, s.received, ordered=True)
            if found:
                return found
            if not s.close_requested and not s.failed:
                found = delivery_violation(everything, s.received, ordered=False)
                if found:
                    return found
            if s.state not in (CLOSED, FAILED):
                return "invariant", f"every thread finished but the stream is {s.state}"
            if s.failed:
                if s.error_seen < 0:
                    return "error_lost", "a producer's error was never re-raised by a get"
                if s.error_seen != s.sealed:
                    return "lost_item", (f"the error was raised after {s.error_seen} items "
                                         f"but {s.sealed} were put before it")
            return None

        m.at_end(at_end)
