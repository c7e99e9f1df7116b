"""The live hot path's shortcuts are exact: they change how fast the model runs, never what runs.

* The Prefetcher compiles its model once per shape and sets the stream length
  in the initial state; that machine is the one compiled for that length.
* A step wakes only the parked threads whose step reads what it wrote (by the
  steps' footprints), and tests the guard only (``Machine.enabled``).
* ``step(..., chain=True)`` applies a worker's next claim in the same
  critical section, as one more interleaving of the same model.
"""

import threading

import pytest

from safeprefetch._check.explore import Explorer
from safeprefetch.lowlevel import Runtime, run_live
from safeprefetch._prefetcher.machine import compile_reference as _compile
from safeprefetch._prefetcher.machine import machine_for as _machine
from safeprefetch.model import DONE, Model

pytestmark = [pytest.mark.live, pytest.mark.timeout(60)]


@pytest.mark.parametrize("shape", [(2, 2, True, True, 0), (3, 1, False, True, 0), (2, 1, True, False, 0),
                                   (3, 2, True, True, 2)])
def test_a_machine_derived_for_a_length_is_the_one_compiled_for_it(shape):
    capacity, workers, ordered, sized, target = shape
    for items in (0, 1, 3):
        derived = _machine(capacity, workers, items, ordered, sized, target)
        fresh = _compile(capacity, workers, items, ordered, sized, target)
        assert derived.init == fresh.init and derived.config == fresh.config
        a, b = Explorer(derived), Explorer(fresh)
        a.run()
        b.run()
        assert set(a.parents) == set(b.parents)


def _set_a(s, me):
    s.a = True


def _set_b(s, me):
    s.b = True


class TwoFlags(Model):
    """The consumer waits for ``b``; the producer sets ``a`` (which the consumer does not read), then ``b``."""

    name = "two_flags"

    def build(self, m):
        m.shared(a=False, b=False)
        c = m.program("consumer")
        c.step("wait for b", guard=lambda s, me: s.b, next=DONE)
        p = m.program("producer")
        p.step("set a", _set_a, next="set b")
        p.step("set b", _set_b, next=DONE)
        m.thread("consumer", c)
        m.thread("producer", p)


def _park_consumer(rt):
    th = threading.Thread(target=rt.step, args=(0,), daemon=True)
    th.start()
    for _ in range(2000):
        with rt._lock:
            if rt._parked[0]:
                break
        threading.Event().wait(0.001)
    return th


def test_a_step_that_writes_nothing_a_parked_guard_reads_does_not_test_it(monkeypatch):
    machine = TwoFlags.compile()
    assert machine.infos[1]["set a"].footprint[1] == frozenset({machine.shared_index["a"]})
    rt = Runtime(machine)
    calls = []

    th = _park_consumer(rt)
    entry = rt._entries[0]["wait for b"]
    real = entry.enabled
    entry.enabled = lambda state: calls.append(state) or real(state)
    rt.step(1)  # "set a": writes a; the consumer's guard reads b only
    assert calls == [] and th.is_alive()
    rt.step(1)  # "set b": must wake it
    th.join(5)
    assert not th.is_alive() and len(calls) == 1
    assert machine.all_done(rt.state)


def test_footprint_skipping_needs_known_footprints():
    """A guard the specializer cannot read (getattr by a computed name) is always re-tested."""

    class Opaque(TwoFlags):
        def build(self, m):
            m.shared(a=False, b=False)
            c = m.program("consumer")
            name = "b"
            c.step("wait for b", guard=lambda s, me: getattr(s, name), next=DONE)
            p = m.program("producer")
            p.step("set a", _set_a, next="set b")
            p.step("set b", _set_b, next=DONE)
            m.thread("consumer", c)
            m.thread("producer", p)

    machine = Opaque.compile()
    assert machine.infos[0]["wait for b"].footprint is None
    live = run_live(machine, seed=0, timeout=10)
    assert live.verdict == "ok" and live.conforms


def test_chain_applies_the_next_claim_in_the_same_critical_section():
    machine = _machine(2, 1, 3, True, True)
    rt = Runtime(machine, {"fetch": lambda ctx: "ok"}, record=True)
    w = machine.thread_names.index("worker0")
    rt.step(w)  # claim 0
    before = rt.steps
    rt.step(w, chain=True)  # fetch 0, then claim 1 at once (a slot is free)
    assert rt.steps == before + 2
    assert rt.pc(w) == "fetch into slot"
    from safeprefetch.lowlevel import verify_record

    assert verify_record(machine, rt.record).ok


@pytest.mark.parametrize("shape,dtype,order", [((3, 4), "float32", "C"), ((5,), "int64", "C"), ((2, 3), ">f8", "C"),
                                               ((0,), "float32", "C"), ((3, 4), "float64", "F")])
def test_npy_files_read_straight_into_the_slot(tmp_path, shape, dtype, order):
    import numpy as np

    from safeprefetch import NpyFiles

    a = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    a = np.asfortranarray(a) if order == "F" else a
    np.save(tmp_path / "a.npy", a)
    out = np.full(shape, 7, dtype)
    NpyFiles([tmp_path / "a.npy"]).fetch_into(0, out)
    assert out.dtype == a.dtype and (out == a).all()


def test_npy_files_reject_a_wrong_shape_and_a_truncated_file(tmp_path):
    import numpy as np

    from safeprefetch import NpyFiles

    np.save(tmp_path / "a.npy", np.arange(10, dtype=np.float32))
    with pytest.raises(ValueError, match="expected shape"):
        NpyFiles([tmp_path / "a.npy"]).fetch_into(0, np.empty(9, np.float32))
    raw = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "a.npy").write_bytes(raw[:-8])
    with pytest.raises(ValueError, match="ends after"):
        NpyFiles([tmp_path / "a.npy"]).fetch_into(0, np.empty(10, np.float32))
