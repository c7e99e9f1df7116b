"""The consumer's common call in C (``_prefetcher/cconsumer.py``): the same stream as the Python path, and
nothing lost when a Ctrl-C lands as it returns.

* **Differential.** The same calls (``copy_prefetched``, ``get``, ``next``, leases) on two prefetchers of the
  same source, one with the fast path and one without: the same batches, the same counts, the same
  ``last_index``, and the fast path did serve some of them.
* **The interruption point.** The C function has no eval-breaker point of its own; its return has one, in the
  public method's frame. A profile hook raises ``KeyboardInterrupt`` at that return (``c_return``, the point
  where the interpreter runs a pending signal handler) after the fast path served a batch: the next call
  must return that batch, even when the caller wrote into ``out`` in between. A mutant whose ``unhand`` does
  nothing loses the batch, and the check says so.
* **Two consumer threads** share the stream: every batch once.
* **An ``out`` the fast path does not take** gets the Python path's error, word for word.
"""

from __future__ import annotations

import dis
import sys
import threading

import numpy as np
import pytest
from _cython import cython_here
from hypothesis import given, settings
from hypothesis import strategies as st

from safeprefetch import Prefetcher
from safeprefetch._prefetcher import cconsumer, policy
from safeprefetch._prefetcher.core import Core

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not cython_here(), reason="needs Cython (speed extra)")]

ITEMS = 60


def _source() -> np.ndarray:
    return np.arange(ITEMS * 6, dtype=np.float32).reshape(ITEMS, 2, 3)


def _opened(monkeypatch, fast: bool = True, capacity: int = 8) -> Prefetcher:
    """A typed prefetcher taking long runs (its consumer's pace is always within the run budget), its buffer
    full before the first call, so that the fast path has batches to serve."""
    monkeypatch.setattr(policy, "RUN_BUDGET", 1.0)
    pf = Prefetcher(_source(), capacity=capacity, runtime="typed")
    core = pf._core
    if fast:
        assert core.serve_fast is not None
    else:
        core.serve_fast = None
    while core.ready_now() < capacity:  # wait for the workers to fill the buffer (observable state)
        threading.Event().wait(0.001)
    return pf


def _served() -> int:
    module = cconsumer.load()
    assert module is not None
    return module.F_count()


def _one(pf: Prefetcher, how: str, out: np.ndarray) -> np.ndarray | None:
    """One call of kind ``how``: the batch it returned (a copy), or None at the end."""
    if how == "copy":
        return out.copy() if pf.copy_prefetched(out) else None
    try:
        if how == "get":
            return pf.get()
        if how == "next":
            return next(pf)
        with pf.lease() as view:
            return np.array(view)
    except StopIteration:
        return None


CALLS = st.lists(st.sampled_from(["copy", "get", "next", "copy", "copy", "lease"]), min_size=ITEMS + 1,
                 max_size=ITEMS + 1)


@settings(max_examples=15, deadline=None)
@given(CALLS)
def test_the_fast_path_serves_the_python_paths_stream(calls):
    mp = pytest.MonkeyPatch()
    try:
        before = _served()
        streams, stats = [], []
        for fast in (True, False):
            with _opened(mp, fast) as pf:
                out = np.empty((2, 3), np.float32)
                got = [_one(pf, how, out) for how in calls]
                streams.append(got)
                stats.append((pf.stats.batches, pf.last_index))
        assert _served() > before  # the fast path did serve
        fast, slow = streams
        assert len(fast) == len(slow) and all(
            (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))
            for a, b in zip(fast, slow))
        assert [a is None for a in fast] == [False] * ITEMS + [True]
        assert np.array_equal(np.array(fast[:ITEMS]), _source())
        assert stats[0] == stats[1]
    finally:
        mp.undo()


_METHODS = {"copy": Prefetcher.copy_prefetched, "get": Prefetcher.get, "next": Prefetcher.__next__}


def at_each_instruction(code, at):
    """Call ``at(offset)`` before each instruction of ``code`` runs, until the returned function disarms it:
    ``sys.monitoring`` on 3.12+ (whose ``settrace`` gives no opcode events to a frame that asks for them at its
    call), ``settrace`` opcode events on 3.11. What ``at`` raises is raised by that instruction."""
    if sys.version_info >= (3, 12):
        mon = sys.monitoring
        tool = mon.DEBUGGER_ID
        mon.use_tool_id(tool, "test_cconsumer")
        mon.register_callback(tool, mon.events.INSTRUCTION, lambda c, offset: at(offset) if c is code else None)
        mon.set_local_events(tool, code, mon.events.INSTRUCTION)

        def disarm() -> None:
            mon.set_local_events(tool, code, 0)
            mon.register_callback(tool, mon.events.INSTRUCTION, None)
            mon.free_tool_id(tool)
        return disarm

    def local(frame, event, arg):
        if event == "opcode":
            at(frame.f_lasti)
        return local

    def hook(frame, event, arg):
        if frame.f_code is code:
            frame.f_trace_opcodes = True
            return local
        return None
    sys.settrace(hook)
    return lambda: sys.settrace(None)


