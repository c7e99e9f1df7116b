"""Loop back-edges whose asynchronous exception escapes the ``try`` (or ``with``) they sit in.

A ``KeyboardInterrupt`` raised by a signal handler can land on a loop's
back-edge (``JUMP_BACKWARD``; on 3.11 also a conditional jump back,
``POP_JUMP_BACKWARD_IF_*``, as at the bottom test of a ``while cond:`` and a
comprehension's ``if``), one of CPython's eval-breaker checks. Which
handler then catches it is decided by a lookup in the code object's
exception table, at an offset that is *not* always the jump's own, and the
table does not always cover that offset:

* **CPython 3.11 and 3.12** check for signals after the jump and look the
  handler up at the instruction before the jump's *target*
  (python/cpython#108214). When that instruction lies outside a ``try``
  the loop body is inside -- the loop's head opens the ``try``, or a
  ``continue`` jumps to a head whose previous instruction belongs to
  another block -- the exception escapes a handler it is lexically inside.
* **CPython 3.13** looks the handler up at the jump itself, but its compiler
  leaves some jumps out of the table: the duplicated test at the bottom of a
  ``while cond:`` loop, a ``for`` body ending in an ``if`` and the ``if``
  filter of an inlined comprehension end in a ``JUMP_BACKWARD`` (made from a
  conditional jump back, with the test's source position) that no entry
  covers (python/cpython#130279). A ``while`` inside a ``with lock:`` then
  leaks the lock on Ctrl-C.

Neither is visible to a trace-hook injector on 3.11 and 3.12 (an exception
raised from the hook is looked up at the jump), and both are visible to a
static reading of the table. :func:`escaping_back_edges` is that reading: for
each back-edge it compares the handler the running interpreter will use with
the handler the jump lies in (its own table entry; where 3.13's table skips
a jump made from a conditional test, the test's entry; a jump the table
skips otherwise -- an ``if ...: continue`` that leaves a ``try`` in a loop
that is in none, on every version -- lies outside every ``try``), and
reports the back-edges where they differ. Handlers that only restore state and
re-raise (an inlined comprehension's, an ``except`` block's cleanup) are
followed to the handler they re-raise into, so a difference that no
user-visible handler would see is not reported.

The rule for each version is an observation, not a documented interface;
``tests/test_backedges.py`` re-derives it on the running interpreter from
real interrupts (``_thread.interrupt_main``) at probe loops, and
``tests/test_backedges_generated.py`` at loops in programs Hypothesis
writes; both fail if the prediction and the outcome disagree.
"""

from __future__ import annotations

import builtins
import dis
import sys
import types
from dataclasses import dataclass
from typing import Any, Iterator

__all__ = ["EscapingBackEdge", "escaping_back_edges", "lookup_offset"]

#: Instructions that cannot raise: an exception is never attributed to them, so the table may skip them.
_SILENT = frozenset({"NOP", "EXTENDED_ARG", "CACHE", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT",
                     "JUMP", "JUMP_NO_INTERRUPT", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE",
                     "POP_JUMP_IF_NOT_NONE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE",
                     "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_TRUE",
                     "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE",
                     "NOT_TAKEN"})
#: The jumps back that check for signals (JUMP_BACKWARD_NO_INTERRUPT does not); the conditional ones are 3.11's.
_BACK_EDGES = frozenset({"JUMP_BACKWARD", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
                         "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE"})
#: What a handler block may do and still be a mere cleanup that re-raises into the next handler out.
_CLEANUP = frozenset({"PUSH_EXC_INFO", "POP_EXCEPT", "SWAP", "COPY", "POP_TOP", "NOP", "LOAD_CONST", "STORE_FAST",
                      "STORE_FAST_MAYBE_NULL", "DELETE_FAST", "STORE_FAST_STORE_FAST", "RERAISE", "EXTENDED_ARG",
                      "CALL_INTRINSIC_1"})  # a generator's StopIteration-to-RuntimeError: other exceptions pass


