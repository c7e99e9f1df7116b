"""semaphores: the Little Book of Semaphores bounded buffer (a mutex plus ``items`` and ``spaces`` counting semaphores), with a closed flag and poisoning so shutdown wakes every blocked thread.

Source: Allen B. Downey, *The Little Book of Semaphores*, §4.1.4
(producer-consumer with a finite buffer). The closed flag and the poison
permits are the usual way to add shutdown to it: a semaphore has no
``notify_all``, so close releases one extra permit per thread that might be
blocked.

Minimal config: producers=1 consumers=1 capacity=1 items=1; proved over the
``sweep`` (up to 2 producers, 2 consumers, capacity 2, 2 items each, with
close and error injection).

Expected verdict: ok.

Design
------
The §4.1 protocol, unchanged::

    producer: spaces.acquire(); mutex.acquire(); put; mutex.release(); items.release()
    consumer: items.acquire();  mutex.acquire(); get; mutex.release(); spaces.release()

Added for shutdown, all under ``mutex``:

* ``close`` sets ``closed`` once (idempotent) and *poisons* both semaphores:
  one ``items`` permit per consumer and one ``spaces`` permit per producer.
  Its callers are the last producer to finish, a closer thread
  (``close=True``, at any point) and a producer whose source raises
  (``error=True``, instead of any put; it also sets ``failed``).
* A producer that gets a ``spaces`` permit and then finds ``closed`` stops
  (its put would raise).
* A consumer that gets an ``items`` permit takes an item if there is one
  (the drain), and otherwise, necessarily after close, reports end of stream
  or re-raises the producer's error.

Why the poison is enough: before close, ``items`` never exceeds the number of
items in the buffer, so a permit always finds an item. After close, the
permits are the remaining items plus one per consumer, and each consumer
spends exactly one permit on an empty buffer before it leaves; likewise each
producer spends at most one ``spaces`` permit after close. The semaphore
bounds (``capacity`` plus the poison) are checked on every release.

It is here as a teaching contrast with ``monitor``: the same contract, but
the wakeup logic is counting, not predicates, so there is no ``wait`` to
declare ``until=`` on, and condvar settings do not change it.
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation, violate


class Semaphores(Model):
    name = "semaphores"
    expected = "ok"
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 1, "close": False, "error": False}
    sweep = {"producers": [1, 2], "consumers": [1, 2], "capacity": [1, 2], "items": [0, 1, 2],
             "close": [False, True], "error": [False, True]}

    def build(self, m, producers, consumers, capacity, items, close, error):
        if producers < 1 or consumers < 1 or capacity < 1 or items < 0:
            raise ModelError("semaphores needs producers >= 1, consumers >= 1, capacity >= 1, items >= 0")
        m.shared(
            buf=(),             # the buffer, oldest first (item ids)
            closed=False,       # close has run
            writers=producers,  # producers that have not finished
            failed=False,       # a producer's error caused the close
            sealed=-1,          # len(produced) at close (-1: still open)
            produced=(),        # every item put, in order
            received=(),        # every item taken, in order
            error_seen=-1,      # len(received) when a consumer first re-raised the error
            close_requested=False,
        )
        m.mutex("mutex")
        m.semaphore("items", 0, capacity + consumers)     # items in the buffer (+ poison)
        m.semaphore("spaces", capacity, capacity + producers)  # free slots (+ poison)

        def seal(s):
            """Mark the stream closed (mutex held). True when this call closed it."""
            if s.closed:
                return False
            s.closed = True
            s.sealed = len(s.produced)
            return True

        # Close's poison, unrolled: "poison items 1..C" then "poison spaces 1..P".
        poison = [f"poison items {i + 1}" for i in range(consumers)]
        poison += [f"poison spaces {i + 1}" for i in range(producers)]
        first_poison = poison[0]

        def add_poison(prog):
            """The second half of close, outside the mutex: one permit per thread that may be blocked."""
            for k, label in enumerate(poison):
                nxt = poison[k + 1] if k + 1 < len(poison) else DONE
                prog.sem_release(label, "items" if label.startswith("poison items") else "spaces", next=nxt)

        # -- producer ---------------------------------------------------------

        def put(s, me, outcome):
            if s.closed:
                return "unlock and stop"  # put raises: the stream is closed
            if outcome == "error":  # the source raised: fail the stream here
                s.failed = True
                s.writers -= 1
                seal(s)
                return "unlock, then poison"
            item = me.who * items + (items - me.left)
            s.buf += (item,)
            s.produced += (item,)
            me.left -= 1
            return "unlock"

        def finish(s, me):
            s.writers -= 1
            if s.writers == 0 and seal(s):
                return "unlock, then poison"
            return "unlock and return"

        p = m.program("producer", who=0, left=items)
        p.step("next item", next=lambda s, me: "spaces.acquire" if me.left else "mutex.acquire to finish",
               to=["spaces.acquire", "mutex.acquire to finish"])
        p.sem_acquire("spaces.acquire", "spaces", next="mutex.acquire")
        p.acquire("mutex.acquire", "mutex", next="put")
        p.step("put", put, branches=("ok", "error") if error else ("ok",),
               to=["unlock and stop", "unlock, then poison", "unlock"])
        p.release("unlock", "mutex", next="items.release")
        p.sem_release("items.release", "items", next="next item")
        p.release("unlock and stop", "mutex", next="mutex.acquire to finish")
        p.acquire("mutex.acquire to finish", "mutex", next="finish")
        p.step("finish", finish, to=["unlock, then poison", "unlock and return"])
        p.release("unlock and return", "mutex", next=DONE)
        p.release("unlock, then poison", "mutex", next=first_poison)
        add_poison(p)

        # -- consumer ---------------------------------------------------------

        def get(s, me):
            if s.buf:
                s.received += (s.buf[0],)
                s.buf = s.buf[1:]
                return "unlock"
            if not s.closed:
                violate("underflow", f"{me.name} got an items permit but the buffer is empty and open")
            if s.failed and s.error_seen < 0:
                s.error_seen = len(s.received)  # re-raise the producer's error
            return "unlock and return"

        c = m.program("consumer")
        c.sem_acquire("items.acquire", "items", next="mutex.acquire")
        c.acquire("mutex.acquire", "mutex", next="get")
        c.step("get", get, to=["unlock", "unlock and return"])
        c.release("unlock", "mutex", next="spaces.release")
        c.sem_release("spaces.release", "spaces", next="items.acquire")
        c.release("unlock and return", "mutex", next=DONE)

        # -- closer -----------------------------------------------------------

        def request_close(s, me):
            s.close_requested = True
            return "unlock, then poison" if seal(s) else "unlock and return"

        cl = m.program("closer")
        cl.acquire("mutex.acquire", "mutex", next="close")
        cl.step("close", request_close, to=["unlock, then poison", "unlock and return"])
        cl.release("unlock and return", "mutex", next=DONE)
        cl.release("unlock, then poison", "mutex", next=first_poison)
        add_poison(cl)

        for i in range(producers):
            m.thread(f"producer{i}", p, who=i)
        for i in range(consumers):
            m.thread(f"consumer{i}", c)
        if close:
            m.thread("closer", cl)

        # -- checks -----------------------------------------------------------

        m.shutdown_when(lambda s: s.close_requested or s.failed)
        m.invariant("0 <= len(buf) <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        m.invariant("no put succeeds after close", lambda s: s.sealed < 0 or len(s.produced) == s.sealed,
                    "use_after_close")

        everything = tuple(p * items + j for p in range(producers) for j in range(items))

        def at_end(s):
            found = delivery_violation(s.produced, s.received, ordered=True)
            if found:
                return found
            if not s.close_requested and not s.failed:
                found = delivery_violation(everything, s.received, ordered=False)
                if found:
                    return found
            if not s.closed:
                return "invariant", "every thread finished but the stream was never closed"
            if s.failed:
                if s.error_seen < 0:
                    return "error_lost", "a producer's error was never re-raised by a consumer"
                if s.error_seen != s.sealed:
                    return "lost_item", (f"the error was raised after {s.error_seen} items "
                                         f"but {s.sealed} were put before it")
            return None

        m.at_end(at_end)
