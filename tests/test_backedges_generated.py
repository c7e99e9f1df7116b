"""Generated programs: the back-edge audit against real interrupts.

``tests/test_backedges.py`` checks ``escaping_back_edges`` against a real Ctrl-C at hand-written probe
loops. Here Hypothesis writes the probes: small functions nesting ``try``/``finally``, ``try``/``except X``
(X among KeyboardInterrupt, BaseException, ZeroDivisionError, Exception and tuples; with ``else``,
``as e``, bodies that fall through, ``raise``, ``return``, ``break`` or ``continue``), ``with`` (one or two
recording context managers), ``while cond:``, ``while True:`` left by ``break``, ``for x in
itertools.count():`` and ``if``/``elif``/``else``, with filler statements around the path (their own
bounded loops, ``try``s, ``with``s, comprehensions, dead ``continue``/``break``), and at the end of the
path exactly one *spin loop*: a ``while``, ``for`` or comprehension (list, set, dict, generator) that runs
forever with no eval-breaker point but its own back-edges -- subscripts and arithmetic on the shared
``box``, ``continue``, dead ``break``s, ``if``/``else`` (constant or alternating tests), an inner loop over
a tuple, a ``try`` whose ``except`` bodies run only if the interrupt lands in them; no calls. Every
``except``/``finally`` body and every ``__exit__`` records a KeyboardInterrupt it sees being handled
(``caught@3.0``, ``finally@2``, ``exit@1``).

For each program:

1. the outcome a KeyboardInterrupt raised in the spin loop has *lexically* (the handlers it runs, and
   whether it reaches the caller) is computed from the generated structure;
2. a traced run (``sys.settrace`` with opcode events, stopped by the trace function once the loop has
   spun) gives the back-edges the spin path takes: every instruction after which the frame goes on at a
   lower offset (``JUMP_BACKWARD``, and on 3.11 also ``POP_JUMP_BACKWARD_IF_*``);
3. a real run: a helper thread waits until the loop has spun, then calls ``_thread.interrupt_main()``.
   The interrupt's innermost traceback entry names the back-edge it landed on: ``tb_lasti`` is the
   jump's offset on 3.11, 3.12 and 3.13 (though 3.11 and 3.12 look the handler up before the jump's
   target), or on 3.11 the ``COMPARE_OP`` whose specialized compare-and-jump took a conditional
   back-edge. The run is repeated (at most three times) until that is one of the spin's back-edges,
   at a line of the spin loop;
4. the outcome differs from the lexical one exactly when the audit flags the back-edge it landed on.
   As the landing back-edge is known, this is checked even where the spin path's back-edges disagree;
   and, as a check that needs no landing, an observed escape implies a flagged spin back-edge, and all
   of them flagged implies an escape.

Found so far: a false positive on 3.11, 3.12 and 3.13, ``if ...: continue`` in a ``try`` inside a loop
that is in none (probe ``continue_out_of_a_try`` in ``tests/test_backedges.py``).
"""

from __future__ import annotations

import _thread
import dis
import itertools
import sys
import threading
import types
from dataclasses import dataclass, replace
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safeprefetch.lowlevel import escaping_back_edges, python_sigint

pytestmark = pytest.mark.timeout(300)

# -- the programs ----------------------------------------------------------------------------------------

#: except clauses: the class expression, whether it catches a KeyboardInterrupt, a ZeroDivisionError.
CLASSES = {
    "KeyboardInterrupt": (True, False),
    "BaseException": (True, True),
    "ZeroDivisionError": (False, True),
    "Exception": (False, True),
    "(ZeroDivisionError, KeyboardInterrupt)": (True, True),
    "(ValueError, ZeroDivisionError)": (False, True),
}

#: The spin body's conditions and their (constant, while it spins) values.
CONDITIONS = {
    "yes": ('box["yes"]', True),
    "no": ('box["no"]', False),
    "nneg": ('box["n"] < 0', False),
    "ineg": ("i < 0", False),  # for loops only
    "odd": ('box["n"] % 2', None),  # alternates (in a for loop: ``i % 2``)
}

