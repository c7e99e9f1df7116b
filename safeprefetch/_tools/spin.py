"""The SPIN cross-check: every Promela twin must reach safeprefetch's verdict.

Theory of operation
-------------------
A second, independent model checker is the cheapest way to catch a bug in
the first one. For a handful of catalog models, ``models/spin/NAME.pml`` is a
hand-written Promela *twin* of ``models/NAME.py`` at one fixed configuration,
written in its header::

    // config: producers=1 consumers=2 capacity=1 items=2

``python -m safeprefetch crosscheck [--json] [MODEL...]`` runs, per twin:

* safeprefetch, twice: :func:`safeprefetch.check` at that configuration
  (the verdict, the shortest trace, the states of the default search), and
  an exhaustive :class:`Explorer` that does not stop at the first violation
  and applies no reduction (the full count of distinct states);
* the real SPIN, in a temporary directory: ``spin -o1 -o2 -a NAME.pml``,
  ``pan.c`` compiled twice with gcc -- ``-DSAFETY`` (partial-order reduction
  on) and ``-DSAFETY -DNOREDUCE`` -- and each ``./pan -c0`` run to the end,
  so both report the whole state space and every kind of error in it.

It parses pan's report (``N states, stored``, ``N states, matched``,
``N transitions``, ``errors: N``, ``pan:1: invalid end state``,
``pan:1: assertion violated ...``; counts may be in exponent form) and
compares verdicts through :data:`SPIN_CATEGORY`: every hang safeprefetch
tells apart (deadlock, lost wakeup, shutdown hang) is one thing to SPIN, a
process stuck outside an end state; every safety violation is an assertion.
A twin *agrees* when both pan runs searched to the end and report exactly
the error kinds safeprefetch's full search meets, mapped (none, for ok), and
the -DNOREDUCE run stored as many states as safeprefetch's full search, or
more where an assertion fails (below): a verdict found by both tools in
state spaces of different sizes is a twin of another configuration, and an
error SPIN reports beyond the expected one is a disagreement too
(:attr:`CrossCheck.disagreement` says which).

How the twins mirror the models
-------------------------------
The twins are written so that state counts can be compared, not only
verdicts. Each safeprefetch step is one ``atomic`` (SPIN stores no state
inside it), labelled like the step; a step that only chooses the next label
is an ``if`` whose guard is the transition. A Mesa ``wait`` is two
transitions, as in the kernel: release-and-enqueue, then re-acquire once a
notify has set the thread's ``woken`` bit (the kernel's ``(woken)`` program
counter). The wait queue is a Promela channel of thread ids, so FIFO
``notify_one`` is a receive. A finished thread parks at ``end_done: (false)``,
a valid end state that keeps its locals, like the kernel's ``done``; letting
the process terminate would add SPIN's extra process-removal step. The twins
encode the default semantics (``notify=fifo``, ``spurious=off``).

``-o1 -o2`` turn off SPIN's dataflow optimisations and its hiding of
write-only variables: safeprefetch keeps every declared variable in its
state, and so must the twin for the counts to be comparable. With those
flags, the -DNOREDUCE count equals safeprefetch's full count for every twin
that never violates an assertion; where one does, SPIN (with ``-c0``) keeps
exploring past the failed assertion while safeprefetch stops at the
violating step or state, so SPIN stores more. ``docs/spin.md`` has the table.

Open question: the twins are written by hand. Generating them from the
compiled :class:`Machine` would make the agreement a test of the kernel
alone; writing them by hand also tests the model's reading of its source.
"""

from __future__ import annotations

import argparse
import inspect
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .catalog import load_model
from .jsonout import emit_json
from .._check.explore import Explorer, check
from .._dsl.model import ModelError

__all__ = [
    "INVALID_END_STATE",
    "ASSERTION_VIOLATED",
    "SPIN_CATEGORY",
    "CrossCheck",
    "PanResult",
    "SpinUnavailable",
    "Twin",
    "crosscheck",
    "find_twins",
    "format_markdown",
    "format_table",
    "parse_config_header",
    "parse_pan_output",
    "register",
    "run_pan",
]

