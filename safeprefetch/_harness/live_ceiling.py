"""``bench live --profile``'s last table: what compiling the live hot path would buy, measured.

The live Prefetcher's per-item CPU is the kernel (lock, interrupt
bookkeeping, dispatch, wake-ups) around the generated transitions (guards,
effects and invariants of ``models/prefetcher.py`` as straight-line Python).
The obvious next step is to compile both. This measures, in one run, on the
one-thread protocol loop of the ``protocol_cpu`` figure (depth 8, consumer
runs of 7, ``live_profile.protocol_loop``), what each would remove:

* ``K0`` the loop through the kernel, as the Prefetcher runs it;
* ``K1`` the same transitions called directly, in the same order, with no
  kernel: ``K0 - K1`` is the kernel's share;
* ``K2`` those transitions compiled by Cython, with the model's helper
  functions compiled into the same module as C functions (the check
  engine's module writer, ``_check/generated.py``): what compiling the
  transitions removes;
* ``K3`` the kernel compiled by Cython as it stands (``_runtime/kernel.py``,
  ``entries.py``, ``driving.py``, untyped), in a copy of the package, in
  child processes alternated with the same child on an uncompiled copy of
  the same tree: what compiling the kernel removes without rewriting it;
* ``K4`` the transitions rewritten to update a mutable fixed layout in
  place (``live_layout.py``: an AST rewrite of the generator's output,
  checked against it state by state in tests), ``K5`` the same compiled by
  Cython: what giving up the immutable state would remove;
* ``queue.Queue`` put + get and the ``SimpleQueue`` floor, one thread.

K2 and K3 need Cython and a C compiler (the ``speed`` extra) and say so
otherwise; K3 builds three extensions (about 15 s) and is left out of
``--quick``. Nothing here is used by the Prefetcher: it is a measurement.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Any, Callable

from .live_common import median, one_thread_queue_loops
from .live_profile import protocol_loop, timed_loop

__all__ = ["ceiling_report", "direct_round", "direct_start", "format_ceiling", "in_place_compiled"]

_DEPTH, _RUN = 8, 7

#: The child of K3: the protocol loop on whatever kernel its PYTHONPATH holds, as JSON (one timed loop
#: after a warm-up; the parent alternates the two flavours' children and takes medians).
_CHILD = """
import functools, json, sys
import safeprefetch._runtime.kernel as k
from safeprefetch._prefetcher.machine import transitions_for
from safeprefetch._harness.live_profile import protocol_loop, timed_loop
items, depth, run = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
loop = protocol_loop(functools.partial(k.Runtime, compiled=transitions_for(depth, 1, True, True, 0, depth)), items,
                     depth, run)