#: Comprehension spins: ``i`` runs over ``box["counter"]`` and no element is ever produced.
COMPREHENSIONS = [
    '[i for i in box["counter"] if i < 0]',
    '{i for i in box["counter"] if i < 0 if i > 5}',
    '{i: i for i in box["counter"] if not box["yes"]}',
    '[j for i in box["counter"] for j in (i, i) if j < 0]',
    'any(i for i in box["counter"] if i < 0)',
    '[i for i in box["counter"] if i < 0 or box["no"]]',
]


@dataclass(frozen=True)
class _Ctx:
    effects: tuple = ()        # the handlers around this point, outermost first
    exits_ok: bool = False     # break / continue may end an except body here (a loop, no finally between)
    return_ok: bool = True     # not inside a finally body


@dataclass
class Program:
    source: str
    expected: tuple[list[str], bool]   # the events and whether the interrupt reaches the caller
    spin_lines: tuple[int, int]

    def __repr__(self) -> str:  # Hypothesis prints the falsifying example with this
        return f"Program(expected={self.expected!r}, source=\n{self.source})"


def lexical_outcome(effects: tuple) -> tuple[list[str], bool]:
    """What a KeyboardInterrupt raised inside all of ``effects`` (outermost first) does, lexically."""
    events: list[str] = []
    for kind, payload in reversed(effects):
        if kind in ("finally", "exit"):
            events.append(payload)
        else:  # an except chain: the first clause that catches it runs; ``raise`` passes it on
            for label, catches, end in payload:
                if catches:
                    events.append(label)
                    if end != "raise":
                        return events, False
                    break
    return events, True


