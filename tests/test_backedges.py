"""No loop back-edge whose KeyboardInterrupt escapes the ``try`` or ``with`` it lies in, on this Python.

A signal handler's KeyboardInterrupt can land on a loop's back-edge, and CPython finds its handler by
an exception-table lookup that each version does differently (``safeprefetch/_runtime/backedges.py``):
3.11 and 3.12 look up the instruction before the jump's target, 3.13 looks up the jump, which its
compiler sometimes leaves out of the table. Either way an interrupt can skip a ``finally``, a
``with``'s exit, or land in an ``except`` it is lexically outside. Seen here: the Ctrl-C soak's
consumer loop lost its ``try`` on 3.11 (one run in six) and on 3.13.0 (8 seeds of 8).

The audit (``safeprefetch.lowlevel.escaping_back_edges``) predicts this from the bytecode. These tests
(1) check its predictions against real interrupts (``_thread.interrupt_main``) at probe loops on the
running interpreter, so the rule it encodes is re-derived on every Python the suite runs on, and
(2) run it over the code where Ctrl-C safety is promised: the runtime, the Prefetcher, and the soak.
"""

from __future__ import annotations

import _thread
import importlib
import itertools
import pkgutil
import sys
import threading

import pytest

import safeprefetch
from safeprefetch.lowlevel import EscapingBackEdge, escaping_back_edges, python_sigint

pytestmark = pytest.mark.timeout(60)


class _Exit:
    """A context manager that records its exit."""

    def __init__(self, events: list[str]):
        self.events = events

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self.events.append("exit")


# Each probe spins with no eval-breaker point but its loop's back-edge(s), so the interrupt lands
# there; ``box["n"]`` (or the counter's repr) shows it is spinning. ``expected`` is what the
# lexically right handler does: the events recorded, and whether the interrupt reaches the caller.
PROBES = {
    "while_cond_in_finally": ('''
def f(box):
    try:
        while box["go"]:
            box["n"] += 1
    finally:
        box["events"].append("finally")
''', (["finally"], True)),
    "while_cond_in_with": ('''
def f(box):
    with box["exit"]:
        while box["go"]:
            box["n"] += 1
''', (["exit"], True)),
    "for_ending_in_if": ('''
def f(box):
    try:
        for i in box["counter"]:
            if i < 0:
                box["n"] += 1
    finally:
        box["events"].append("finally")
''', (["finally"], True)),
    "for_if_continue_break": ('''
def f(box):
    try:
        for i in box["counter"]:
            if i >= 0:
                continue
            break
    finally:
        box["events"].append("finally")
''', (["finally"], True)),
    "while_true_if_break": ('''
def f(box):
    try:
        while True:
            if not box["go"]:
                break
            box["n"] += 1
    finally:
        box["events"].append("finally")
''', (["finally"], True)),
    "continue_to_a_head_outside": ('''
def f(box):
    try:
        while True:
            if box["go"]:
                box["n"] += 1
                continue
            box["n"] -= 1
    finally:
        box["events"].append("finally")
''', (["finally"], True)),
    "loop_of_a_try": ('''
def f(box):
    try:
        while True:
            try:
                box["n"] += 1
            except ZeroDivisionError:
                return
    finally:
        box["events"].append("finally")
''', (["finally"], True)),
    "comprehension_in_with": ('''
def f(box):
    with box["exit"]:
        return [i for i in box["counter"] if i < 0]
''', (["exit"], True)),
    # Found by tests/test_backedges_generated.py: the ``continue`` leaves the ``try`` before it jumps,
    # so its jump is in no table entry, right after the ``if`` test that is in the ``try``; the audit
    # took it for 3.13.0's untabled bottom test and flagged it on 3.11, 3.12 and 3.13 alike, though
    # the interrupt goes, as it should, to the caller.
    "continue_out_of_a_try": ('''
def f(box):
    while True:
        try:
            box["n"] += 1
            if box["go"]:
                continue
        except KeyboardInterrupt:
            box["events"].append("caught")
            return
''', ([], True)),
    "loop_around_except_base": ('''
def f(box):
    while box["go"]:
        try:
            box["n"] += 1
        except BaseException:
            box["events"].append("swallowed")
            return
''', ([], True)),
}


def _spinning(box: dict) -> bool:
    return box["n"] > 1000 or int(repr(box["counter"])[6:-1]) > 1000


def run_probe(src: str) -> tuple[list[str], bool, int | None]:
    """Run a probe until a real interrupt lands in it: (events, whether it reached the caller, the line)."""
    ns: dict = {}
    exec(compile(src, "<probe>", "exec"), ns)
    events: list[str] = []
    box = {"go": True, "n": 0, "events": events, "exit": _Exit(events), "counter": itertools.count()}

    def fire() -> None:
        while not _spinning(box):  # wait on observable state: the probe is in its loop
            pass
        _thread.interrupt_main()

    t = threading.Thread(target=fire)
    t.start()
    reached, line = False, None
    try:
        ns["f"](box)
    except KeyboardInterrupt as e:
        reached = True
        tb = e.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        line = tb.tb_lineno
    finally:
        t.join()
    return events, reached, line