#: SPIN's name for a state in which some process is blocked outside an end state.
INVALID_END_STATE = "invalid end state"
#: SPIN's name for a failed ``assert``.
ASSERTION_VIOLATED = "assertion violated"

#: safeprefetch verdict -> what SPIN reports for the same bug (``"ok"``: errors: 0).
#: SPIN has one notion of a hang; safeprefetch splits it by diagnosis. Every
#: safety property of a model is an ``assert`` in its twin. ``starvation`` has
#: no entry: it needs a progress cycle check (-DNP), which the twins do not use.
SPIN_CATEGORY: Mapping[str, str] = {
    "ok": "ok",
    "deadlock": INVALID_END_STATE,
    "lost_wakeup": INVALID_END_STATE,
    "shutdown_hang": INVALID_END_STATE,
    "overflow": ASSERTION_VIOLATED,
    "underflow": ASSERTION_VIOLATED,
    "invariant": ASSERTION_VIOLATED,
    "lost_item": ASSERTION_VIOLATED,
    "duplicate_item": ASSERTION_VIOLATED,
    "out_of_order": ASSERTION_VIOLATED,
    "use_after_close": ASSERTION_VIOLATED,
    "error_lost": ASSERTION_VIOLATED,
}

#: spin's flags when generating the verifier: no dataflow optimisation (-o1),
#: no hiding of write-only variables (-o2). See the module essay.
SPIN_FLAGS = ("-o1", "-o2")
#: gcc flags: the twins are tiny, so compile time dominates and -O0 is fastest overall.
GCC_FLAGS = ("-O0", "-w")
#: pan's search depth bound (-m). A twin's deepest path is in the tens of steps;
#: a million leaves room for much larger twins, and pan says so if it is exceeded.
PAN_DEPTH = 1_000_000
#: pan's hash table size, 2**N slots (-wN): 4M slots is ample for these twins.
PAN_HASH = 22
#: Seconds allowed for each external command.
COMMAND_TIMEOUT = 300


class SpinUnavailable(Exception):
    """``spin`` or ``gcc`` is not installed (the crosscheck command exits 2)."""


# --------------------------------------------------------------------------
# Twins
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Twin:
    """One Promela twin of a catalog model."""

    #: The catalog model's name (the file's stem).
    name: str
    #: The Promela source.
    source: str
    #: The configuration the twin encodes, from its ``// config:`` header (raw strings).
    config: Mapping[str, str]


_CONFIG_RE = re.compile(r"^\s*//\s*config:(.*)$", re.MULTILINE)


def parse_config_header(source: str) -> dict[str, str]:
    """``// config: capacity=2 workers=2`` -> ``{"capacity": "2", "workers": "2"}``.

    Values stay strings; :meth:`Model.configure` converts them ("on" -> True).
    """
    m = _CONFIG_RE.search(source)
    if m is None:
        raise ModelError("a SPIN twin needs a '// config: NAME=VALUE ...' header line")
    config: dict[str, str] = {}
    for item in m.group(1).split():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ModelError(f"bad item {item!r} in the twin's config header (expected NAME=VALUE)")
        config[name] = value
    return config


def _twin_files() -> dict[str, Any]:
    from importlib.resources import files

    root = files("safeprefetch.models").joinpath("spin")
    if not root.is_dir():
        return {}
    return {p.name[:-4]: p for p in root.iterdir() if p.name.endswith(".pml")}


def find_twins(names: Sequence[str] | None = None) -> list[Twin]:
    """The bundled twins, sorted by name (only ``names``, if given)."""
    available = _twin_files()
    if names:
        unknown = [n for n in names if n not in available]
        if unknown:
            raise ModelError(f"no SPIN twin for {', '.join(unknown)} (twins: {', '.join(sorted(available))})")
        chosen = list(dict.fromkeys(names))
    else:
        chosen = sorted(available)
    twins = []
    for name in chosen:
        source = available[name].read_text()
        twins.append(Twin(name, source, parse_config_header(source)))
    return twins


