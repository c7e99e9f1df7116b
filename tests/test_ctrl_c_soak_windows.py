"""The Ctrl-C soak's own consumer loop has no interruption point between a lease handed out and the ``with``
that releases it (``_harness/ctrl_c_soak.py``).

A Ctrl-C landing there leaves the Lease bound to the loop's local, unreleased, and the next call raises
LeaseHeld: the soak test failed so on CPython 3.12.1 in CI (seed 7, one SIGINT per run), where the statement
between them called ``len`` (a C call, after which the interpreter checks for a pending signal). Read from the
loop's own bytecode on the running interpreter: from the store of ``pf.lease(...)``'s result to the ``with``,
no call of any kind.
"""

from __future__ import annotations

import dis

from safeprefetch._harness.ctrl_c_soak import _Run


def _between_lease_and_with() -> list[dis.Instruction]:
    ins = list(dis.get_instructions(_Run.consume))
    store = next(i for i, x in enumerate(ins) if x.opname == "STORE_FAST" and x.argval == "lease")
    enter = next(i for i in range(store, len(ins)) if ins[i].opname in ("BEFORE_WITH", "SETUP_WITH"))
    return ins[store + 1:enter]


def test_no_call_between_the_lease_and_its_with():
    window = _between_lease_and_with()
    assert window, "the lease's with was not found after its store"
    calls = [f"{x.opname} {x.argval}" for x in window if "CALL" in x.opname]
    assert not calls, calls


def test_the_window_holds_the_loads_and_stores_it_should():
    """(A guard that the window read is the right one: it reads the lease's position and stores ``pos``.)"""
    names = set()
    for x in _between_lease_and_with():  # (3.13 stores two locals in one instruction: a tuple of names)
        names |= set(x.argval) if isinstance(x.argval, tuple) else {x.argval}
    assert {"position", "pos", "step"} <= names, names
