"""The catalog's bugs, written again as plain threading code (the references are in :mod:`.code_twins`).

What this is
------------
Each bug here is a catalog model's design as it appears in the wild: a class
with a ``threading.Lock``, ``Condition`` or ``queue.Queue``, threads started
with ``threading.Thread``, and a test body that asserts what its author
would assert. Nothing here knows about the scheduler: the check of
:mod:`safeprefetch.interleavings` patches the primitives in while it runs,
so these bodies are exactly what a user would hand it.

Each :class:`Twin` says which catalog model it mirrors, the verdict the code
check must reach, and the options it needs (``lines=True`` for the data
race). Why some verdicts differ from the model's: a model names what a state
violates (``underflow``, ``shutdown_hang``); code shows it the way code does
-- a ``pop`` from an empty list is an uncaught ``IndexError``, a consumer
asleep forever while ``main`` joins it is a ``deadlock``, a lost item is a
failed assertion in the test body.
"""

from __future__ import annotations

import functools
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["END", "TWINS", "Twin", "run_all"]

@dataclass(frozen=True)
class Twin:
    """One design as threading code: its body at a shape, and what a check must find."""

    #: The catalog model it mirrors (or a name of its own).
    name: str
    #: ``body(**shape)`` starts threads, joins them and asserts.
    body: Callable[..., None]
    #: The shape checked by default.
    shape: dict[str, Any]
    #: The verdict the code check must reach.
    expected: str
    #: Options of the check (``lines``, ``notify``, ``lock_release``...).
    options: dict[str, Any] = field(default_factory=dict)

    def at(self, **shape: Any) -> Callable[[], None]:
        """The zero-argument test body at ``shape`` (the default shape, updated)."""
        fn = functools.partial(self.body, **{**self.shape, **shape})
        fn.__qualname__ = self.name  # type: ignore[attr-defined]
        return fn

def run_all(*threads: threading.Thread) -> None:
    """Start every thread, then join every one."""
    for t in threads:
        t.start()
    for t in threads:
        t.join()

#: The end-of-stream marker the twins' queues carry.
END = object()

# -- the bugs ---------------------------------------------------------------------------------

