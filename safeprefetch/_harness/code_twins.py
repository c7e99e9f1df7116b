"""The catalog's bugs and reference designs, written again as plain threading code.

What this is
------------
Each catalog model is a design written as labelled atomic steps. Its *twin*
here is the same design as it appears in the wild: a class with a
``threading.Lock``, ``Condition``, ``Semaphore`` or ``queue.Queue``, threads
started with ``threading.Thread``, and a test body that asserts what the
user would assert. Nothing here knows about the scheduler: the check of
:mod:`safeprefetch.interleavings` patches the primitives in while it runs, so
these bodies are exactly what a user would hand it. The bugs are in
:mod:`.code_bugs`; the four correct reference designs are here.

Each :class:`Twin` says which catalog model it mirrors, the verdict the code
check must reach, and the options it needs (``lines=True`` for the data
race, ``lock_release``...). The 12 bugs are found with minimized traces and
the 4 references are proved at the shapes the bench and the tests use
(tests/test_interleavings_twins.py; ``python -m safeprefetch bench-code``).

Why some verdicts differ from the model's: a model names what a state
violates (``underflow``, ``shutdown_hang``); code shows it the way code does
-- a ``pop`` from an empty list is an uncaught ``IndexError``, a consumer
asleep forever while ``main`` joins it is a ``deadlock``, a lost item is a
failed assertion in the test body.
"""

from __future__ import annotations

import threading
from typing import Any

from .code_bugs import END, TWINS, Twin, run_all

__all__ = ["REFERENCES", "TWINS", "Twin", "bounded_buffer", "twin"]


# -- the references -------------------------------------------------------------------------

class BoundedBuffer:
    """The correct bounded buffer: one lock, two condition variables, ``while`` loops."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.items: list = []
        self.lock = threading.Lock()
        self.not_full = threading.Condition(self.lock)
        self.not_empty = threading.Condition(self.lock)

    def put(self, x: Any) -> None:
        with self.lock:
            while len(self.items) >= self.capacity:
                self.not_full.wait()
            self.items.append(x)
            self.not_empty.notify()

    def get(self) -> Any:
        with self.lock:
            while not self.items:
                self.not_empty.wait()
            x = self.items.pop(0)
            self.not_full.notify()
            return x


def bounded_buffer(producers: int = 1, consumers: int = 1, capacity: int = 1, items: int = 2) -> None:
    """Each producer puts ``items``; the consumers share them out evenly; every item arrives once."""
    buf = BoundedBuffer(capacity)
    total = producers * items
    if total % consumers:
        raise ValueError("the consumers must share the items evenly")
    got: list = []
    ps = [threading.Thread(target=lambda k=k: [buf.put((k, i)) for i in range(items)], name=f"p{k}")
          for k in range(producers)]
    cs = [threading.Thread(target=lambda: [got.append(buf.get()) for _ in range(total // consumers)], name=f"c{k}")
          for k in range(consumers)]
    run_all(*ps, *cs)
    assert sorted(got) == [(k, i) for k in range(producers) for i in range(items)]


class Closed(Exception):
    """The stream was closed by the consumer side."""


class Monitor:
    """One lock, two condvars, ``while`` loops, and a lifecycle OPEN -> DRAINING -> CLOSED | FAILED."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.items: list = []
        self.state = "OPEN"
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.not_full = threading.Condition(self.lock)
        self.not_empty = threading.Condition(self.lock)

    def put(self, x: Any) -> None:
        with self.lock:
            while len(self.items) >= self.capacity and self.state == "OPEN":
                self.not_full.wait()
            if self.state != "OPEN":
                raise Closed
            self.items.append(x)
            self.not_empty.notify()

    def finish(self, error: BaseException | None = None) -> None:
        """The producer is done (or failed): every consumer must hear of it."""
        with self.lock:
            if self.state == "OPEN":
                self.state, self.error = ("FAILED", error) if error else ("DRAINING", None)
            self.not_empty.notify_all()

    def close(self) -> None:
        with self.lock:
            self.state = "CLOSED"
            self.items.clear()
            self.not_full.notify_all()
            self.not_empty.notify_all()

    def get(self) -> Any:
        with self.lock:
            while not self.items and self.state == "OPEN":
                self.not_empty.wait()
            if self.items:
                x = self.items.pop(0)
                self.not_full.notify()
                return x
            if self.state == "FAILED":
                raise self.error  # type: ignore[misc]
            return END


def monitor(consumers: int = 1, capacity: int = 1, items: int = 2, fail: bool = False, close_early: bool = False) \
        -> None:
    mon = Monitor(capacity)
    got: list = []
    errors: list = []

    def produce() -> None:
        try:
            for i in range(items):
                mon.put(i)
        except Closed:
            return
        mon.finish(OSError("source failed") if fail else None)

    def consume() -> None:
        try:
            while (x := mon.get()) is not END:
                got.append(x)
        except OSError as e:
            errors.append(e)

    threads = [threading.Thread(target=produce, name="producer")]
    threads += [threading.Thread(target=consume, name=f"c{k}") for k in range(consumers)]
    for t in threads:
        t.start()
    if close_early:
        mon.close()
    for t in threads:
        t.join()
    if not close_early:
        assert sorted(got) == list(range(items))
        assert len(errors) == (consumers if fail else 0)