class _Writer:
    """Writes one program from Hypothesis draws."""

    def __init__(self, draw: Callable[[Any], Any], max_depth: int, focus: bool):
        self.draw = draw
        self.max_depth = max_depth
        self.focus = focus
        self.opening = False
        self.lines = ["def f(box):"]
        self.ids = itertools.count(1)
        self.expected: tuple[list[str], bool] | None = None
        self.spin_lines = (0, 0)
        self.spin_is_for = False
        self.spin_return_ok = True

    def emit(self, ind: int, text: str) -> None:
        self.lines.append("    " * ind + text)

    def flag(self) -> bool:
        return self.draw(st.booleans())

    def pick(self, options: list) -> Any:
        return self.draw(st.sampled_from(options))

    # The path: wrappers down to the spin loop.

    def path_block(self, ind: int, ctx: _Ctx, depth: int) -> None:
        opens, self.opening = self.opening, False  # focused: the spin opens this block, a try's body
        spin_here = opens or depth >= self.max_depth or not self.flag()
        for _ in range(0 if opens else self.pick([0, 0, 1, 2])):  # often none: a loop that opens its block
            self.filler(ind, ctx, 1)
        if spin_here and self.focus and not opens:
            self.opening = True
            self.wrap_try(ind, ctx, depth + 1, in_body=True)
        elif spin_here:
            self.spin(ind, ctx)
        else:
            self.wrapper(ind, ctx, depth + 1)
        for _ in range(self.draw(st.integers(0, 1))):
            self.filler(ind, ctx, 1)

    def wrapper(self, ind: int, ctx: _Ctx, depth: int) -> None:
        kind = self.pick(["try", "with", "while_cond", "try", "while_true", "with", "for_count", "try", "if"])
        getattr(self, "wrap_" + kind)(ind, ctx, depth)

    def terminator(self, ctx: _Ctx) -> str:
        ends = ["pass", "raise"] + (["return"] if ctx.return_ok else [])
        return self.pick(ends + (["break", "continue"] if ctx.exits_ok else []))

    def wrap_try(self, ind: int, ctx: _Ctx, depth: int, in_body: bool = False) -> None:
        k = next(self.ids)
        clauses = [(self.pick(sorted(CLASSES)), self.flag()) for _ in range(self.draw(st.integers(0, 2)))]
        has_finally = not clauses or self.flag()
        has_else = bool(clauses) and self.flag()
        positions = ["body"]
        for j, (cls, _as) in enumerate(clauses):  # the first clause a ZeroDivisionError reaches
            if CLASSES[cls][1]:
                positions.append(f"handler{j}")
                break
        positions += (["else"] if has_else else []) + (["finally"] if has_finally else [])
        pos = "body" if in_body else self.pick(positions)
        ends = [self.terminator(ctx) for _ in clauses]
        outer = ctx.effects + ((("finally", f"finally@{k}"),) if has_finally else ())
        chain = tuple((f"caught@{k}.{j}", CLASSES[cls][0], end)
                      for j, ((cls, _as), end) in enumerate(zip(clauses, ends)))
        self.emit(ind, "try:")
        if pos == "body":
            inner = outer + ((("except", chain),) if clauses else ())
            self.path_block(ind + 1, replace(ctx, effects=inner), depth)
        elif pos.startswith("handler"):
            self.emit(ind + 1, 'box["z"] = 1 // box["zero"]')
        else:
            self.filler(ind + 1, ctx, 1)
        for j, ((cls, as_), end) in enumerate(zip(clauses, ends)):
            self.emit(ind, f"except {cls}" + (f" as e{k}_{j}:" if as_ else ":"))
            self.emit(ind + 1, f'box["rec"]("caught@{k}.{j}")')
            if pos == f"handler{j}":
                self.path_block(ind + 1, replace(ctx, effects=outer), depth)
            else:
                self.emit(ind + 1, end)
        if has_else:
            self.emit(ind, "else:")
            if pos == "else":
                self.path_block(ind + 1, replace(ctx, effects=outer), depth)
            else:
                self.filler(ind + 1, ctx, 1)
        if has_finally:
            self.emit(ind, "finally:")
            self.emit(ind + 1, f'box["rec"]("finally@{k}")')
            in_finally = replace(ctx, exits_ok=False, return_ok=False)
            if pos == "finally":
                self.path_block(ind + 1, in_finally, depth)

    def wrap_with(self, ind: int, ctx: _Ctx, depth: int) -> None:
        labels = [f"exit@{next(self.ids)}" for _ in range(self.draw(st.integers(1, 2)))]
        items = ", ".join(f'box["cm"]("{label}")' + (f" as c{n}" if self.flag() else "")
                          for n, label in enumerate(labels))
        self.emit(ind, f"with {items}:")
        inner = ctx.effects + tuple(("exit", label) for label in labels)
        self.path_block(ind + 1, replace(ctx, effects=inner), depth)

    def loop_else(self, ind: int, ctx: _Ctx) -> None:
        if self.flag():
            self.emit(ind, "else:")
            self.filler(ind + 1, ctx, 1)

    def wrap_while_cond(self, ind: int, ctx: _Ctx, depth: int) -> None:
        self.emit(ind, 'while not box["done"]:')
        self.path_block(ind + 1, replace(ctx, exits_ok=True), depth)
        self.loop_else(ind, ctx)

    def wrap_while_true(self, ind: int, ctx: _Ctx, depth: int) -> None:
        self.emit(ind, "while True:")
        self.emit(ind + 1, 'if box["done"]:')
        self.emit(ind + 2, "break")
        self.path_block(ind + 1, replace(ctx, exits_ok=True), depth)

    def wrap_for_count(self, ind: int, ctx: _Ctx, depth: int) -> None:
        self.emit(ind, f"for x{next(self.ids)} in itertools.count():")
        self.emit(ind + 1, 'if box["done"]:')
        self.emit(ind + 2, "break")
        self.path_block(ind + 1, replace(ctx, exits_ok=True), depth)
        self.loop_else(ind, ctx)

    def wrap_if(self, ind: int, ctx: _Ctx, depth: int) -> None:
        shape = self.pick(["if", "else", "elif"])
        if shape == "if":
            self.emit(ind, 'if box["yes"]:')
            self.path_block(ind + 1, ctx, depth)
            if self.flag():
                self.emit(ind, "else:")
                self.filler(ind + 1, ctx, 1)
            return
        self.emit(ind, 'if box["no"]:')
        self.filler(ind + 1, ctx, 1)
        if shape == "else":
            self.emit(ind, "else:")
            self.path_block(ind + 1, ctx, depth)
        else:
            self.emit(ind, 'elif box["yes"]:')
            self.path_block(ind + 1, ctx, depth)
            if self.flag():
                self.emit(ind, "else:")
                self.filler(ind + 1, ctx, 1)

    # Filler: statements that end, around the path (calls allowed: they never run during the spin).

    def filler(self, ind: int, ctx: _Ctx, depth: int) -> None:
        kinds = ["inc", "comp", "range_loop", "count_loop", "while_zero"]
        if depth < 2:
            kinds += ["try", "with", "if", "try", "with"]
        if ctx.exits_ok:
            kinds.append("dead_exit")
        kind = self.pick(kinds)
        if kind == "inc":
            self.emit(ind, 'box["m"] += 1')
        elif kind == "comp":
            self.emit(ind, 'box["r"] = [y for y in range(3) if y]')
        elif kind == "range_loop":
            self.emit(ind, "for y in range(2):")
            self.emit(ind + 1, 'box["m"] += 1')
        elif kind == "count_loop":
            k = next(self.ids)
            self.emit(ind, f"for x{k} in itertools.count():")
            self.emit(ind + 1, f"if x{k} > 1:")
            self.emit(ind + 2, "break")
        elif kind == "while_zero":
            self.emit(ind, 'while box["m"] < 0:')
            self.emit(ind + 1, 'box["m"] += 1')
        elif kind == "dead_exit":
            self.emit(ind, 'if box["no"]:')
            self.emit(ind + 1, self.pick(["break", "continue"]))
        elif kind == "try":
            k = next(self.ids)
            self.emit(ind, "try:")
            self.filler(ind + 1, ctx, depth + 1)
            clauses = [self.pick(sorted(CLASSES)) for _ in range(self.draw(st.integers(0, 1)))]
            for j, cls in enumerate(clauses):
                self.emit(ind, f"except {cls}:")
                self.emit(ind + 1, f'box["rec"]("caught@{k}.{j}")')
                self.emit(ind + 1, self.pick(["pass", "raise"]))
            if not clauses or self.flag():
                self.emit(ind, "finally:")
                self.emit(ind + 1, f'box["rec"]("finally@{k}")')
        elif kind == "with":
            self.emit(ind, f'with box["cm"]("exit@{next(self.ids)}"):')
            self.filler(ind + 1, ctx, depth + 1)
        else:
            self.emit(ind, self.pick(['if box["no"]:', 'if box["yes"]:']))
            self.filler(ind + 1, ctx, depth + 1)
            if self.flag():
                self.emit(ind, "else:")
                self.filler(ind + 1, ctx, depth + 1)

    # The spin loop.

    def spin(self, ind: int, ctx: _Ctx) -> None:
        self.expected = lexical_outcome(ctx.effects)
        first = len(self.lines) + 1
        kind = self.pick(["while_go", "while_true"] if self.focus else ["while_go", "for", "while_true", "comp"])
        if kind == "comp":
            expr = self.pick(COMPREHENSIONS)
            self.emit(ind, self.pick([f'box["r"] = {expr}', expr] + ([f"return {expr}"] if ctx.return_ok else [])))
        else:
            self.spin_is_for, self.spin_return_ok = kind == "for", ctx.return_ok
            body = self.spin_stmts(0, self.spin_is_for)
            if kind == "while_true":  # left by its ``break`` once a handler saw the interrupt (no re-entry)
                stop = _first_stop(body)
                body.insert(self.draw(st.integers(0, len(body) if stop is None else stop)), ("gocheck",))
            if kind != "for" and not _increments(body):  # the helper thread watches box["n"]
                body.insert(0, ("inc",))
            self.emit(ind, {"while_go": 'while box["go"]:', "while_true": "while True:",
                            "for": 'for i in box["counter"]:'}[kind])
            self.emit_spin(ind + 1, body)
            if kind != "while_true" and self.flag():
                self.emit(ind, "else:")
                self.emit(ind + 1, 'box["m"] = 1')
        self.spin_lines = (first, len(self.lines))

    def spin_stmts(self, depth: int, is_for: bool, plain: bool = False) -> list:
        return [self.spin_stmt(depth, is_for, plain) for _ in range(self.draw(st.integers(1, 3)))]

    def spin_stmt(self, depth: int, is_for: bool, plain: bool = False) -> tuple:
        """A statement of the spin body. ``plain``: inside its inner loop or ``try`` (no more of those, so
        that every back-edge of the spin lies directly in the spin loop)."""
        dead = ["no", "nneg"] + (["ineg"] if is_for else [])
        kinds = ["inc", "dead_if", "continue_if", "dead_break", "dead_continue", "pass", "continue_if"]
        if depth < 2:
            kinds.append("if_else")
            if not plain:
                kinds += ["try", "inner"]
        kind = self.pick(kinds)
        if kind == "inc":
            return ("inc",)
        if kind == "pass":
            return ("pass",)
        if kind == "try":  # its handlers run only for an interrupt that lands in them
            ends = ["raise", "break"] + (["return"] if self.spin_return_ok else [])
            clauses = [(self.pick(sorted(CLASSES)), self.pick(ends)) for _ in range(self.draw(st.integers(1, 2)))]
            return ("try", self.spin_stmts(depth + 1, is_for, True), clauses, next(self.ids))
        if kind == "inner":  # a loop that ends, in the spin's body: its back-edges are the spin's too
            return ("loop", self.spin_stmts(depth + 1, is_for, True))
        if kind == "dead_if":
            inner = self.spin_stmts(depth + 1, is_for, plain) if depth < 2 and self.flag() else [("set",)]
            return ("if", self.pick(dead), inner, None)
        if kind == "continue_if":
            return ("if", self.pick(["yes", "odd"]), ([("inc",)] if self.flag() else []) + [("continue",)], None)
        if kind in ("dead_break", "dead_continue"):
            return ("if", self.pick(dead), [("break",) if kind == "dead_break" else ("continue",)], None)
        return ("if", self.pick(["yes", "odd"] + dead), self.spin_stmts(depth + 1, is_for, plain),
                self.spin_stmts(depth + 1, is_for, plain))

    def emit_spin(self, ind: int, stmts: list) -> None:
        for s in stmts:
            if s[0] == "inc":
                self.emit(ind, 'box["n"] += 1')
            elif s[0] == "set":
                self.emit(ind, 'box["m"] = 1')
            elif s[0] in ("pass", "break", "continue"):
                self.emit(ind, s[0])
            elif s[0] == "gocheck":
                self.emit(ind, 'if not box["go"]:')
                self.emit(ind + 1, "break")
            elif s[0] == "try":
                _, body, clauses, k = s
                self.emit(ind, "try:")
                self.emit_spin(ind + 1, body)
                for j, (cls, end) in enumerate(clauses):
                    self.emit(ind, f"except {cls}:")
                    self.emit(ind + 1, f'box["rec"]("caught@{k}.{j}")')
                    self.emit(ind + 1, end)
            elif s[0] == "loop":
                self.emit(ind, 'for j in box["pair"]:')
                self.emit_spin(ind + 1, s[1])
            else:
                _, cond, then, other = s
                text = "i % 2" if cond == "odd" and self.spin_is_for else CONDITIONS[cond][0]
                self.emit(ind, f"if {text}:")
                self.emit_spin(ind + 1, then)
                if other is not None:
                    self.emit(ind, "else:")
                    self.emit_spin(ind + 1, other)


