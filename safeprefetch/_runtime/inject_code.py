"""Reading a code object for the injector: which instruction is where, its handler, and which calls are inlined.

Interrupt injection (``inject.py``) stops at CPython's eval-breaker checks and must know, at each trace
event, what the interpreter would do there: whether the previous instruction was a call followed by a
check (a call into C, or into Python through C) or an inlined Python call (no check), which exception
handler covers an offset, and where a back-edge's exception is looked up. All of it is read from the
bytecode and the exception table once per code object and cached, because the trace hook runs on every
instruction of the traced code. The rules are observations of CPython 3.11 to 3.13; the tests re-derive them
from real interrupts (tests/test_backedges.py, tests/test_hardening_review20.py and review21).
"""

from __future__ import annotations

import dis
import inspect
import sys
from types import CodeType

# Private to the injector (``inject.py`` imports these names as they are).
__all__: list[str] = []

_CALL_OPS = frozenset({"CALL", "CALL_FUNCTION_EX", "CALL_KW", "CALL_FUNCTION", "CALL_METHOD", "CALL_FUNCTION_KW"})
_LOOP_OPS = frozenset({"JUMP_BACKWARD"})
#: 3.11's conditional back-edges (the bottom test of ``while cond:``, a comprehension's ``if``): a check only
#: when the jump is taken, so their point is seen on arriving at the jump's target from them.
_COND_LOOP_OPS = frozenset({"POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_NONE",
                            "POP_JUMP_BACKWARD_IF_NOT_NONE"})
#: Whether opcode tracing needs ``sys.settrace`` called again to take effect (``_Tracer.global_trace``).
_REINSTRUMENT = sys.version_info[:2] == (3, 12)
_RETURN_OPS = frozenset({"RETURN_VALUE", "RETURN_CONST"})
#: Python callees reached through C: their return is followed by an eval-breaker check.
_THROUGH_C = frozenset({"__init__", "__new__", "__call__"})


_ops_cache: dict[CodeType, dict[int, str]] = {}


def _ops(code: CodeType) -> dict[int, str]:
    ops = _ops_cache.get(code)
    if ops is None:
        ops = {ins.offset: ins.opname for ins in dis.get_instructions(code)}
        _ops_cache[code] = ops
    return ops


_lines_cache: dict[CodeType, dict[int, int]] = {}


def _lines(code: CodeType) -> dict[int, int]:
    """Bytecode offset -> source line of the instruction there."""
    lines = _lines_cache.get(code)
    if lines is None:
        lines = {}
        for start, end, line in code.co_lines():
            if line is not None:
                for off in range(start, end, 2):
                    lines[off] = line
        _lines_cache[code] = lines
    return lines


_keys_cache: dict[CodeType, int] = {}


def _code_key(code: CodeType) -> int:
    key = _keys_cache.get(code)
    if key is None:
        spots = tuple(-1 if v is None else v for pos in code.co_positions() for v in pos)  # (None: no hash by id)
        key = _keys_cache[code] = hash((code.co_firstlineno, spots))
    return key


_handlers_cache: dict[CodeType, list[tuple[int, int, int]]] = {}


def _handler(code: CodeType, offset: int) -> int:
    """The exception handler (target offset) covering the instruction at ``offset``; -1 for none."""
    table = _handlers_cache.get(code)
    if table is None:
        table = [(e.start, e.end, e.target) for e in dis._parse_exception_table(code)]  # type: ignore[attr-defined]
        _handlers_cache[code] = table
    best = -1
    for start, end, target in table:  # entries do not overlap in 3.11's table
        if start <= offset < end:
            best = target
    return best


_at_target_cache: dict[tuple[CodeType, int], bool] = {}


def _raised_at_target(code: CodeType, jump: int) -> bool:
    """Whether the back-edge at ``jump`` is performed at its target's event rather than its own: on 3.11 and 3.12
    the interpreter looks up the handler after the jump, at the code unit before the target
    (``backedges.lookup_offset``), and where the jump's own handler differs from that one and the target's
    agrees (3.12 leaves the jump closing ``while cond:`` out of the table), raising at the target is faithful."""
    key = (code, jump)
    found = _at_target_cache.get(key)
    if found is None:
        target = next(i.argval for i in dis.get_instructions(code) if i.offset == jump)
        lookup = _handler(code, target - 2)
        found = _at_target_cache[key] = (sys.version_info < (3, 13) and _handler(code, jump) != lookup
                                         and _handler(code, target) == lookup)
    return found


#: Code resumed, never started, by a call: a generator's or a coroutine's (``next``, ``send``: through C).
_RESUMED = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _inlined(caller: CodeType, call: int, callee: CodeType) -> bool:
    """Whether the CALL at ``call`` in ``caller`` entered ``callee`` as an inlined Python call (no check after
    it), judged from what the tracer can see: a generator's frame is resumed through C; ``__init__``,
    ``__new__`` and ``__call__`` are reached through C (``type.__call__``) unless the call site names them
    (``Base.__init__(self)``, ``super().__init__()``: a Python function called straight)."""
    if callee.co_flags & _RESUMED:
        return False
    if callee.co_name not in _THROUGH_C:
        return True
    return _names_at_call(caller, call, callee.co_name)


_named_cache: dict[tuple[CodeType, int, str], bool] = {}


def _names_at_call(code: CodeType, call: int, name: str) -> bool:
    """Whether the call at ``call`` loads attribute ``name`` after the previous call, as its callee."""
    key = (code, call, name)
    found = _named_cache.get(key)
    if found is None:
        found = False
        for ins in dis.get_instructions(code):
            if ins.offset >= call:
                break
            if ins.opname in _CALL_OPS:
                found = False  # an earlier call's: the attribute must be loaded after it
            elif ins.opname in ("LOAD_METHOD", "LOAD_ATTR", "LOAD_SUPER_ATTR") and ins.argval == name:
                found = True
        _named_cache[key] = found
    return found