class SemaphoreBuffer:
    """The Little Book of Semaphores buffer: a mutex plus ``items`` and ``spaces`` counting semaphores,
    with a closed flag and poisoning so close wakes every blocked thread."""

    def __init__(self, capacity: int, parties: int):
        self.items = threading.Semaphore(0)
        self.spaces = threading.Semaphore(capacity)
        self.mutex = threading.Lock()
        self.buffer: list = []
        self.closed = False
        self.parties = parties

    def put(self, x: Any) -> bool:
        self.spaces.acquire()
        with self.mutex:
            if self.closed:
                self.spaces.release()  # pass the poison on
                return False
            self.buffer.append(x)
        self.items.release()
        return True

    def get(self) -> Any:
        self.items.acquire()
        with self.mutex:
            if self.buffer:
                x = self.buffer.pop(0)
            else:
                self.items.release()  # poisoned: pass it on to the next consumer
                return END
        self.spaces.release()
        return x

    def close(self) -> None:
        with self.mutex:
            if self.closed:
                return
            self.closed = True
        self.items.release()  # poison: wakes one consumer, which wakes the next
        self.spaces.release()


def semaphores(consumers: int = 1, capacity: int = 1, items: int = 2) -> None:
    buf = SemaphoreBuffer(capacity, consumers)
    got: list = []

    def produce() -> None:
        for i in range(items):
            buf.put(i)
        buf.close()

    def consume() -> None:
        while (x := buf.get()) is not END:
            got.append(x)

    run_all(threading.Thread(target=produce, name="producer"),
         *[threading.Thread(target=consume, name=f"c{k}") for k in range(consumers)])
    assert sorted(got) == list(range(items))


class _Chan:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.items: list = []
        self.senders = 1
        self.receivers = 1
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)


class SendHandle:
    """trio-style: clone to share, close each clone once; the last close ends the stream."""

    def __init__(self, chan: _Chan):
        self.chan = chan
        self.closed = False

    def clone(self) -> "SendHandle":
        with self.chan.lock:
            self.chan.senders += 1
        return SendHandle(self.chan)

    def send(self, x: Any) -> None:
        ch = self.chan
        with ch.lock:
            while len(ch.items) >= ch.capacity and ch.receivers > 0:
                ch.changed.wait()
            if ch.receivers == 0:
                raise Closed
            ch.items.append(x)
            ch.changed.notify_all()

    def close(self) -> None:
        ch = self.chan
        with ch.lock:
            if self.closed:  # idempotent
                return
            self.closed = True
            ch.senders -= 1
            ch.changed.notify_all()


class ReceiveHandle:
    def __init__(self, chan: _Chan):
        self.chan = chan

    def receive(self) -> Any:
        ch = self.chan
        with ch.lock:
            while not ch.items and ch.senders > 0:
                ch.changed.wait()
            if not ch.items:
                return END
            x = ch.items.pop(0)
            ch.changed.notify_all()
            return x


def channel(producers: int = 2, capacity: int = 1, items: int = 1) -> None:
    ch = _Chan(capacity)
    first = SendHandle(ch)
    handles = [first] + [first.clone() for _ in range(producers - 1)]
    rx = ReceiveHandle(ch)
    got: list = []

    def produce(h: SendHandle, k: int) -> None:
        try:
            for i in range(items):
                h.send((k, i))
        finally:
            h.close()
            h.close()  # a second close is harmless here

    def consume() -> None:
        while (x := rx.receive()) is not END:
            got.append(x)

    run_all(*[threading.Thread(target=produce, args=(h, k), name=f"p{k}") for k, h in enumerate(handles)],
         threading.Thread(target=consume, name="consumer"))
    assert sorted(got) == [(k, i) for k in range(producers) for i in range(items)]


#: The correct designs, at the shapes the default test run proves (bigger ones are ``slow``).
REFERENCES: dict[str, Twin] = {t.name: t for t in [
    Twin("bounded_buffer", bounded_buffer, {"producers": 1, "consumers": 1, "capacity": 1, "items": 2}, "ok"),
    Twin("monitor", monitor, {"consumers": 2, "capacity": 1, "items": 1}, "ok"),
    Twin("semaphores", semaphores, {"consumers": 2, "capacity": 1, "items": 1}, "ok"),
    Twin("channel", channel, {"producers": 2, "capacity": 1, "items": 1}, "ok"),
]}


def twin(name: str) -> Twin:
    """A bug twin or a reference by name."""
    found = TWINS.get(name) or REFERENCES.get(name)
    if found is None:
        raise KeyError(f"no twin named {name!r} (known: {', '.join([*TWINS, *REFERENCES])})")
    return found