def _interrupt_at_a_served_return(how: str):
    """Arm a hook that raises KeyboardInterrupt in the public method ``how`` at the first instruction after
    the fast-path call that served a batch returned: the one that stores its result, inside the same ``try``
    as the call's own eval-breaker check (where a pending signal's handler runs; a hook cannot stop there).
    Returns (a list that holds True once it fired, the function that disarms it)."""
    fired: list[bool] = []
    module = cconsumer.load()
    start = module.F_count()
    code = _METHODS[how].__code__

    def at(offset: int) -> None:
        if not fired and module.F_count() > start:
            fired.append(True)
            op = next(i for i in dis.get_instructions(code) if i.offset == offset)
            assert op.opname.startswith("STORE_FAST") and "key" in str(op.argval), op
            raise KeyboardInterrupt

    return fired, at_each_instruction(code, at)


@pytest.mark.parametrize("how", ["copy", "get", "next"])
def test_a_ctrl_c_as_the_fast_path_returns_loses_no_batch(monkeypatch, how):
    with _opened(monkeypatch) as pf:
        out = np.empty((2, 3), np.float32)
        got = [_one(pf, how, out) for _ in range(3)]  # into a run: the fast path serves the next ones
        fired, disarm = _interrupt_at_a_served_return(how)
        try:
            with pytest.raises(KeyboardInterrupt):
                _one(pf, how, out)
        finally:
            disarm()
        assert fired == [True]
        out[...] = -1  # the caller writes its buffer before its next call
        while (b := _one(pf, how, out)) is not None:
            got.append(b)
        assert np.array_equal(np.array(got), _source())


def test_a_mutant_that_does_not_put_the_outcome_back_loses_the_batch(monkeypatch):
    """The check above has teeth: with ``unhand`` doing nothing the interrupted batch is gone."""
    monkeypatch.setattr(Core, "unhand", lambda self: None)
    with _opened(monkeypatch) as pf:
        out = np.empty((2, 3), np.float32)
        got = [_one(pf, "copy", out) for _ in range(3)]
        fired, disarm = _interrupt_at_a_served_return("copy")
        try:
            with pytest.raises(KeyboardInterrupt):
                pf.copy_prefetched(out)
        finally:
            disarm()
        assert fired == [True]
        pf._core.handing.clear()  # (left behind by the mutant: the next call would put it back itself)
        while (b := _one(pf, "copy", out)) is not None:
            got.append(b)
        firsts = [float(b[0, 0]) for b in got]
        assert len(firsts) == ITEMS - 1 and set(firsts) < {float(6 * i) for i in range(ITEMS)}  # one lost


