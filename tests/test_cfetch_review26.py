"""Review of the worker's fetch in C (``_prefetcher/cfetch.py``): findings, each a test that failed before its fix."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from _cython import cython_here

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not cython_here(), reason="needs Cython (speed extra)")]

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_c_action_reads_no_raw_offsets_of_a_context_that_is_not_an_actioncontext():
    # The Python action reads ``ctx.thread`` and ``ctx.state`` by attribute: any object with them will do, and
    # after close it returns "ok". The C action read them at ActionContext's slot offsets from whatever it was
    # given: raw memory (the kernel's own cache of contexts checks the type for that reason). Run apart: it
    # crashed the interpreter.
    code = textwrap.dedent("""
        import types
        import numpy as np
        from safeprefetch import Prefetcher

        class S:
            def __len__(self):
                return 8
            def __getitem__(self, i):
                return np.full(3, i, np.int64)

        pf = Prefetcher(S(), capacity=2, runtime="typed")
        core = pf._core
        action = core.rt.actions["fetch"]
        assert action.__name__ == "fetch", action
        pf.close()
        ctx = types.SimpleNamespace(thread=next(iter(core.worker_fields)), state=core.rt.state)
        print(core._fetch(ctx), action(ctx))
        from safeprefetch._runtime.entries import ActionContext
        empty = ActionContext.__new__(ActionContext)  # its slots unset
        for f in (core._fetch, action):
            try:
                f(empty)
            except AttributeError as e:
                print(type(e).__name__)
    """)
    env = dict(os.environ, PYTHONPATH=_ROOT)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=100)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout.split() == ["ok", "ok", "AttributeError", "AttributeError"]


def test_the_c_action_itself_reads_a_plain_item():
    # test_cfetch.py checks which action is installed, not that it does the work: one that handed every fetch to
    # _fetch passed it. Here a plain item is read with no Python frame of _fetch or _fill between.
    import sys

    import numpy as np

    from safeprefetch import Prefetcher

    callers: list = []

    class S:
        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int) -> np.ndarray:
            f, names = sys._getframe(1), set()
            while f is not None:
                names.add(f.f_code.co_name)
                f = f.f_back
            callers.append((i, bool(names & {"_fetch", "_fill"})))
            return np.full(3, i, np.int64)

    with Prefetcher(S(), capacity=2, runtime="typed") as pf:
        assert [int(b[0]) for b in pf] == list(range(8))
    assert [i for i, python in callers if python] == [] and len(callers) == 8  # (0: the constructor's read)