def _runs(stmts: list) -> list[tuple[list[str], bool]]:
    """Every way one spin iteration can go through ``stmts``: (the inc/gocheck statements it runs, whether
    it stops there at a ``continue``). Constant conditions take one branch, alternating ones both."""
    runs: list[tuple[list[str], bool]] = [([], False)]
    for s in stmts:
        step: list[tuple[list[str], bool]] = []
        for done, stopped in runs:
            if stopped:
                step.append((done, True))
                continue
            for more, stops in _runs_of(s):
                step.append((done + more, stops))
        runs = step
    return runs


def _runs_of(s: tuple) -> list[tuple[list[str], bool]]:
    if s[0] in ("inc", "gocheck"):
        return [([s[0]], False)]
    if s[0] == "continue":
        return [([], True)]
    if s[0] == "break":
        raise AssertionError("a spin's break runs")
    if s[0] == "try":
        return _runs(s[1])
    if s[0] == "loop":  # its continue ends its own iteration, not the spin's
        return [(done, False) for done, _stopped in _runs(s[1])]
    if s[0] == "if":
        _, cond, then, other = s
        value = CONDITIONS[cond][1]
        branches = [then, other] if value is None else [then] if value else [other]
        return [r for b in branches for r in _runs(b or [])]
    return [([], False)]


