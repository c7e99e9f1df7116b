"""The fourth adversarial review (2026-12-02, third session): the findings fixed, one test each.

Each failed on the code before its fix.

1. ``OnDemandPrefetcher.copy_into`` interrupted by Ctrl-C after its copy kept the batch only in the
   caller's ``out`` (by reference): a caller that wrote ``out`` before asking again got its own data
   back as the batch. The streaming Prefetcher had this fixed (``consumer._owned``); the on-demand
   one keeps a private copy now too.
2. ``OnDemandPrefetcher`` refused a 1-d ndarray source (numpy scalars) that the streaming one takes
   as 0-d batches, and that its own workers serve once shape and dtype are given.
3. A Ctrl-C between ``register(core)`` and ``core.start()`` in either constructor left a registered
   core with no workers: closes waited for them, and the reaper blocked on it for good.
"""

import inspect
import signal
import sys

import numpy as np
import pytest

from safeprefetch import OnDemandPrefetcher
from safeprefetch._prefetcher.ondemand_serve import ServeSide

pytestmark = pytest.mark.timeout(60)


class Tiles:
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return np.full(4, i, np.int64)


def _release_line():
    """The line of ``ServeSide._produce`` that releases the slot, right after the copy into ``out``."""
    lines, first = inspect.getsourcelines(ServeSide._produce)
    hits = [first + i for i, text in enumerate(lines) if "self.rt.step(self.consumer)" in text]
    assert len(hits) == 1, lines
    return hits[0]


@pytest.mark.parametrize("retry", ["copy_into", "get"])
def test_1_copy_into_interrupted_after_its_copy_hands_out_the_batch_not_the_callers_buffer(retry):
    code, line = ServeSide._produce.__code__, _release_line()
    fired = []

    def tracer(frame, event, arg):
        if frame.f_code is not code:
            return None

        def local(frame, event, arg):
            if event == "line" and frame.f_lineno == line and not fired:
                fired.append(1)
                signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)  # Ctrl-C lands here, as CPython runs it
            return local
        return local

    with OnDemandPrefetcher(Tiles(), capacity=4, workers=1, predict=None) as pf:
        handler = signal.getsignal(signal.SIGINT)
        assert callable(handler)
        out = np.zeros(4, np.int64)
        sys.settrace(tracer)
        try:
            with pytest.raises(KeyboardInterrupt):
                pf.copy_into(7, out)
        finally:
            sys.settrace(None)
        assert fired
        out[:] = -1  # the caller reuses its buffer before it asks again
        if retry == "copy_into":
            pf.copy_into(7, out)
            got = out
        else:
            got = pf.get(7)
        assert got.tolist() == [7, 7, 7, 7]


def test_2_a_1d_array_source_is_served_as_0d_batches_on_demand_too():
    src = np.arange(10.0)
    with OnDemandPrefetcher(src, workers=1) as pf:
        assert pf.get(3).shape == ()
        assert float(pf.get(3)) == 3.0 and float(pf.get(8)) == 8.0


_CTRL_C_IN_CONSTRUCTOR = r'''
import dis, gc, json, signal, sys
import numpy as np
import safeprefetch
from safeprefetch._runtime import interrupts
from safeprefetch._prefetcher.lifecycle import open_cores, want_sigint
if not callable(signal.getsignal(signal.SIGINT)):
    signal.signal(signal.SIGINT, signal.default_int_handler)
cls = getattr(safeprefetch, sys.argv[1])
case = sys.argv[2]
init = cls.__init__.__code__
store_at = [i.offset for i in dis.get_instructions(init) if i.opname == "STORE_ATTR" and i.argval == "_finalizer"][0]
fired = []

def ctrl_c(frame):
    fired.append(1)
    signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)  # what a real Ctrl-C does at this point

def tracer(frame, event, arg):
    if fired:
        return None
    if case == "install" and event == "call" and frame.f_code is interrupts.install.__code__ \
            and frame.f_back.f_code is want_sigint.__code__ and frame.f_back.f_back.f_code is init:
        ctrl_c(frame)
    if case == "finalizer" and frame.f_code is init:
        frame.f_trace_opcodes = True
        def local(frame, event, arg):
            if event == "opcode" and frame.f_lasti == store_at and not fired:
                ctrl_c(frame)
            return local
        frame.f_trace = local
        if sys.version_info[:2] == (3, 12):
            sys.settrace(sys.gettrace())  # 3.12 starts opcode events only then (see _runtime/inject.py)
        return local
    return None

sys.settrace(tracer)
try:
    cls(np.zeros((8, 4)), capacity=2, close_timeout=float("inf"))
    got = "constructed"
except KeyboardInterrupt:
    got = "KeyboardInterrupt"
finally:
    sys.settrace(None)
still_open = sum(not c.closed for c in open_cores())
later = cls(np.zeros((8, 4)), capacity=2)  # abandoned at once: the reaper must close it
core = later._core
del later
gc.collect()
import time
deadline = time.monotonic() + 10
while not core.closed and time.monotonic() < deadline:  # the reaper marks it closed after the join
    time.sleep(0.001)
for th in list(core.threads):
    th.join(10)
print(json.dumps({"got": got, "fired": bool(fired), "open": still_open, "later_closed": core.closed,
                  "later_threads_alive": sum(th.is_alive() for th in core.threads)}))
'''


@pytest.mark.parametrize("case", ["install", "finalizer"])
@pytest.mark.parametrize("cls", ["Prefetcher", "OnDemandPrefetcher"])
def test_3_ctrl_c_between_register_and_start_leaves_nothing_open_and_the_reaper_working(cls, case):
    """A Ctrl-C after the core was registered and before ``core.start()`` left a registered core with no
    workers: every later close (interpreter exit too) waited for them forever with close_timeout=inf, and
    with the finalizer made, the reaper blocked on it for good, so no later abandoned prefetcher closed."""
    import json
    import subprocess

    p = subprocess.run([sys.executable, "-c", _CTRL_C_IN_CONSTRUCTOR, cls, case], capture_output=True, text=True,
                       timeout=40)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"got": "KeyboardInterrupt", "fired": True, "open": 0, "later_closed": True,
                   "later_threads_alive": 0}
