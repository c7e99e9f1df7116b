"""Review 24, fresh eyes: what the adversarial review of the C step's slots and reused contexts left.

* The kernel's cache of reusable contexts (``K_Kernel.ctxs``) is a list the garbage collector hands out
  (``gc.get_referents`` of the kernel: ``test_ckernel_review24.py``'s guard reads it that way). The next
  external step filled whatever object it found there at ``ActionContext``'s slot offsets, asking only its
  reference count: an object of another layout put there (a debugger, a test, a memory tool that "cleans"
  lists) had raw memory read as objects and written over, and the interpreter died of SIGSEGV. Only an
  ``ActionContext`` may be refilled. It runs in a child, since before the fix it killed the interpreter.
"""

import os
import subprocess
import sys
import textwrap

import pytest
from _cython import cython_here

import safeprefetch
from safeprefetch._prefetcher.machine import typed_for

pytestmark = pytest.mark.skipif(not cython_here(), reason="the kernel's C step is built with Cython (the speed extra)")

SHAPE = (3, 1, True, True, 0, 3)


def _child(code):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(safeprefetch.__file__)))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False,
                          env=env, timeout=60)


def test_an_object_that_is_not_a_context_in_the_kernel_s_cache_is_never_filled():
    typed_for(*SHAPE)  # built (or loaded) here, so that the child loads it from the cache
    done = _child(f"""
        import gc
        from safeprefetch._prefetcher.machine import machine_for, typed_for
        from safeprefetch._runtime.entries import ActionContext
        from safeprefetch._runtime.kernel import Runtime
        typed = typed_for{SHAPE!r}
        machine = machine_for(3, 1, 3, *{SHAPE[2:]!r})
        seen = []
        rt = Runtime(machine, {{"fetch": lambda ctx: seen.append(type(ctx).__name__)}}, compiled=typed.compiled,
                     kernel=typed.kernel)
        assert rt._fast is not None
        w, c = machine.thread_names.index("worker0"), machine.thread_names.index("consumer")
        rt.step(w)
        rt.step(w)  # the first fetch: its context, not kept, goes to the cache
        caches = [r for r in gc.get_referents(rt._fast.__self__)
                  if type(r) is list and any(type(o) is ActionContext for o in r)]
        assert len(caches) == 1, caches
        caches[0][w] = bytes(64)  # held by the list alone, as a context nobody kept is
        rt.step(c, "take up to 1")
        rt.step(c)
        rt.step(w)
        rt.step(w)  # the next fetch on that thread
        print("SEEN", seen)
    """)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "SEEN ['ActionContext', 'ActionContext']" in done.stdout, done.stdout
