"""No loop back-edge inside a ``try`` whose exception would be looked up outside it (CPython 3.11).

CPython 3.11 raises an exception that lands on a loop's back-edge (a signal handler's KeyboardInterrupt
at ``continue``, or at the end of a loop body) after the jump, and looks up its handler at the
instruction *before* the jump's target. When the loop's head is the first instruction of an enclosing
``try``, that instruction is outside the try, so the exception escapes a handler it is lexically
inside. The Ctrl-C soak's consumer loop was written that way: one run in six of
test_ctrl_c_from_a_kernel_timer_loses_nothing died of a KeyboardInterrupt raised at its ``continue``.
This test reads the exception table of every function in the package and fails on any such back-edge,
in the harnesses and, where it would matter most, in the code that runs on the caller's thread.
"""

import dis
import importlib
import pkgutil
import types

import safeprefetch


def _code_objects(mod):
    stack = [v.__code__ for v in vars(mod).values() if isinstance(v, types.FunctionType)]
    for v in vars(mod).values():
        if isinstance(v, type):
            for a in vars(v).values():
                f = getattr(a, "__func__", a)
                if isinstance(f, types.FunctionType):
                    stack.append(f.__code__)
                if isinstance(a, property) and isinstance(a.fget, types.FunctionType):
                    stack.append(a.fget.__code__)
    seen = set()
    while stack:
        c = stack.pop()
        if c not in seen:
            seen.add(c)
            yield c
            stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]


def escaping_backedges(code):
    """``(offset, target, line)`` of each back-edge covered by a handler that the instruction before its
    target is not covered by."""
    entries = dis.Bytecode(code).exception_entries

    def handler(offset):
        return next((e.target for e in entries if e.start <= offset < e.end), None)

    return [(i.offset, i.argval, i.positions.lineno) for i in dis.get_instructions(code)
            if i.opname.startswith("JUMP_BACKWARD") and handler(i.offset) is not None
            and handler(i.argval - 2) != handler(i.offset)]


def test_no_back_edge_escapes_its_try():
    bad = []
    for info in pkgutil.walk_packages(safeprefetch.__path__, "safeprefetch."):
        if info.name.endswith("__main__"):
            continue
        mod = importlib.import_module(info.name)
        for code in _code_objects(mod):
            if code.co_filename == getattr(mod, "__file__", None):
                bad += [f"{info.name}:{line} {code.co_qualname}" for _o, _t, line in escaping_backedges(code)]
    assert not bad, bad


def test_the_check_has_teeth():
    def loop_opens_the_try(items):
        while True:
            try:
                while items:
                    items.pop()
                    continue
                break
            except KeyError:
                pass

    def guarded(items):
        while True:
            try:
                off_the_try_start = None  # noqa: F841
                while items:
                    items.pop()
                    continue
                break
            except KeyError:
                pass

    assert escaping_backedges(loop_opens_the_try.__code__)
    assert not escaping_backedges(guarded.__code__)