# --------------------------------------------------------------------------
# pan's report
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class PanResult:
    """What one ``./pan`` run reported."""

    #: ``N states, stored``.
    stored: int
    #: ``N states, matched``.
    matched: int
    #: ``N transitions``.
    transitions: int
    #: ``errors: N``.
    errors: int
    #: The distinct error kinds, in the order pan first printed them
    #: ("invalid end state", "assertion violated", ...).
    kinds: tuple[str, ...] = ()
    #: The first error line, verbatim (``pan:1: ...``), or None.
    first_error: str | None = None
    #: ``depth reached N``.
    depth: int = 0
    #: pan did not search to the end: its depth bound (-m), or out of memory ("Search not completed").
    truncated: bool = False

    @property
    def verdict(self) -> str:
        """``"ok"`` or the error kinds joined by ``+``."""
        return "ok" if self.errors == 0 else "+".join(self.kinds) or "error"


def _count(text: str, pattern: str, what: str) -> int:
    m = re.search(pattern, text, re.MULTILINE)
    if m is None:
        raise ValueError(f"pan's output has no '{what}' line")
    return int(round(float(m.group(1))))


_NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"
_ERROR_RE = re.compile(r"^pan:\d+:\s*(.*?)\s*$", re.MULTILINE)


def _error_kind(message: str) -> str:
    message = re.sub(r"\s*\(at depth \d+\)\s*$", "", message)
    for kind in (ASSERTION_VIOLATED, INVALID_END_STATE, "acceptance cycle", "non-progress cycle"):
        if message.startswith(kind):
            return kind
    return message


def parse_pan_output(text: str) -> PanResult:
    """Parse a pan report. Raises ValueError if it is not one."""
    kinds: list[str] = []
    first = None
    for m in _ERROR_RE.finditer(text):
        if first is None:
            first = m.group(0).strip()
        kind = _error_kind(m.group(1))
        if kind not in kinds:
            kinds.append(kind)
    depth = re.search(r"depth reached (\d+)", text)
    return PanResult(
        stored=_count(text, rf"^\s*{_NUM} states, stored", "states, stored"),
        matched=_count(text, rf"^\s*{_NUM} states, matched", "states, matched"),
        transitions=_count(text, rf"^\s*{_NUM} transitions", "transitions"),
        errors=_count(text, rf"errors:\s*{_NUM}", "errors:"),
        kinds=tuple(kinds),
        first_error=first,
        depth=int(depth.group(1)) if depth else 0,
        truncated=any(sign in text for sign in _INCOMPLETE),
    )


#: What pan prints when its search stopped before the end.
_INCOMPLETE = ("max search depth too small", "Search not completed", "out of memory")


def _tools() -> tuple[str, str]:
    spin, gcc = shutil.which("spin"), shutil.which("gcc")
    missing = [name for name, path in (("spin", spin), ("gcc", gcc)) if path is None]
    if missing:
        raise SpinUnavailable(f"{' and '.join(missing)} not found on PATH; the cross-check needs both "
                              "(Debian/Ubuntu: apt-get install spin gcc)")
    return spin, gcc  # type: ignore[return-value]


def _run(cmd: Sequence[str], cwd: Path, what: str, check_rc: bool = True) -> str:
    try:
        done = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{what} timed out after {COMMAND_TIMEOUT} s") from None
    if check_rc and done.returncode != 0:
        detail = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        raise RuntimeError(f"{what} failed: {detail[0] if detail else f'exit code {done.returncode}'}")
    return done.stdout + done.stderr


def run_pan(twin: Twin) -> tuple[PanResult, PanResult]:
    """Generate, compile and run the verifier of ``twin``: (with POR, with -DNOREDUCE)."""
    spin, gcc = _tools()
    with tempfile.TemporaryDirectory(prefix=f"safeprefetch-spin-{twin.name}-") as tmp:
        work = Path(tmp)
        pml = work / f"{twin.name}.pml"
        pml.write_text(twin.source)
        _run([spin, *SPIN_FLAGS, "-a", pml.name], work, f"spin -a {pml.name}")
        if not (work / "pan.c").exists():
            raise RuntimeError(f"spin -a {pml.name} wrote no pan.c")
        results = []
        for exe, defines in (("pan", ("-DSAFETY",)), ("pan_noreduce", ("-DSAFETY", "-DNOREDUCE"))):
            _run([gcc, *GCC_FLAGS, *defines, "-o", exe, "pan.c"], work, f"gcc {' '.join(defines)} pan.c")
            # pan's exit code is not a verdict; its report is.
            out = _run([f"./{exe}", f"-m{PAN_DEPTH}", f"-w{PAN_HASH}", "-c0"], work, exe, check_rc=False)
            try:
                results.append(parse_pan_output(out))
            except ValueError as e:
                raise RuntimeError(f"{exe} on {twin.name}: {e}") from None
        return results[0], results[1]