loop()
print(json.dumps({"file": k.__file__, "us": timed_loop(loop) / (items // run * run) * 1e6}))
"""


def _threads(items: int) -> tuple[Any, int, int, int, int]:
    from .._prefetcher.machine import machine_for

    m = machine_for(_DEPTH, 1, items + 1, True, True, 0, _DEPTH)
    w, c = m.thread_names.index("worker0"), m.thread_names.index("consumer")
    return m, w, c, m.pc_index[w], m.pc_index[c]


def direct_start(items: int, firsts: dict, layout: Callable[[tuple], Any] | None = None) -> Callable[[], Any]:
    """``start() -> state``: a fresh initial state (in the transitions' ``layout``), after the worker's first
    claim. The timed loops call it inside the loop, as the loop before ``direct_round`` did: the in-place
    transitions update their list, so every loop needs its own."""
    m, w, _c, pw, _pc = _threads(items)
    init, first = m.init, firsts

    def start() -> Any:
        st = init if layout is None else layout(init)
        return first[w, st[pw]](st)[1]
    return start


def direct_round(items: int, firsts: dict, ones: dict, lock: Any = None,
                 layout: Callable[[tuple], Any] | None = None) -> tuple[Any, Callable[..., Any]]:
    """K1/K2 (K4/K5 with in-place ``firsts``/``ones``): the protocol loop's transitions for a source of
    ``items``, called directly in the order the kernel takes them. Returns the state after the worker's
    first claim and ``rounds(state, n=1) -> state``: ``n`` rounds of the loop (seven fetches, each chained with
    the next claim, a take of seven, a release), in one call: a call per round would be counted with the
    transitions. With ``lock`` (K6), every step runs inside ``with lock``: the least a runtime must add, one
    lock round trip per step. ``layout`` turns the initial state into the transitions' own (the in-place
    ones' list)."""
    _m, w, c, pw, pc = _threads(items)
    run = _RUN
    if lock is None:
        def rounds(st: Any, n: int = 1) -> Any:
            for _ in range(n):
                for _ in range(run):
                    st = ones[w, st[pw]][0](st)          # fetch into slot, outcome "ok"
                    st = firsts[w, st[pw]](st)[1]        # claim index and slot
                st = ones[c, st[pc]][run - 1](st)        # take up to 7
                st = firsts[c, st[pc]](st)[1]            # release lease
            return st
    else:
        def rounds(st: Any, n: int = 1) -> Any:
            for _ in range(n):
                for _ in range(run):
                    with lock:
                        st = ones[w, st[pw]][0](st)
                    with lock:
                        st = firsts[w, st[pw]](st)[1]
                with lock:
                    st = ones[c, st[pc]][run - 1](st)
                with lock:
                    st = firsts[c, st[pc]](st)[1]
            return st
    return direct_start(items, firsts, layout)(), rounds


def _direct_loop(cm: Any, items: int, firsts: dict, ones: dict) -> Callable[[], tuple]:
    """K1/K2: ``direct_round`` over the whole source, from the first claim (timed with it); the last state."""
    start, (_, rounds), n = direct_start(items, firsts), direct_round(items, firsts, ones), items // _RUN

    def loop() -> tuple:
        return rounds(start(), n)
    return loop


def _compiled_transitions(cm: Any) -> tuple[dict, dict] | str:
    """The generated transitions built by Cython with the model's helpers (or why they cannot be)."""
    from .._check import extension as E, generated as G

    if not G.cython_available():
        return "skipped: Cython is not installed (pip install -e '.[speed]')"
    writer = G._Writer(cm.machine, cm, None, True)
    src = writer.module(python_callable=True)
    try:
        built = E.build(src, "live transitions")
    except G.CompileUnavailable as e:
        return f"skipped: {e}"
    assert built is not None
    mod = built[0]
    for name, value in writer.namespace.items():
        setattr(mod, name, value)
    steps = {(t, pc): g for t, table in enumerate(cm.steps) for pc, g in table.items()}
    return ({k: getattr(mod, g.first.__name__) for k, g in steps.items()},
            {k: tuple(getattr(mod, f.__name__) for f in g.ones) for k, g in steps.items()})


def _direct_loop_in_place(mt: Any, items: int) -> Callable[[], tuple]:
    """K4/K5: the protocol loop of ``_direct_loop`` over the in-place transitions; the last state as a tuple."""
    start = direct_start(items, mt.firsts, mt.to_list)  # a fresh list each loop
    _, rounds = direct_round(items, mt.firsts, mt.ones, layout=mt.to_list)
    n, to_tuple = items // _RUN, mt.to_tuple

    def loop() -> tuple:
        return to_tuple(rounds(start(), n))
    return loop


def in_place_compiled(cm: Any) -> Any:
    """K5's transitions: the in-place rewrite built by Cython (a ``MutableTransitions``), else why not (a str)."""
    from .._check import extension as E, generated as G
    from .live_layout import mutable_transitions

    if not G.cython_available():
        return "skipped: Cython is not installed (pip install -e '.[speed]')"

    def build(source: str, base: dict) -> Any:
        defined = {line.split("(", 1)[0][4:] for line in source.splitlines() if line.startswith("def ")}
        free = [k for k in base if k.isidentifier() and not k.startswith("__") and k not in defined]
        built = E.build("".join(f"{k} = None\n" for k in free) + source, "live transitions in place")
        assert built is not None
        for k in free:
            setattr(built[0], k, base[k])
        return built[0]

    try:
        return mutable_transitions(cm, build)
    except G.CompileUnavailable as e:
        return f"skipped: {e}"


def _in_place_loops(cm: Any, items: int) -> dict[str, Any]:
    """K4, and K5 where Cython builds it (else why not, as a string)."""
    from .live_layout import mutable_transitions

    k5 = in_place_compiled(cm)
    return {"K4": _direct_loop_in_place(mutable_transitions(cm), items),
            "K5": k5 if isinstance(k5, str) else _direct_loop_in_place(k5, items)}


def _compiled_kernel(items: int, repeats: int) -> dict[str, Any] | str:
    """K3: the child loop on two copies of the package, one with its runtime modules compiled by Cython,
    the children alternated ``repeats`` times; medians (µs per item) and the build's seconds."""
    from .._check import generated as G

    if not G.cython_available():
        return "skipped: Cython is not installed (pip install -e '.[speed]')"
    out: dict[str, Any] = {}
    times: dict[str, list[float]] = {"python": [], "compiled": []}
    with tempfile.TemporaryDirectory(prefix="safeprefetch-ceiling-") as tmp:
        for flavour in times:
            _copy_package(os.path.join(tmp, flavour))
        t0 = time.perf_counter()
        try:
            _cythonize(os.path.join(tmp, "compiled", "safeprefetch", "_runtime"), ("kernel", "entries", "driving"))
        except G.CompileUnavailable as e:
            return f"skipped: {e}"
        out["build_seconds"] = round(time.perf_counter() - t0, 1)
        for _ in range(repeats):
            for flavour, got in times.items():
                us = _child(os.path.join(tmp, flavour), items, compiled=flavour == "compiled")
                if isinstance(us, str):
                    return us
                got.append(us)
    for flavour, got in times.items():
        out[flavour] = round(median(got), 3)
    return out


def _copy_package(root: str) -> None:
    """The installed package under ``root`` (its ``models`` inside it, as the installed layout has it)."""
    import safeprefetch
    import safeprefetch.models

    pkg = os.path.join(root, "safeprefetch")
    shutil.copytree(os.path.dirname(safeprefetch.__file__), pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    if not os.path.isdir(os.path.join(pkg, "models")):
        shutil.copytree(safeprefetch.models.__path__[0], os.path.join(pkg, "models"),
                        ignore=shutil.ignore_patterns("__pycache__"))


def _child(root: str, items: int, compiled: bool) -> float | str:
    """One timed loop in a child on the copy at ``root``: µs per item, or why it could not be measured."""
    env = {**os.environ, "PYTHONPATH": root}
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(items), str(_DEPTH), str(_RUN)],
                              capture_output=True, text=True, env=env, cwd=root, timeout=600)
        got = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (subprocess.TimeoutExpired, ValueError, IndexError) as e:
        return f"skipped: the child failed ({type(e).__name__})"
    if got is None:
        return f"skipped: the child failed: {proc.stderr.strip().splitlines()[-1:]}"
    if not got["file"].startswith(root) or compiled == got["file"].endswith(".py"):
        return f"skipped: the child imported {got['file']}, not the {'compiled' if compiled else 'python'} copy"
    return float(got["us"])


def _cythonize(directory: str, modules: tuple[str, ...]) -> None:
    """Compile ``directory/<module>.py`` to extensions beside them, Python's semantics kept (untyped)."""
    from .._check import extension as E

    cc, include = E.compiler(), sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    for name in modules:
        py, c = os.path.join(directory, f"{name}.py"), os.path.join(directory, f"{name}.c")
        E.run([sys.executable, "-m", "cython", "-3", "--directive", "annotation_typing=False,binding=True",
               "--module-name", f"safeprefetch._runtime.{name}", py, "-o", c], "cython")
        E.run([*cc, *E.CFLAGS, f"-I{include}", c, "-o", os.path.join(directory, name + suffix)],
              "the C compiler")


def ceiling_report(quick: bool = False) -> dict[str, Any]:
    """K0-K3 and the queues, µs per item, medians of interleaved repeats (K3: of alternated children)."""
    from .._prefetcher.machine import transitions_for
    from .._runtime.kernel import Runtime

    items, repeats = (2100, 3) if quick else (21000, 7)
    cm = transitions_for(_DEPTH, 1, True, True, 0, _DEPTH)
    steps = {(t, pc): g for t, table in enumerate(cm.steps) for pc, g in table.items()}
    loops: dict[str, Callable[[], Any]] = {
        "K0": protocol_loop(functools.partial(Runtime, compiled=cm), items, _DEPTH, _RUN),
        "K1": _direct_loop(cm, items, {k: g.first for k, g in steps.items()}, {k: g.ones for k, g in steps.items()})}
    compiled = _compiled_transitions(cm)
    if not isinstance(compiled, str):
        loops["K2"] = _direct_loop(cm, items, *compiled)
        if loops["K2"]() != loops["K1"]():  # a measurement of wrong code would be no measurement
            raise AssertionError("the Cython-compiled transitions reached another state than the generated ones")
    in_place = _in_place_loops(cm, items)
    for k, loop in in_place.items():
        if isinstance(loop, str):
            continue
        if loop() != loops["K1"]():
            raise AssertionError(f"the in-place transitions ({k}) reached another state than the generated ones")
        loops[k] = loop
    queues = one_thread_queue_loops(items, _DEPTH)
    times: dict[str, list[float]] = {k: [] for k in [*loops, *queues]}
    n = items // _RUN * _RUN
    for loop in loops.values():
        loop()  # warm-up
    for _ in range(repeats):  # interleaved
        for k, loop in loops.items():
            times[k].append(timed_loop(loop) / n)
        for k, loop in queues.items():
            times[k].append(timed_loop(loop) / items)
    us = {k: round(median(v) * 1e6, 3) for k, v in times.items()}
    result: dict[str, Any] = {"items": n, "depth": _DEPTH, "run": _RUN, "us_per_item": us,
                              "kernel_share_us": round(us["K0"] - us["K1"], 3)}
    if isinstance(compiled, str):
        result["K2"] = compiled
    else:
        result["K2_saves_us"] = round(us["K1"] - us["K2"], 3)
    result["K4_saves_us"] = round(us["K1"] - us["K4"], 3)
    if isinstance(in_place["K5"], str):
        result["K5"] = in_place["K5"]
    else:
        result["K5_saves_us"] = round(us["K1"] - us["K5"], 3)
    result["K3"] = "skipped in --quick (it builds three extensions)" if quick else _compiled_kernel(items, repeats)
    return result


def format_ceiling(c: dict[str, Any]) -> str:
    us = c["us_per_item"]
    lines = [f"what compiling would buy: the protocol loop, depth {c['depth']}, runs of {c['run']}, us per item",
             f"  {us['K0']:8.3f}  K0 through the kernel, generated transitions in Python (the Prefetcher's path)",
             f"  {us['K1']:8.3f}  K1 the same transitions called directly, no kernel "
             f"(kernel's share {c['kernel_share_us']:.3f})"]
    if "K2" in us:
        lines.append(f"  {us['K2']:8.3f}  K2 those transitions compiled by Cython with the model's helpers "
                     f"(saves {c['K2_saves_us']:.3f})")
    else:
        lines.append(f"  {'-':>8}  K2 {c['K2']}")
    k3 = c["K3"]
    if isinstance(k3, dict):
        lines.append(f"  {k3['compiled']:8.3f}  K3 the kernel compiled by Cython as it stands, child process "
                     f"(alternated with the same child uncompiled: {k3['python']:.3f}; built in "
                     f"{k3['build_seconds']} s)")
    else:
        lines.append(f"  {'-':>8}  K3 {k3}")
    lines.append(f"  {us['K4']:8.3f}  K4 the transitions updating a mutable layout in place (saves "
                 f"{c['K4_saves_us']:.3f} of K1)")
    if "K5" in us:
        lines.append(f"  {us['K5']:8.3f}  K5 K4 compiled by Cython (saves {c['K5_saves_us']:.3f} of K1)")
    else:
        lines.append(f"  {'-':>8}  K5 {c['K5']}")
    lines += [f"  {us['queue.Queue put + get']:8.3f}  queue.Queue put + get", f"  {us['SimpleQueue floor']:8.3f}  "
              "SimpleQueue floor: a credit taken, an item put and got, the credit given back"]
    return "\n".join(lines)
