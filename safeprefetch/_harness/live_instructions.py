"""``bench live --profile``'s instruction table: what one item costs, in instructions, free of noise.

Every other live figure is a time, and on this project's shared two-vCPU
machines a time moves by up to 2x between runs (docs/performance.md): a
change that removes 5% of the hot path cannot be seen in it. An
instruction count can. ``valgrind --tool=callgrind`` counts the
instructions the process executes, whatever else the machine is doing,
and gives the same total for the same binary and inputs (seen on this
machine class with the other core loaded).

Method: each measurement runs in a child process under callgrind with
collection off (``--collect-atstart=no``) except inside CPython's C
function ``functools_reduce`` (``--toggle-collect``): the child sets
everything up, then runs its loop as ``functools.reduce(step, range(K))``.
So the count is the loop's alone, set-up and interpreter start excluded;
the same reduce over an empty step, measured the same way, is subtracted.
One thread only: callgrind serializes threads with its own lock, so a
two-thread count would measure valgrind's scheduling, not the GIL's. The
measurements:

* the queues' one-thread cost (``queue.Queue`` put + get, the SimpleQueue
  floor), the slot-pool floor (the contract over two C queues: a free slot
  taken, a no-op ``fetch_into`` called on it, its number put and got, the
  batch copied out, the slot given back) and what every ``copy_prefetched`` call includes by contract: one
  ``np.copyto`` of the batch (``float32[4]``, the handoff figure's item);
  and two yardsticks: a call of an empty Python function, and a ``with``
  block on an ``RLock``;
* the protocol: the one-thread loop of ``protocol_cpu`` (depth 8; a
  worker's fetch chained with its next claim, the consumer's take and
  release) through the kernel on the generated transitions, one batch per
  take and in runs of 7, and the plain runtime in runs of 7;
* the worker's fetch action alone (``FetchSide._fetch`` on a ``fetch_into``
  source: the glue around the source call);
* the consumer's call: ``copy_prefetched`` with every batch already
  buffered and the worker done (no other thread runs), in runs of 8
  (capacity 8) and one batch per take (capacity 2), its share of the take
  and release steps included.

A figure is instructions per item and its ratio to ``queue.Queue``'s put +
get measured in the same run. Without valgrind, or where CPython's
``functools_reduce`` symbol is not visible to it (a stripped build: the
count comes back 0), the table says so instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any

__all__ = ["CEILING", "MEASUREMENTS", "format_instructions", "instructions_report", "measure"]

#: name -> (what it is, items per reduce step). Items per step: a step is one round of a run.
MEASUREMENTS: dict[str, tuple[str, int]] = {
    "queue.Queue put + get": ("queue.Queue(8) put + get, one thread", 1),
    "SimpleQueue floor": ("SimpleQueue floor: a credit taken, an item put and got, the credit given back", 1),
    "slot-pool floor": ("slot-pool floor: a free slot taken, filled by fetch_into, put and got, copied out, given "
                        "back: the contract, no model", 1),
    "np.copyto": ("np.copyto of one float32[4] batch (every copy_prefetched makes one)", 1),
    "python call": ("a call of an empty Python function (yardstick)", 1),
    "with RLock": ("a with block on a threading.RLock (yardstick)", 1),
    "protocol, runs of 7": ("ours: the protocol loop, depth 8, consumer runs of 7 (kernel + generated transitions)", 7),
    "protocol, one per take": ("ours: the protocol loop, depth 8, one batch per take", 1),
    "protocol, plain, runs of 7": ("ours: the protocol loop on the plain runtime, runs of 7", 7),
    "protocol, typed, runs of 7": ("ours: the protocol loop, runtime='typed' (typed transitions, the kernel's "
                                   "step in C), runs of 7", 7),
    "protocol, typed, one per take": ("ours: the protocol loop, runtime='typed', one batch per take", 1),
    "protocol, typed, Python kernel, runs of 7": ("ours: the typed transitions under the Python kernel (no C step), "
                                                  "runs of 7", 7),
    "fetch action": ("ours: the worker's fetch action alone (FetchSide._fetch, fetch_into source)", 1),
    "copy_prefetched, runs of 8": ("ours: copy_prefetched, all buffered, runs of 8 (its take/release share in)", 8),
    "copy_prefetched, one per take": ("ours: copy_prefetched, all buffered, one batch per take (capacity 2)", 2),
    "copy_prefetched, typed, runs of 8": ("ours: copy_prefetched as above, runs of 8, runtime='typed'", 8),
    "copy_prefetched, typed, one per take": ("ours: copy_prefetched as above, one per take, runtime='typed'", 2),
    "K1 transitions alone": ("ceiling K1: the protocol loop's generated transitions, runs of 7, no kernel", 7),
    "K2 transitions, Cython": ("ceiling K2: K1's transitions compiled by Cython with the model's helpers", 7),
    "K4 in place": ("ceiling K4: the transitions rewritten to update a mutable layout in place", 7),
    "K5 in place, Cython": ("ceiling K5: K4 compiled by Cython", 7),
    "K6 K5 + a Lock per step": ("ceiling K6: K5 with each step inside `with threading.Lock()`, nothing else", 7),
}
#: The ceiling measurements (``live_ceiling``): each is checked in its child to reach K1's state.
CEILING = tuple(k for k in MEASUREMENTS if k[0] == "K" and k[1].isdigit())

#: The child: sets up measurement ``argv[1]``, then runs ``argv[2]`` reduce steps of it.
_CHILD = r'''
import functools, gc, sys, threading, queue
import numpy as np
name, k = sys.argv[1], int(sys.argv[2])
gc.disable()

def in_reduce(step, count):
    functools.reduce(lambda acc, _i: step(), range(count), None)

if name == "empty":
    step = lambda: None
elif name == "queue.Queue put + get":
    q = queue.Queue(8)
    def step():
        q.put(1); q.get()
elif name == "SimpleQueue floor":
    fw, back = queue.SimpleQueue(), queue.SimpleQueue()
    back.put(None)
    def step():
        back.get(); fw.put(1); fw.get(); back.put(None)
elif name == "slot-pool floor":
    free, filled = queue.SimpleQueue(), queue.SimpleQueue()
    free.put(0)
    slots, out = [np.zeros(4, np.float32)], np.empty(4, np.float32)
    def fetch_into(i, slot):
        pass
    def step():
        s = free.get(); fetch_into(0, slots[s]); filled.put(s)
        s = filled.get(); np.copyto(out, slots[s], casting="no"); free.put(s)
elif name == "np.copyto":
    a, out = np.zeros(4, np.float32), np.empty(4, np.float32)
    step = lambda: np.copyto(out, a, casting="no")
elif name == "python call":
    def f():
        pass
    step = lambda: f()  # one call more than the empty step
elif name == "with RLock":
    lock = threading.RLock()
    def step():
        with lock:
            pass
elif name.startswith("protocol"):
    import functools as ft
    from safeprefetch._prefetcher.machine import machine_for, transitions_for
    from safeprefetch._runtime.interrupts import protected
    from safeprefetch._runtime.kernel import Runtime
    run = 7 if "runs of 7" in name else 1
    m = machine_for(8, 1, k * run + 2, True, True, 0, 8)
    compiled = None if "plain" in name else transitions_for(8, 1, True, True, 0, 8)
    if "typed" in name:
        from safeprefetch._prefetcher.machine import typed_for
        from safeprefetch._runtime.typed import CompileUnavailable
        try:
            typed = typed_for(8, 1, True, True, 0, 8)
        except CompileUnavailable as e:
            raise SystemExit(f"skipped: {e}")
        compiled, kernel = typed.compiled, None if "Python kernel" in name else typed.kernel
    else:
        kernel = None
    # Marked protected, as the Prefetcher's own fetch is: called directly, as the Prefetcher's is.
    rt = Runtime(m, {"fetch": protected(lambda ctx: "ok")}, compiled=compiled, kernel=kernel)
    assert (rt._fast is not None) == (kernel is not None)
    w, c = m.thread_names.index("worker0"), m.thread_names.index("consumer")
    take = f"take up to {run}"
    rt.step(w)
    def step():
        for _ in range(run):
            rt.step(w, chain=True)
        rt.step(c, take)
        rt.step(c)
    for _ in range(2):
        step()  # warm
    k -= 2
elif name == "fetch action":
    from safeprefetch import Prefetcher
    from safeprefetch._harness.live_common import Trivial
    from safeprefetch._runtime.entries import ActionContext
    src = Trivial(2)
    pf = Prefetcher(src, capacity=2, shape=src.item.shape, dtype=src.item.dtype)
    core = pf._core
    w = core.worker_ids[0]
    state = list(core.rt.state)
    _w, i_idx, i_slot = core.worker_fields[w]
    state[i_idx], state[i_slot] = 0, 0
    ctx = ActionContext(core.rt, w, tuple(state), "fetch into slot")
    step = lambda: core._fetch(ctx)
elif name.startswith("copy_prefetched"):
    from safeprefetch import Prefetcher
    from safeprefetch._harness.live_common import Trivial
    from safeprefetch._prefetcher import policy
    cap = 8 if "runs" in name else 2
    policy.RUN_BUDGET = 1.0 if "runs" in name else 0.0
    pfs = []
    runtime = "typed" if "typed" in name else "generated"
    if runtime == "typed":
        from safeprefetch._prefetcher.machine import typed_for
        from safeprefetch._runtime.typed import CompileUnavailable
        try:
            typed_for(cap, 1, True, True, 0, cap)
        except CompileUnavailable as e:
            raise SystemExit(f"skipped: {e}")
    for _ in range(k + 1):
        src = Trivial(cap)
        pfs.append(Prefetcher(src, capacity=cap, shape=src.item.shape, dtype=src.item.dtype, runtime=runtime))
    for pf in pfs:
        for th in pf._core.threads:
            th.join()  # every batch buffered, the worker done: no other thread runs while measured
    out = np.empty_like(src.item)
    it = iter(pfs)
    def step():
        copy = next(it).copy_prefetched
        for _ in range(cap):
            copy(out)
    step()  # warm
elif name[0] == "K":
    from safeprefetch._harness import live_ceiling as LC
    from safeprefetch._harness.live_layout import mutable_transitions
    from safeprefetch._prefetcher.machine import transitions_for
    cm = transitions_for(8, 1, True, True, 0, 8)
    kind, items = name.split()[0], (k + 1) * 7
    gen = {(t, pc): g for t, table in enumerate(cm.steps) for pc, g in table.items()}
    plain = ({key: g.first for key, g in gen.items()}, {key: g.ones for key, g in gen.items()})
    layout, to_tuple = None, tuple
    if kind == "K1":
        firsts, ones = plain
    elif kind == "K2":
        built = LC._compiled_transitions(cm)
        if isinstance(built, str):
            raise SystemExit(built)
        firsts, ones = built
    else:
        mt = mutable_transitions(cm) if kind == "K4" else LC.in_place_compiled(cm)
        if isinstance(mt, str):
            raise SystemExit(mt)
        firsts, ones, layout, to_tuple = mt.firsts, mt.ones, mt.to_list, mt.to_tuple
    st, one_round = LC.direct_round(items, firsts, ones, threading.Lock() if kind == "K6" else None, layout)
    box = [st]
    def step():
        box[0] = one_round(box[0])
    for _ in range(2):
        step()  # warm
    k -= 2
else:
    raise SystemExit(f"unknown measurement {name!r}")
in_reduce(step, k)
if name[0] == "K":  # a count of code that computes something else would be no measurement
    ref, ref_round = LC.direct_round(items, *plain)
    for _ in range(k + 2):
        ref = ref_round(ref)
    if to_tuple(box[0]) != ref:
        raise SystemExit(f"{name}: reached another state than the generated transitions")
print("ok")
'''


class Skipped(RuntimeError):
    """A ceiling measurement that cannot be taken here (no Cython or no C compiler); the message says why."""


def _valgrind() -> str | None:
    return shutil.which("valgrind")


def measure(name: str, steps: int) -> int:
    """Instructions callgrind counts inside ``functools.reduce`` over ``steps`` steps of measurement ``name``
    (``"empty"``: the reduce alone). Raises RuntimeError when the child fails."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
    if name in CEILING and name not in ("K1 transitions alone", "K4 in place") or "typed" in name:
        # Build the Cython extension outside valgrind first (the child then loads it from the cache).
        p = subprocess.run([sys.executable, "-c", _CHILD, name, "4"], env=env, capture_output=True, text=True,
                           timeout=1800)
        if p.returncode != 0 and "skipped: " in p.stderr:
            raise Skipped(p.stderr[p.stderr.index("skipped: "):].strip())
        if p.returncode != 0:
            raise RuntimeError(f"{name!r} could not be prepared: {(p.stderr or p.stdout)[-400:].strip()}")
    cmd = [_valgrind() or "valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce",
           "--callgrind-out-file=/dev/null", sys.executable, "-c", _CHILD, name, str(steps)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    m = re.search(r"Collected : (\d+)", p.stderr)
    if p.returncode != 0 or "ok" not in p.stdout or m is None:
        raise RuntimeError(f"callgrind run of {name!r} failed (exit {p.returncode}): {p.stderr[-400:].strip()}")
    return int(m.group(1))


def instructions_report(quick: bool = False, names: list[str] | None = None) -> dict[str, Any]:
    """Instructions per item of each measurement, and each one's ratio to queue.Queue's put + get."""
    if _valgrind() is None:
        return {"skipped": "valgrind is not installed (apt-get install valgrind)"}
    names = list(MEASUREMENTS) if names is None else names
    if "queue.Queue put + get" not in names:
        names = ["queue.Queue put + get", *names]
    steps = 300 if quick else 3000
    empty = measure("empty", steps)
    if empty == 0:
        return {"skipped": "callgrind found no functools_reduce symbol in this Python (a stripped build)"}
    per_item: dict[str, float] = {}
    skipped: dict[str, str] = {}
    for name in names:
        what, items = MEASUREMENTS[name]
        n = steps - 2 if name.startswith("protocol") or name in CEILING else steps
        try:
            per_item[name] = round((measure(name, steps) - empty * n / steps) / (n * items), 1)
        except Skipped as e:
            skipped[name] = str(e)
    base = per_item["queue.Queue put + get"]
    return {"steps": steps, "reduce_overhead_per_step": round(empty / steps, 1), "instructions_per_item": per_item,
            "ratio_to_queue": {k: round(v / base, 2) for k, v in per_item.items()},
            "what": {k: MEASUREMENTS[k][0] for k in per_item}, "skipped_rows": skipped}


def format_instructions(r: dict[str, Any]) -> str:
    if "skipped" in r:
        return f"instructions per item (callgrind): skipped: {r['skipped']}"
    lines = [f"instructions per item (callgrind, one thread, {r['steps']} steps each; ratio to queue.Queue put + get)"]
    for k, v in r["instructions_per_item"].items():
        lines.append(f"  {v:>10,.0f}  {r['ratio_to_queue'][k]:>6.2f}x  {r['what'][k]}")
    for k, why in r.get("skipped_rows", {}).items():
        lines.append(f"  {'-':>10}  {'':>7}  {MEASUREMENTS[k][0]}: {why}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - a convenience: python -m safeprefetch._harness.live_instructions
    print(json.dumps(instructions_report(quick="--quick" in sys.argv), indent=2))