@pytest.mark.parametrize("name", sorted(PROBES))
def test_the_audit_predicts_what_a_real_interrupt_does(name):
    """On this interpreter, a real interrupt at the probe's back-edge escapes its handler exactly when
    the audit says so."""
    src, expected = PROBES[name]
    ns: dict = {}
    exec(compile(src, "<probe>", "exec"), ns)
    predicted = escaping_back_edges(ns["f"])
    with python_sigint():
        events, reached, line = run_probe(src)
    observed_escape = (events, reached) != expected
    assert bool(predicted) == observed_escape, (sys.version, name, predicted, events, reached, line)


def test_each_interpreter_rule_has_a_probe_that_escapes():
    """The probes include a case where the running interpreter really escapes (so the agreement test
    above compares something): 3.11 and 3.12 on a ``continue`` to a head outside the try, 3.13 on a
    ``while cond:`` and a comprehension's ``if``."""
    escaping = set()
    for name, (src, _expected) in PROBES.items():
        ns: dict = {}
        exec(compile(src, "<probe>", "exec"), ns)
        if escaping_back_edges(ns["f"]):
            escaping.add(name)
    if sys.version_info[:2] <= (3, 12):
        assert "continue_to_a_head_outside" in escaping
    else:
        assert {"while_cond_in_finally", "while_cond_in_with", "comprehension_in_with"} <= escaping
    assert "loop_of_a_try" not in escaping and "while_true_if_break" not in escaping
    assert "continue_out_of_a_try" not in escaping


#: Back-edges known to escape, each with why it is acceptable: (module, function, Python versions).
ACCEPTED = {
    # 3.12 catches an interrupt at retake's back-edge in its own ``except BaseException: pass``: the
    # loop drops every exception while it takes the lock back (the one propagating carries the
    # interrupt), so a version that drops this one too is what the function wants.
    ("safeprefetch._runtime.interrupts", "retake", (3, 12)),
}


def _audited_modules():
    """Every module but the benchmarks and test scaffolding in ``_harness`` (which run no Ctrl-C they
    catch), and of those the Ctrl-C soak, whose consumer loop catches one at every point."""
    for info in pkgutil.walk_packages(safeprefetch.__path__, "safeprefetch."):
        if info.name.endswith("__main__"):
            continue
        if not info.name.startswith("safeprefetch._harness.") or info.name == "safeprefetch._harness.ctrl_c_soak":
            yield info.name


def test_no_back_edge_escapes_its_handler_in_the_package():
    """The runtime, both prefetchers, the checkers, the tools and the Ctrl-C soak: on this Python no
    back-edge sends a KeyboardInterrupt past a ``finally`` or a ``with``'s exit, or into an ``except``
    it is outside of (the ``finally`` that removes a search's spilled levels, the ``with`` that undoes
    the real-code scheduler's patches, the kernel's locks)."""
    modules = list(_audited_modules())
    assert {"safeprefetch._runtime.kernel", "safeprefetch._prefetcher.consumer", "safeprefetch._check.fpsearch",
            "safeprefetch._interleave.check", "safeprefetch._harness.ctrl_c_soak"} <= set(modules)
    bad = []
    for name in modules:
        for edge in escaping_back_edges(importlib.import_module(name)):
            if (name, edge.function, sys.version_info[:2]) not in ACCEPTED:
                bad.append(str(edge))
    assert not bad, "\n".join(bad)


def test_the_soak_loop_before_this_fix_is_flagged_on_its_interpreter():
    """The consumer loop as it was (``while not done:`` and a busy ``while cond:`` inside the try,
    whose head opens it) is flagged on 3.13; the 3.11 form (a loop that opens the try) on 3.11/3.12."""
    def old_consume(items, deadline, clock):
        done = False
        while True:
            try:
                off_the_try_start = None  # noqa: F841
                while not done:
                    if items:
                        items.pop()
                        continue
                    t = clock() + deadline
                    while clock() < t:
                        pass
                    done = True
                break
            except KeyboardInterrupt:
                pass

    def loop_opens_the_try(items):  # the consumer loop of 2026-12-01, before its guard statement
        while True:
            try:
                while items:
                    items.pop()
                    continue
                break
            except KeyboardInterrupt:
                pass

    old, older = escaping_back_edges(old_consume), escaping_back_edges(loop_opens_the_try)
    if sys.version_info[:2] >= (3, 13):
        assert old and {e.line for e in old} <= {old_consume.__code__.co_firstlineno + k for k in (5, 10)}
        assert not older
    else:
        assert not old
        assert older


def test_the_report_names_the_place():
    def g(box):
        try:
            while box["go"]:
                box["n"] += 1
        finally:
            box["events"].append("finally")

    found = escaping_back_edges(g)
    if sys.version_info[:2] >= (3, 13):
        (edge,) = found
        assert isinstance(edge, EscapingBackEdge)
        assert edge.function.endswith("g") and edge.filename == __file__ and edge.line is not None
        assert "leaves the function" in str(edge) and edge.actual_handler is None
        assert edge.expected_handler is not None
    else:
        assert found == []


def test_bad_input_is_a_clear_error():
    with pytest.raises(TypeError, match="function, method, code object or module"):
        escaping_back_edges(42)
    with pytest.raises(TypeError, match="no .py file"):
        escaping_back_edges(sys)