# --------------------------------------------------------------------------
# The cross-check
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class CrossCheck:
    """One twin checked by both tools."""

    #: The model (and twin) name.
    model: str
    #: The full configuration safeprefetch checked.
    config: Mapping[str, Any]
    #: safeprefetch's verdict (shortest violation, or "ok").
    verdict: str
    #: Length of safeprefetch's shortest counterexample (None when ok: there is no trace).
    trace_length: int | None
    #: Distinct states of the full search: no reduction, not stopped at the first violation.
    states: int
    #: States stored by the default ``check`` (its reductions on, stopped at the first violation).
    check_states: int
    #: pan with partial-order reduction.
    por: PanResult
    #: pan built with -DNOREDUCE.
    noreduce: PanResult
    #: Wall-clock seconds for this twin (both tools).
    seconds: float = 0.0
    #: What SPIN should report for ``verdict`` (see SPIN_CATEGORY).
    spin_expected: str = field(default="")
    #: Every kind of violation safeprefetch's full search met, as SPIN names it (empty when ok).
    spin_kinds: tuple[str, ...] = ()

    @property
    def disagreement(self) -> str | None:
        """Why the two tools do not agree on this twin, or None when they do."""
        for name, run in (("pan", self.por), ("pan -DNOREDUCE", self.noreduce)):
            if run.truncated:
                return f"{name} did not search to the end"
            if set(run.kinds) != set(self.spin_kinds) or (run.errors == 0) != (not self.spin_kinds):
                ours = ", ".join(self.spin_kinds) or "no error"
                return f"{name} reports {', '.join(run.kinds) or 'no error'}; safeprefetch's full search {ours}"
        if self.spin_expected not in self.spin_kinds and self.spin_expected != "ok":
            return f"safeprefetch's verdict {self.verdict!r} is not among its full search's kinds"
        stored, states = self.noreduce.stored, self.states
        if stored != states and not (ASSERTION_VIOLATED in self.spin_kinds and stored > states):
            return (f"pan -DNOREDUCE stored {stored} states, safeprefetch's full search {states}: the twin is not "
                    "the model at this configuration")
        return None

    @property
    def agree(self) -> bool:
        return self.disagreement is None

    def to_json(self) -> dict[str, Any]:
        def pan(r: PanResult) -> dict[str, Any]:
            return {"verdict": r.verdict, "errors": r.errors, "kinds": list(r.kinds), "first_error": r.first_error,
                    "stored": r.stored, "matched": r.matched, "transitions": r.transitions, "depth": r.depth,
                    "truncated": r.truncated}

        return {
            "model": self.model,
            "config": dict(self.config),
            "safeprefetch": {"verdict": self.verdict, "states": self.states, "check_states": self.check_states,
                             "trace_length": self.trace_length},
            "spin_expected": self.spin_expected,
            "spin": {"por": pan(self.por), "noreduce": pan(self.noreduce)},
            "agree": self.agree,
            "disagreement": self.disagreement,
            "seconds": round(self.seconds, 3),
        }


def _full_search(machine) -> tuple[int, tuple[str, ...]]:
    """The distinct states of the search without reduction that does not stop at a violation, and every kind
    of violation it met, as SPIN names them."""
    kwargs: dict[str, Any] = {"stop_at_first": False}
    if "reduce" in inspect.signature(Explorer).parameters:
        kwargs["reduce"] = "none"
    explorer = Explorer(machine, **kwargs)
    states = explorer.run().states
    return states, tuple(sorted({SPIN_CATEGORY.get(k, k) for k in explorer.kinds}))