@dataclass(frozen=True)
class EscapingBackEdge:
    """A loop back-edge where an asynchronous exception would reach another handler than the loop body's."""

    #: The function (its qualified name), file and line of the jump.
    function: str
    filename: str
    line: int | None
    #: Bytecode offsets: the jump, and where the running interpreter looks its handler up.
    offset: int
    lookup_at: int
    #: The handler offsets (after cleanup handlers), or None for "leaves the function".
    expected_handler: int | None
    actual_handler: int | None

    def __str__(self) -> str:
        def name(h: int | None) -> str:
            return "none (leaves the function)" if h is None else f"the handler at offset {h}"
        return (f"{self.filename}:{self.line} {self.function}: a KeyboardInterrupt at the back-edge at offset "
                f"{self.offset} reaches {name(self.actual_handler)}, not {name(self.expected_handler)}")


def lookup_offset(jump: dis.Instruction) -> int:
    """Where the running interpreter looks up the handler of an exception raised at the back-edge ``jump``."""
    if sys.version_info[:2] <= (3, 12):
        return int(jump.argval) - 2  # after the jump: the code unit before the target
    return jump.offset


class _Table:
    def __init__(self, code: types.CodeType, namespace: dict[str, Any]):
        self.entries = dis.Bytecode(code).exception_entries
        self.instructions = list(dis.get_instructions(code))
        self.at = {i.offset: k for k, i in enumerate(self.instructions)}
        self.namespace = namespace

    def handler(self, offset: int) -> int | None:
        return next((e.target for e in self.entries if e.start <= offset < e.end), None)

    def effective(self, offset: int) -> int | None:
        """The first handler out from ``offset`` that does something to a KeyboardInterrupt.

        A cleanup that only restores state and re-raises, and a chain of ``except`` clauses none of
        which matches KeyboardInterrupt, pass it to the next handler out. A clause whose class
        cannot be resolved counts as catching it.
        """
        seen: set[int] = set()
        h = self.handler(offset)
        while h is not None and h not in seen:
            seen.add(h)
            reraise = self._passes_on(h)
            if reraise is None:
                return h
            h = self.handler(reraise)
        return h

    def lexical(self, k: int) -> int | None:
        """The handler the jump at index ``k`` lies in (as :meth:`effective`).

        Its own table entry's; or, where the table skips a jump that the compiler made out of a
        conditional jump back (3.13's bottom test of a ``while``, a ``for`` body ending in an ``if``,
        a comprehension's ``if``: the test inverted, then a ``JUMP_BACKWARD`` given the test's source
        position but no table entry, python/cpython#130279), the entry of the test it closes: the
        instructions before it that can raise. After an ``await``'s ``CLEANUP_THROW`` (3.12), that
        instruction's. A jump the table skips anywhere else lies outside every ``try``: so does an
        ``if ...: continue`` inside a ``try`` in a loop that is in none, whose jump follows a test in
        the ``try`` but has the ``continue``'s position (it leaves the ``try`` first). A conditional
        jump back (3.11) the table skips lies in its test's entry.
        """
        jump = self.instructions[k]
        if self.handler(jump.offset) is not None:
            return self.effective(jump.offset)
        if "_IF_" in jump.opname:  # a conditional jump back (3.11) lies in its test's block
            return self._test_before(k)
        before = next((i for i in reversed(self.instructions[:k]) if i.opname not in ("EXTENDED_ARG", "CACHE")), None)
        if before is not None and before.opname == "CLEANUP_THROW":  # an ``await``'s exit (3.12): its block
            return self.effective(before.offset)
        if before is None or "_IF_" not in before.opname or before.positions != jump.positions:
            return None
        return self._test_before(k)

    def _test_before(self, k: int) -> int | None:
        """The handler (as :meth:`effective`) of the last instruction before index ``k`` that can raise."""
        test = next((i for i in reversed(self.instructions[:k]) if i.opname not in _SILENT), None)
        return None if test is None else self.effective(test.offset)

    def _passes_on(self, target: int) -> int | None:
        """The offset of the RERAISE by which the handler at ``target`` passes a KeyboardInterrupt on,
        or None if it may do more with it."""
        k = self.at.get(target)
        while k is not None and k < len(self.instructions):
            i = self.instructions[k]
            if i.opname == "RERAISE":
                return i.offset
            if i.opname in _CLEANUP:
                k += 1
                continue
            clause = self._clause(k)
            if clause is None:
                return None
            catches, k = clause
            if catches:
                return None
        return None

    def _clause(self, k: int) -> tuple[bool, int | None] | None:
        """An ``except X:`` test starting at index ``k``: (whether it may catch a KeyboardInterrupt,
        the index where a non-matching exception goes on); None if the code there is not one."""
        chains: list[list[str]] = []
        j = k
        while j < len(self.instructions):
            i = self.instructions[j]
            if i.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF"):
                chains.append([i.argval])
            elif i.opname == "LOAD_ATTR" and chains:
                chains[-1].append(i.argval)
            elif i.opname != "BUILD_TUPLE":
                break
            j += 1
        if (not chains or j + 1 >= len(self.instructions) or self.instructions[j].opname != "CHECK_EXC_MATCH"
                or "IF_FALSE" not in self.instructions[j + 1].opname):
            return None
        catches = any(not isinstance(c, type) or issubclass(KeyboardInterrupt, c)
                      for c in map(self._resolve, chains))
        return catches, self.at.get(self.instructions[j + 1].argval)

    def _resolve(self, chain: list[str]) -> Any:
        value = self.namespace.get(chain[0], getattr(builtins, chain[0], None))
        for attr in chain[1:]:
            value = getattr(value, attr, None)
        return value


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _codes_of(obj: Any) -> Iterator[tuple[types.CodeType, dict[str, Any]]]:
    """Each code object in ``obj`` with the namespace its ``except`` clauses' names resolve in."""
    if isinstance(obj, types.CodeType):
        for code in _code_objects(obj):
            yield code, {}
    elif isinstance(obj, types.ModuleType):
        path = getattr(obj, "__file__", None)
        if not path or not path.endswith(".py"):
            raise TypeError(f"escaping_back_edges reads a module's source: {obj.__name__} has no .py file")
        with open(path, encoding="utf-8") as f:  # every function, nested and in classes, from the source
            for code in _code_objects(compile(f.read(), path, "exec")):
                yield code, vars(obj)
    else:
        target = getattr(obj, "__func__", obj)
        code = getattr(target, "__code__", None)
        if not isinstance(code, types.CodeType):
            raise TypeError(f"escaping_back_edges takes a function, method, code object or module, "
                            f"not {type(obj).__name__}")
        for c in _code_objects(code):
            yield c, getattr(target, "__globals__", {})


def escaping_back_edges(obj: Any) -> list[EscapingBackEdge]:
    """Every back-edge in ``obj`` (a function, method, code object or module, with everything nested
    in it) where a KeyboardInterrupt raised by a signal handler would reach another handler than the
    one the jump lies in, on the running interpreter.

    Handlers are compared by what they do to a KeyboardInterrupt: a cleanup that re-raises, and
    ``except`` clauses for classes that are not its bases, pass it outward.
    """
    found: list[EscapingBackEdge] = []
    for code, namespace in _codes_of(obj):
        table = _Table(code, namespace)
        for k, jump in enumerate(table.instructions):
            if jump.opname not in _BACK_EDGES:
                continue
            at = lookup_offset(jump)
            expected, actual = table.lexical(k), table.effective(at)
            if expected != actual:
                found.append(EscapingBackEdge(code.co_qualname, code.co_filename, jump.positions.lineno,
                                              jump.offset, at, expected, actual))
    return found