def test_two_consumer_threads_get_every_batch_once(monkeypatch):
    before = _served()
    with _opened(monkeypatch) as pf:
        seen: list[list[float]] = [[], []]

        def consume(mine: list[float]) -> None:
            out = np.empty((2, 3), np.float32)
            while pf.copy_prefetched(out):
                mine.append(float(out[0, 0]))

        threads = [threading.Thread(target=consume, args=(seen[i],)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(seen[0] + seen[1]) == [float(6 * i) for i in range(ITEMS)]
    assert _served() > before


@pytest.mark.parametrize("make", [
    lambda: np.empty((3, 2), np.float32).T,                     # Fortran order: the C copy's other branch
    lambda: np.empty((2, 3), np.float64),                       # another dtype
    lambda: np.empty((3, 2), np.float32),                       # another shape
    lambda: np.broadcast_to(np.empty(3, np.float32), (2, 3)),   # read-only
    lambda: np.empty((2, 6), np.float32)[:, ::2],               # strided
], ids=["fortran", "dtype", "shape", "read-only", "strided"])
def test_an_out_the_fast_path_does_not_take_gets_the_python_paths_answer(monkeypatch, make):
    answers = []
    for fast in (True, False):
        with _opened(monkeypatch, fast) as pf:
            [pf.copy_prefetched(np.empty((2, 3), np.float32)) for _ in range(3)]
            out = make()
            try:
                answers.append(("ok", pf.copy_prefetched(out), np.array(out)))
            except (TypeError, ValueError) as e:
                answers.append((type(e), str(e)))
    assert str(answers[0]) == str(answers[1])


def test_the_array_fields_are_checked_against_numpy():
    module = cconsumer.load()
    assert cconsumer._fields_match(module)

    class Wrong:
        @staticmethod
        def F_fields(a):
            return a.shape, a.dtype, 0x400, 0  # no contiguity flags, no data address

    assert not cconsumer._fields_match(Wrong)


def _drained_under_injection(monkeypatch, how: str, capacity: int, k: int) -> tuple[list, list[int]]:
    """Drain a prefetcher with a KeyboardInterrupt raised at the fast path's k-th call back into Python on this
    thread (``F_inject``: the take's kernel step, the release's), the caller catching it and calling again.
    Returns the batches delivered and the calls per site."""
    module = cconsumer.load()
    with _opened(monkeypatch, capacity=capacity) as pf:
        out = np.empty((2, 3), np.float32)
        got: list = []
        module.F_inject(k, threading.get_ident(), KeyboardInterrupt)
        try:
            for _ in range(10 * ITEMS):
                try:
                    b = _one(pf, how, out)
                except KeyboardInterrupt:
                    continue
                if b is None:
                    break
                got.append(b)
            sites = module.F_sites()
        finally:
            module.F_inject(-1, 0, None)
        core = pf._core
        assert not core.gate._is_owned() and not core.handing
    return got, sites


@pytest.mark.parametrize("how", ["copy", "get"])
@pytest.mark.parametrize("capacity", [2, 8])
def test_a_ctrl_c_at_every_call_back_into_python_loses_no_batch(monkeypatch, how, capacity):
    """The C analogue of injecting at every line: each of the fast path's calls back into Python (the take's
    and the release's kernel step) raises in turn; every batch still arrives once, in order."""
    _got, sites = _drained_under_injection(monkeypatch, how, capacity, -1)
    total = sum(sites)
    assert sites[0] > 0 and sites[1] > 0  # the take and the release both ran in C
    for k in range(total):
        got, _ = _drained_under_injection(monkeypatch, how, capacity, k)
        assert len(got) == ITEMS and np.array_equal(np.array(got), _source()), k


def test_the_sweep_catches_an_outcome_not_put_back(monkeypatch):
    """The sweep has teeth: with ``unhand`` doing nothing, a Ctrl-C at the release (after the batch was
    recorded for the hand-out) loses that batch."""
    monkeypatch.setattr(Core, "unhand", lambda self: None)
    _got, sites = _drained_under_injection(monkeypatch, "copy", 8, -1)
    lost = []
    for k in range(sum(sites)):
        monkeypatch.setattr(Core, "unhand", lambda self: self.handing.clear())
        got, _ = _drained_under_injection(monkeypatch, "copy", 8, k)
        lost.append(len(got) < ITEMS)
    assert any(lost)


@pytest.mark.parametrize("timeout", [-1, float("nan"), True, "1", float("inf"), 10**12, 2.5e9])
def test_a_timeout_the_fast_path_does_not_take_gets_the_python_paths_answer(monkeypatch, timeout):
    answers = []
    for fast in (True, False):
        with _opened(monkeypatch, fast) as pf:
            try:
                answers.append(("ok", pf.get(timeout=timeout)))
            except (TypeError, ValueError) as e:
                answers.append((type(e), str(e)))
    assert str(answers[0]) == str(answers[1])


class _Held:
    """A map-style source whose item ``held`` waits for ``release`` (an Event): the consumer's take times out."""

    def __init__(self, held: int) -> None:
        self.held, self.release = held, threading.Event()

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> np.ndarray:
        if i == self.held:
            self.release.wait(60)
        return np.full((2, 3), i, np.float32)


@pytest.mark.parametrize("fast", [True, False])
def test_a_take_that_times_out_raises_prefetch_timeout_and_loses_nothing(fast):
    from safeprefetch import PrefetchTimeout
    source = _Held(held=3)
    with Prefetcher(source, capacity=4, runtime="typed", ordered=True) as pf:
        if not fast:
            pf._core.serve_fast = None
        got = [pf.get(timeout=30) for _ in range(3)]
        module = cconsumer.load()
        module.F_inject(-1, threading.get_ident(), None)  # count this thread's calls back into Python, raise none
        try:
            with pytest.raises(PrefetchTimeout, match="no batch within the timeout"):
                pf.get(timeout=0.05)
            takes_in_c = module.F_sites()[0]
        finally:
            module.F_inject(-1, 0, None)
        assert takes_in_c == (1 if fast else 0)  # with the fast path, the take that timed out was its own
        source.release.set()
        got += list(pf)
    assert [int(b[0, 0]) for b in got] == list(range(12))


def test_the_fast_path_leaves_nothing_allocated_per_batch():
    """The steady path through the C consumer and the C fetch action (a ``fetch_into`` source) leaves nothing
    behind per batch: ten times the batches must not leave ten times as much (tracemalloc), as on the
    generated runtime (``test_generated_runtime.py``)."""
    from test_generated_runtime import _net_traced

    shape = (1024,)
    out = np.empty(shape, np.float32)

    class Into:
        def __len__(self) -> int:
            return 10 ** 6

        def __getitem__(self, i: int) -> np.ndarray:
            raise AssertionError("fetch_into is used")

        def fetch_into(self, i: int, a: np.ndarray) -> None:
            a.fill(i)

    before = _served()
    with Prefetcher(Into(), capacity=4, shape=shape, dtype=np.float32, runtime="typed") as pf:
        assert pf._core.serve_fast is not None and pf._core.rt.actions["fetch"].__name__ == "fetch"
        copy = pf.copy_prefetched

        def run(n: int):
            return lambda: [copy(out) for _ in range(n)] and None

        b_small, k_small = _net_traced(run(300))
        b_big, k_big = _net_traced(run(3000))
    assert _served() - before > 3000  # the fast path served them
    assert k_big <= max(20, 2 * k_small), (k_small, k_big)
    assert b_big < 16384, (b_small, b_big)