def crosscheck(twin: Twin) -> CrossCheck:
    """Check ``twin``'s model with safeprefetch and its Promela with SPIN."""
    t0 = time.perf_counter()
    model = load_model(twin.name)
    machine = model.compile(twin.config)
    result = check(model, twin.config)
    if result.verdict not in SPIN_CATEGORY:
        raise ModelError(f"{twin.name}: verdict {result.verdict!r} has no SPIN counterpart")
    states, kinds = _full_search(machine)
    por, noreduce = run_pan(twin)
    return CrossCheck(
        model=twin.name,
        config=dict(machine.config),
        verdict=result.verdict,
        trace_length=len(result.trace) if result.violation else None,
        states=states,
        check_states=result.states,
        por=por,
        noreduce=noreduce,
        seconds=time.perf_counter() - t0,
        spin_expected=SPIN_CATEGORY[result.verdict],
        spin_kinds=kinds,
    )


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------


def _short_config(twin: Twin) -> str:
    return " ".join(f"{k}={v}" for k, v in twin.config.items())


def format_table(rows: Sequence[CrossCheck], twins: Sequence[Twin]) -> str:
    head = ["model", "config", "safeprefetch", "states", "SPIN", "stored (POR)", "stored (NOREDUCE)", "agree"]
    body = []
    for r, t in zip(rows, twins):
        body.append([r.model, _short_config(t), r.verdict, str(r.states), r.noreduce.verdict, str(r.por.stored),
                     str(r.noreduce.stored), "yes" if r.agree else "NO"])
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    numeric = {3, 5, 6}

    def line(cells):
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [line(head), line(["-" * w for w in widths])]
    out += [line(cells) for cells in body]
    return "\n".join(out)


def format_markdown(rows: Sequence[CrossCheck], twins: Sequence[Twin]) -> str:
    """The table of ``docs/spin.md``: deterministic (no timings), so a test can compare it."""
    out = ["| model | config | safeprefetch verdict | distinct states | SPIN verdict | SPIN stored (POR) "
           "| SPIN stored (-DNOREDUCE) | agree |",
           "|---|---|---|---:|---|---:|---:|---|"]
    for r, t in zip(rows, twins):
        out.append(f"| {r.model} | {_short_config(t)} | {r.verdict} | {r.states} | {r.noreduce.verdict} "
                   f"| {r.por.stored} | {r.noreduce.stored} | {'yes' if r.agree else 'NO'} |")
    return "\n".join(out)


def _cmd_crosscheck(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    twins = find_twins(args.models)
    if not twins:
        raise ModelError("no SPIN twins are installed (expected safeprefetch/models/spin/*.pml)")
    from .cliargs import UsageError

    try:
        _tools()
    except SpinUnavailable as e:  # (main reports it: one line, exit 2, and under --json a document)
        raise UsageError(str(e)) from None
    rows = []
    for twin in twins:
        try:
            rows.append(crosscheck(twin))
        except (RuntimeError, ValueError) as e:
            raise UsageError(f"{twin.name}: {e}") from None
    seconds = time.perf_counter() - t0
    agreeing = sum(r.agree for r in rows)
    if args.json:
        emit_json([r.to_json() for r in rows])
    elif args.markdown:
        print(format_markdown(rows, twins))
    else:
        print(format_table(rows, twins))
        for r in rows:
            if not r.agree:
                print(f"{r.model}: {r.disagreement}")
        print(f"{agreeing}/{len(rows)} twins agree with SPIN ({seconds:.1f} s; "
              f"states: safeprefetch, full search without reduction)")
    return 0 if agreeing == len(rows) else 1


def register(sub) -> dict[str, Any]:
    """Add ``crosscheck`` to the CLI's subparsers."""
    p = sub.add_parser("crosscheck", help="check the Promela twins with SPIN and compare verdicts")
    p.add_argument("models", nargs="*", metavar="MODEL", help="twins to check (default: all)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--markdown", action="store_true", help="print the table of docs/spin.md")
    return {"crosscheck": _cmd_crosscheck}