def _first_stop(stmts: list) -> int | None:
    """The index of the first top-level statement after which an iteration may go no further."""
    for n, s in enumerate(stmts):
        if any(stops for _, stops in _runs_of(s)):
            return n
    return None


def _increments(stmts: list) -> bool:
    return all("inc" in done for done, _ in _runs(stmts))


@st.composite
def programs(draw, max_depth: int = 4, focus: bool = False) -> Program:
    """A program; ``focus``: its spin is a ``while`` loop and the first statement of a ``try`` body, the
    shape whose ``continue`` escapes on 3.11 and 3.12 (which 1% of unfocused programs have there)."""
    w = _Writer(draw, max_depth, focus)
    w.path_block(1, _Ctx(), 0)
    assert w.expected is not None
    return Program("\n".join(w.lines) + "\n", w.expected, w.spin_lines)


# -- running them ----------------------------------------------------------------------------------------

def _progress(box: dict) -> int:
    return max(box["n"], int(repr(box["counter0"])[6:-1]))


def _innermost(exc: BaseException) -> tuple[types.CodeType, int, int | None]:
    tb = exc.__traceback__
    assert tb is not None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code, tb.tb_lasti, tb.tb_lineno


def new_box() -> dict:
    """The program's shared state. The first handler that sees the interrupt notes where it landed and
    stops every loop (the wrappers' ``done``, the spin's ``go`` and counter), so that control coming back
    to the spin after a catch leaves it."""
    counter = itertools.count()
    events: list[str] = []
    box: dict = {"go": True, "yes": True, "no": False, "done": False, "n": 0, "m": 0, "zero": 0,
                 "counter": counter, "counter0": counter, "pair": (0, 1), "events": events, "landing": None}

    def seen(exc: BaseException) -> None:
        if box["landing"] is None:
            box["landing"] = _innermost(exc)
        box["done"], box["go"], box["counter"] = True, False, iter(())

    def rec(label: str) -> None:  # an except or finally body: records a KeyboardInterrupt being handled
        exc = sys.exc_info()[1]
        if isinstance(exc, KeyboardInterrupt):
            seen(exc)
            events.append(label)

    class Exit:
        def __init__(self, label: str):
            self.label = label

        def __enter__(self) -> "Exit":
            return self

        def __exit__(self, typ: object, exc: object, tb: object) -> None:
            if isinstance(exc, KeyboardInterrupt):
                seen(exc)
                events.append(self.label)

    box["rec"], box["cm"] = rec, Exit
    return box


