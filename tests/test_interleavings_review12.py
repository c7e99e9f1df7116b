"""The real-code checker's twelfth-round review (docs/hardening.md, "A twelfth round").

Each test failed on the code before its fix.
"""

import threading

import pytest

from safeprefetch import interleavings

pytestmark = pytest.mark.timeout(120)


async def async_body():
    assert False, "never reached"


def generator_body():
    assert False, "never reached"
    yield


async def async_generator_body():
    assert False, "never reached"
    yield


@pytest.mark.parametrize("body", [async_body, generator_body, async_generator_body])
def test_1_a_body_whose_call_runs_nothing_is_refused_not_ok(body):
    # Before: "ok, exhaustive": one run in which nothing ran.
    with pytest.raises(TypeError, match=f"'{body.__name__}' is an? .*its body would never run"):
        interleavings.check(body)


def test_1_the_decorator_refuses_an_async_test_when_it_decorates():
    # Before: the decorated test passed, whatever its body asserted.
    with pytest.raises(TypeError, match="is an async def"):
        @interleavings.test()
        async def test_async():
            assert False


def test_2_the_indexed_race_lookup_is_the_scan_at_every_call(monkeypatch):
    """DPOR's race lookup goes through per-thread, per-key event lists (a livelock's run to max_steps was
    quadratic: minutes); at every call over the catalog's bugs and references, plain and with
    ``lines=True``, it gives the plain scan's answer."""
    from safeprefetch._harness.code_twins import REFERENCES, TWINS
    from safeprefetch._interleave import explore

    indexed, calls = explore.DFS._last_race, []

    def both(self, ex, p, op, psig, k):
        got = indexed(self, ex, p, op, psig, k)
        want = explore.last_race_scan(self, ex, p, op, psig, k)
        calls.append(got == want)
        assert got == want, (p, k)
        return got

    monkeypatch.setattr(explore.DFS, "_last_race", both)
    for t in [*TWINS.values(), *REFERENCES.values()]:
        options = dict(t.options)
        options.pop("strategy", None)
        interleavings.check(t.at(), **options)
    interleavings.check(TWINS["racy_counter"].at(), lines=True, reduce="dpor")
    assert len(calls) > 1000 and all(calls)


class _CountedEvents(list):
    """An execution's event list that counts how often an event is looked up by index."""

    looked = 0

    def __getitem__(self, i):
        _CountedEvents.looked += 1
        return super().__getitem__(i)


def test_2_a_livelock_reaches_its_hang_verdict_in_a_linear_run(monkeypatch):
    # Before: every step scanned every earlier event (229 s to reach max_steps=20,000 without minimizing).
    # Counted, not timed: events looked up on the way to 500 and to 2,000 steps go about 1:4, not 1:16.
    from safeprefetch._interleave import scheduler

    made = scheduler.Execution.__init__

    def init(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.events = _CountedEvents()

    monkeypatch.setattr(scheduler.Execution, "__init__", init)

    def livelock():
        lock = threading.Lock()

        def spin():
            while True:
                with lock:
                    pass

        t = threading.Thread(target=spin)
        t.start()
        t.join()

    looked = {}
    for steps in (500, 2_000):
        _CountedEvents.looked = 0
        r = interleavings.check(livelock, max_steps=steps, minimize=False)
        looked[steps] = _CountedEvents.looked
        assert r.verdict == "hang"
    assert looked[2_000] < 6 * looked[500], looked