class OneCondBuffer:
    """A bounded buffer with one condition variable for "not full" and "not empty" alike."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.items: list = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

    def put(self, x: Any) -> None:
        with self.lock:
            while len(self.items) >= self.capacity:
                self.changed.wait()
            self.items.append(x)
            self.changed.notify()  # may wake a producer instead of a consumer

    def get(self) -> Any:
        with self.lock:
            while not self.items:
                self.changed.wait()
            x = self.items.pop(0)
            self.changed.notify()  # may wake a consumer instead of the producer
            return x

def one_cond_signal(capacity: int = 1, items: int = 2) -> None:
    buf = OneCondBuffer(capacity)
    producer = threading.Thread(target=lambda: [buf.put(i) for i in range(items)], name="producer")
    consumers = [threading.Thread(target=buf.get, name=f"consumer{k}") for k in range(items)]
    run_all(producer, *consumers)

class IfNotWhileBuffer:
    def __init__(self) -> None:
        self.items: list = []
        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)

    def put(self, x: Any) -> None:
        with self.lock:
            self.items.append(x)
            self.ready.notify()

    def get(self) -> Any:
        with self.lock:
            if not self.items:  # should be ``while``: another consumer may take the item first
                self.ready.wait()
            return self.items.pop(0)

def if_not_while(items: int = 1) -> None:
    buf = IfNotWhileBuffer()
    got: list = []
    consumers = [threading.Thread(target=lambda: got.append(buf.get()), name=f"consumer{k}") for k in range(2)]
    for c in consumers:
        c.start()
    for i in range(2):
        buf.put(i)
    for c in consumers:
        c.join()
    assert sorted(got) == [0, 1]

class Mailbox:
    def __init__(self) -> None:
        self.item: Any = None
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)

    def put(self, x: Any) -> None:
        with self.lock:
            self.item = x
            self.arrived.notify()

    def get(self) -> Any:
        with self.lock:
            self.arrived.wait()  # waits without testing: a notify sent before it is lost
            return self.item

def no_predicate_wait() -> None:
    box = Mailbox()
    got: list = []
    consumer = threading.Thread(target=lambda: got.append(box.get()), name="consumer")
    consumer.start()
    box.put(42)
    consumer.join()
    assert got == [42]

class ClosableBuffer:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.items: list = []
        self.closed = False
        self.lock = threading.Lock()
        self.not_full = threading.Condition(self.lock)

    def put(self, x: Any) -> bool:
        with self.lock:
            while len(self.items) >= self.capacity and not self.closed:
                self.not_full.wait()
            if self.closed:
                return False
            self.items.append(x)
            return True

    def close(self) -> None:
        with self.lock:
            self.closed = True  # and no notify_all: a producer asleep on a full buffer never sees it

def close_without_wake(capacity: int = 1, items: int = 2) -> None:
    buf = ClosableBuffer(capacity)
    producer = threading.Thread(target=lambda: [buf.put(i) for i in range(items)], name="producer")
    producer.start()
    buf.close()
    producer.join()

class RingBuffer:
    def __init__(self, capacity: int):
        self.slots: list = [None] * capacity
        self.head = self.tail = self.count = 0
        self.lock = threading.Lock()
        self.not_empty = threading.Condition(self.lock)

    def put(self, x: Any) -> None:
        with self.lock:  # never checks for space: overwrites the oldest unread item when full
            self.slots[self.tail] = x
            self.tail = (self.tail + 1) % len(self.slots)
            self.count += 1
            self.not_empty.notify()

    def get(self) -> Any:
        with self.lock:
            while self.count == 0:
                self.not_empty.wait()
            x = self.slots[self.head]
            self.head = (self.head + 1) % len(self.slots)
            self.count -= 1
            return x

def no_space_guard(capacity: int = 1, items: int = 2) -> None:
    buf = RingBuffer(capacity)
    got: list = []
    producer = threading.Thread(target=lambda: [buf.put(i) for i in range(items)], name="producer")
    consumer = threading.Thread(target=lambda: [got.append(buf.get()) for _ in range(items)], name="consumer")
    run_all(producer, consumer)
    assert got == list(range(items)), f"received {got}"

class RacySlots:
    def __init__(self, n: int):
        self.items: list = [None] * n
        self.next = 0

    def add(self, x: Any) -> None:
        i = self.next  # read and advanced without a lock
        self.items[i] = x
        self.next = i + 1

def racy_counter() -> None:
    slots = RacySlots(2)
    run_all(threading.Thread(target=slots.add, args=("a",), name="p1"),
         threading.Thread(target=slots.add, args=("b",), name="p2"))
    assert sorted(x for x in slots.items if x is not None) == ["a", "b"], f"slots {slots.items}"

class DoubleBuffer:
    def __init__(self) -> None:
        self.front: list = []
        self.back: list = []
        self.ready = False
        self.lock = threading.Lock()
        self.swap = threading.Condition(self.lock)

    def publish(self, x: Any) -> None:
        with self.lock:
            self.ready = True  # set before the back buffer holds the batch
            self.swap.notify()
        with self.lock:
            self.back.append(x)

    def take(self) -> Any:
        with self.lock:
            while not self.ready:
                self.swap.wait()
            self.front, self.back = self.back, self.front
            self.ready = False
            return self.front.pop()

def double_buffer_swap() -> None:
    buf = DoubleBuffer()
    got: list = []
    consumer = threading.Thread(target=lambda: got.append(buf.take()), name="consumer")
    consumer.start()
    buf.publish("batch")
    consumer.join()
    assert got == ["batch"]

def join_before_drain(capacity: int = 1, items: int = 2) -> None:
    q: queue.Queue = queue.Queue(maxsize=capacity)
    producer = threading.Thread(target=lambda: [q.put(i) for i in range(items)], name="producer")
    producer.start()
    producer.join()  # before draining: the producer blocks on the full queue, and this join never returns
    got = [q.get() for _ in range(items)]
    assert got == list(range(items))

class RefChannel:
    """A channel that ends when its last sender closes; each send handle must close once."""

    def __init__(self, senders: int):
        self.items: list = []
        self.senders = senders
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

    def send(self, x: Any) -> None:
        with self.lock:
            if self.senders == 0:
                raise RuntimeError("send on a closed channel")
            self.items.append(x)
            self.changed.notify_all()

    def close_sender(self) -> None:
        with self.lock:  # not idempotent: a second close of the same handle counts another sender gone
            self.senders -= 1
            self.changed.notify_all()

    def receive_all(self) -> list:
        out = []
        with self.lock:
            while True:
                while not self.items and self.senders > 0:
                    self.changed.wait()
                if not self.items:
                    return out
                out.append(self.items.pop(0))

def non_idempotent_close() -> None:
    ch = RefChannel(senders=2)
    got: list = []

    def careful() -> None:
        ch.send("a")
        ch.close_sender()

    def sloppy() -> None:
        try:
            ch.send("b")
        finally:
            ch.close_sender()
        ch.close_sender()  # closed again "to be sure"

    consumer = threading.Thread(target=lambda: got.extend(ch.receive_all()), name="consumer")
    run_all(threading.Thread(target=careful, name="p1"), threading.Thread(target=sloppy, name="p2"), consumer)
    assert sorted(got) == ["a", "b"], f"received {got}"

def dropped_sentinel(capacity: int = 1) -> None:
    q: queue.Queue = queue.Queue(maxsize=capacity)
    got: list = []

    def consume() -> None:
        while (x := q.get()) is not END:
            got.append(x)

    consumer = threading.Thread(target=consume, name="consumer")
    consumer.start()
    q.put(1)
    try:
        q.put_nowait(END)  # close: the end marker with a non-blocking put...
    except queue.Full:
        pass  # ...and "queue full" ignored, so the marker is dropped
    consumer.join()

def lock_order_inversion() -> None:
    a, b = threading.Lock(), threading.Lock()

    def one() -> None:
        with a:
            with b:
                pass

    def two() -> None:
        with b:
            with a:
                pass

    run_all(threading.Thread(target=one, name="t1"), threading.Thread(target=two, name="t2"))

def swallowed_producer_error(items: int = 2) -> None:
    q: queue.Queue = queue.Queue()
    errors: list = []

    def source(n: int):
        yield 0
        raise OSError("disk gone")

    def produce() -> None:
        try:
            for x in source(items):
                q.put(x)
            q.put(END)
        except Exception as e:  # "logged": the consumer is never told
            errors.append(e)

    got: list = []

    def consume() -> None:
        while (x := q.get()) is not END:
            got.append(x)

    run_all(threading.Thread(target=produce, name="producer"), threading.Thread(target=consume, name="consumer"))

#: The bugs: catalog name -> twin (``lock_order_inversion`` is not in the catalog).
TWINS: dict[str, Twin] = {t.name: t for t in [
    Twin("one_cond_signal", one_cond_signal, {"capacity": 1, "items": 2}, "deadlock"),
    Twin("if_not_while", if_not_while, {}, "uncaught_exception"),
    Twin("no_predicate_wait", no_predicate_wait, {}, "lost_wakeup"),
    Twin("close_without_wake", close_without_wake, {"capacity": 1, "items": 2}, "deadlock"),
    Twin("no_space_guard", no_space_guard, {"capacity": 1, "items": 2}, "assertion"),
    Twin("racy_counter", racy_counter, {}, "assertion", {"lines": True}),
    Twin("double_buffer_swap", double_buffer_swap, {}, "uncaught_exception"),
    Twin("join_before_drain", join_before_drain, {"capacity": 1, "items": 2}, "deadlock"),
    Twin("non_idempotent_close", non_idempotent_close, {}, "uncaught_exception"),
    Twin("dropped_sentinel", dropped_sentinel, {"capacity": 1}, "deadlock"),
    Twin("lock_order_inversion", lock_order_inversion, {}, "deadlock"),
    Twin("swallowed_producer_error", swallowed_producer_error, {}, "deadlock"),
]}