def _contained(call: Callable[[], Any]) -> Any:
    """``call()`` run in a generator of its own. An interrupt that escapes from inside an ``except`` body
    skips its ``POP_EXCEPT``, and the exception it was handling stays the thread's ``sys.exc_info()``
    after the call (seen on 3.11.7, 3.12.1 and 3.13.0); run so, that stays in the generator's exception state,
    and later programs (and Hypothesis replaying this one) start clean."""
    def body():
        yield call()
    return next(body())


def _codes(code: types.CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


#: Spin edges seen before the traced run stops the loop (each is taken every iteration or two).
_TRACED_EDGES = 60


def _prefixed(code: types.CodeType) -> dict[int, tuple[int, str]]:
    """Each offset's instruction (offset, opname); an EXTENDED_ARG's is the one it extends (3.11 reports
    the jump's opcode event at its EXTENDED_ARG)."""
    out: dict[int, tuple[int, str]] = {}
    pending: list[int] = []
    for i in dis.get_instructions(code):
        if i.opname == "EXTENDED_ARG":
            pending.append(i.offset)
            continue
        for o in pending + [i.offset]:
            out[o] = (i.offset, i.opname)
        pending = []
    return out


def spin_back_edges(f: types.FunctionType) -> set[tuple[types.CodeType, int, str]]:
    """The back-edges (code, offset, opname) the spin path takes: a traced run, stopped by a
    KeyboardInterrupt from the trace function once the loop has spun."""
    targets = set(_codes(f.__code__))
    instructions = {c: _prefixed(c) for c in targets}
    box = new_box()
    edges: set[tuple[types.CodeType, int, str]] = set()
    prev: dict = {}
    state = {"hits": 0, "events": 0, "stopped": False}
    instrumented: set = set()

    def local(frame, event, arg):
        if event != "opcode" or state["stopped"]:
            return local
        state["events"] += 1
        if state["events"] > 1_000_000:
            state["stopped"] = True
            raise RuntimeError("the traced run never spun")
        off, before = frame.f_lasti, prev.get(frame)
        prev[frame] = off
        if before is not None and off < before and _progress(box) > 20:
            edges.add((frame.f_code, *instructions[frame.f_code][before]))
            state["hits"] += 1
            if state["hits"] >= _TRACED_EDGES:
                state["stopped"] = True
                raise KeyboardInterrupt("traced run: stop the spin")
        return local

    def global_trace(frame, event, arg):
        if frame.f_code not in targets:
            return None
        frame.f_trace_opcodes = True
        frame.f_trace = local
        if sys.version_info[:2] == (3, 12) and frame.f_code not in instrumented:
            instrumented.add(frame.f_code)  # 3.12 starts opcode events once settrace is called again
            sys.settrace(global_trace)
        return local

    old = sys.gettrace()
    sys.settrace(global_trace)
    try:
        _contained(lambda: f(box))
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(old)
    assert state["hits"] >= _TRACED_EDGES, ("the traced run did not spin", state)
    return edges


def real_run(f: types.FunctionType) -> tuple[list[str], bool, tuple]:
    """Run ``f`` until a real interrupt (``_thread.interrupt_main``, fired once the loop has spun) lands:
    (the events, whether it reached the caller, where it landed: code, tb_lasti, line)."""
    box = new_box()

    def fire() -> None:
        while _progress(box) <= 1000:  # wait on observable state: the loop is spinning
            if box.get("abandon"):
                return
        _thread.interrupt_main()

    t = threading.Thread(target=fire, daemon=True)
    reached = False
    with python_sigint():
        t.start()
        try:
            _contained(lambda: f(box))
        except KeyboardInterrupt as e:
            reached = True
            if box["landing"] is None:
                box["landing"] = _innermost(e)
        finally:
            box["abandon"] = True
            t.join()
    assert box["landing"] is not None, "the function returned without an interrupt"
    return list(box["events"]), reached, box["landing"]


#: Instructions after which a frame goes on at a lower offset and the interpreter checks for signals.
_BACK_EDGE_OPS = {"JUMP_BACKWARD"} | ({"POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
                                      "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE"}
                                     if sys.version_info[:2] == (3, 11) else set())


def _back_edge_at(code: types.CodeType | None, lasti: int) -> int:
    """The back-edge a traceback's ``tb_lasti`` names: the jump itself; on 3.11, where a specialized
    compare-and-jump (``COMPARE_OP_INT_JUMP`` and the like) took the jump, the ``COMPARE_OP`` before it."""
    if code is None or sys.version_info[:2] != (3, 11):
        return lasti
    instructions = list(dis.get_instructions(code))
    for here, after in zip(instructions, instructions[1:]):
        if here.offset == lasti and here.opname == "COMPARE_OP" and after.opname in _BACK_EDGE_OPS:
            return after.offset
    return lasti


def _name(code: types.CodeType, offset: int) -> str:
    return f"{code.co_qualname}@{offset}"


def audited(f: types.FunctionType) -> set[tuple[types.CodeType, int]]:
    """The back-edges ``escaping_back_edges(f)`` flags, as (code object, offset): a report names its code
    by qualified name and the jump's line, which together with the offset find exactly one code."""
    codes = list(_codes(f.__code__))
    flagged = set()
    for e in escaping_back_edges(f):
        (code,) = [c for c in codes if c.co_qualname == e.function
                   and any(i.offset == e.offset and i.positions.lineno == e.line for i in dis.get_instructions(c))]
        flagged.add((code, e.offset))
    return flagged


def check(program: Program) -> dict:
    """Steps 2-4 for one program; returns what was seen."""
    ns: dict = {"itertools": itertools}
    exec(compile(program.source, "<generated>", "exec"), ns)
    f = ns["f"]
    flagged = audited(f)
    edges = spin_back_edges(f)
    assert edges and {op for _c, _o, op in edges} <= _BACK_EDGE_OPS, edges
    spin = {(c, o) for c, o, _op in edges}
    first, last = program.spin_lines
    for _attempt in range(3):
        events, reached, (code, lasti, line) = real_run(f)
        landing = (code, _back_edge_at(code, lasti))
        if landing in spin and (line is None or first <= line <= last):  # 3.11: some jumps have no line
            break
    else:
        raise AssertionError(f"the interrupt never landed on a spin back-edge: at {_name(*landing)} (line {line}), "
                             f"not one of {sorted(_name(*e) for e in spin)}\n{program.source}")
    observed_escape = (events, reached) != program.expected
    detail = "\n".join([f"Python {sys.version}", program.source,
                        f"audit flags: {sorted(_name(*e) for e in flagged)}",
                        f"spin back-edges: {sorted(_name(c, o) + ' ' + op for c, o, op in edges)}",
                        f"landed at: {_name(*landing)} (line {line})",
                        f"observed (events, reached the caller): {(events, reached)}",
                        f"lexically: {program.expected}"])
    # The landing back-edge is known: the audit's word on it is the outcome.
    assert observed_escape == (landing in flagged), detail
    # What holds without knowing the landing back-edge.
    spin_flags = {e in flagged for e in spin}
    if observed_escape:
        assert True in spin_flags, detail
    if spin_flags == {True}:
        assert observed_escape, detail
    return {"escape": observed_escape, "edges": edges, "landing": landing, "flagged": bool(flagged)}


# Deterministic (derandomized, no example database): the same programs on every run of a given Python
# and Hypothesis. About 20 ms a program, most of it the real run's wait for the helper thread.

@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(programs())
def test_the_audit_predicts_real_interrupts_in_generated_programs(program):
    check(program)


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(programs(focus=True))
def test_the_audit_predicts_real_interrupts_in_generated_while_loops_that_open_their_block(program):
    check(program)


@pytest.mark.slow
@settings(max_examples=2000, derandomize=True, database=None, deadline=None)
@given(st.booleans().flatmap(lambda focus: programs(max_depth=5, focus=focus)))
def test_the_audit_predicts_real_interrupts_in_generated_programs_sweep(program):
    check(program)
