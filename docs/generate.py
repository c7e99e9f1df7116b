"""Generate safeprefetch's docs from the models and the tool's own output.

    python docs/generate.py            # rewrite docs/ in place
    python docs/generate.py OUTDIR     # write the same files elsewhere

Nothing in the pages below is typed by hand twice. Each model page is
assembled from the model's docstring, the checker's verdict, the text trace
table and the SVG swimlane (both computed by replaying the shortest trace),
each program's graph (drawn from its ``next``/``to=`` declarations), the
fix re-checked at the same configuration, and a diff of the two model
sources. ``semantics.md`` runs every condvar model under all four condvar
semantics, and every model with progress steps under each fairness setting. The tutorial in ``index.md`` is real code: the generator runs it
and pastes the output, and ``tests/test_docs.py`` extracts it and runs it
again.

The output is deterministic -- no timings, no absolute paths, catalog
order -- so ``tests/test_docs.py`` regenerates everything into a temporary
directory and fails if a committed page differs: the docs cannot drift
from the tool. ``docs/spin.md`` is written by the SPIN cross-check, not
here; the index only links it.
"""

from __future__ import annotations

import io
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a source checkout
    sys.path.insert(0, str(ROOT))

from safeprefetch import catalog, check, load_model  # noqa: E402
from safeprefetch._check.explore import CheckResult, Trace, choice_step  # noqa: E402
from safeprefetch.model import VIOLATION_KINDS, Machine, Model  # noqa: E402
from safeprefetch._tools.svg import svg_for  # noqa: E402
from safeprefetch._tools.fix import fix_name, fix_report, source_diff  # noqa: E402
from safeprefetch._tools.modeldoc import model_doc  # noqa: E402
from safeprefetch._tools.play import Play, choice_numbers  # noqa: E402
from safeprefetch._tools.plaintext import config_text, programs_text, sentence, trace_table  # noqa: E402
from safeprefetch._check.trace import render_result  # noqa: E402

__all__ = ["SEMANTICS", "generate", "render_all", "semantics_rows", "uses_condvars"]

#: The four condvar semantics, default first.
SEMANTICS = (("fifo", "off"), ("any", "off"), ("fifo", "on"), ("any", "on"))

#: When each violation kind holds. The generator refuses to run if the
#: kernel knows a kind this table does not explain.
CHECKS = {
    "deadlock": "a state in which no thread can step and not every thread is done (and neither of the two "
                "refinements below applies)",
    "lost_wakeup": "such a stuck state in which a thread sleeps on a condvar although the predicate it declared "
                   "(`until=`) already holds, and no notify reached that condvar since the predicate became true",
    "shutdown_hang": "such a stuck state reached after close, an error or an abandon was requested (the model "
                     "declares when, with `shutdown_when`)",
    "overflow": "a count exceeds its capacity (a model invariant of kind `overflow`), or a semaphore is "
                "released past its bound",
    "underflow": "a take finds no item (a step calls `violate(\"underflow\", ...)`), or a count goes below zero",
    "lost_item": "at the end, an item that was produced was never received",
    "duplicate_item": "at the end, an item was received twice, or received without being produced",
    "out_of_order": "at the end, an ordered stream delivered items out of order",
    "use_after_close": "a put or get that the close contract forbids succeeded",
    "error_lost": "a source error never reached the consumer",
    "starvation": "a cycle the scheduling policy allows (the model's priority policy, if any), fair under the "
                  "`fairness` setting (weak by default, or strong) and without spurious wakeups, in which some "
                  "thread never makes a progress step",
    "invariant": "any other model-declared invariant fails (e.g. a slot written while leased), or a thread "
                 "releases a mutex it does not hold, or waits on or notifies a condvar without holding its "
                 "mutex (`m.condvar(name, notify_unlocked=True)` declares a C++ one, which may be notified "
                 "without it)",
}

_SETTING_PHRASE = {
    ("fifo", "off"): "FIFO notify without spurious wakeups",
    ("any", "off"): "notify=any",
    ("fifo", "on"): "spurious wakeups",
    ("any", "on"): "notify=any with spurious wakeups",
}

#: Steps of the complete run drawn for a reference design. A reference run
#: of the catalog defaults finishes in well under this; the cap only keeps
#: a design that can loop forever (a retry loop) from drawing forever.
RUN_CAP = 400


# --------------------------------------------------------------------------
# Data: what the pages say, computed.
# --------------------------------------------------------------------------


def uses_condvars(machine: Machine) -> bool:
    """True when some step of ``machine`` waits on or notifies a condvar."""
    return any(info.kind in ("wait", "timed_wait", "notify_one", "notify_all")
               for infos in machine.infos for info in infos.values())


def semantics_rows(models: Mapping[str, type[Model]]) -> list[tuple[str, dict[tuple[str, str], CheckResult]]]:
    """For every condvar model, its check result under each of :data:`SEMANTICS`."""
    rows = []
    for name, model in models.items():
        if not uses_condvars(model.compile({})):
            continue
        cells = {}
        for notify, spurious in SEMANTICS:
            cells[(notify, spurious)] = check(model.compile({"notify": notify, "spurious": spurious}))
        rows.append((name, cells))
    return rows


def _cell(r: CheckResult) -> str:
    text = "ok" if r.verdict == "ok" else f"{r.verdict}, {len(r.trace)} steps"
    return text if r.exhaustive else text + " (bounded)"


def _depends(f: Mapping[tuple[str, str], Any]) -> tuple[bool, bool]:
    """Whether ``f`` (a value per semantics) changes with the notify order, and with spurious wakeups."""
    notify = any(f[("fifo", sp)] != f[("any", sp)] for sp in ("off", "on"))
    spurious = any(f[(nt, "off")] != f[(nt, "on")] for nt in ("fifo", "any"))
    return notify, spurious


def semantics_sentence(cells: Mapping[tuple[str, str], CheckResult]) -> str:
    """One sentence on how the verdict moves across the four semantics, derived from the results."""
    v = {k: r.verdict for k, r in cells.items()}
    n = {k: len(r.trace) for k, r in cells.items()}
    base = ("fifo", "off")
    if len(set(v.values())) == 1:
        if v[base] == "ok":
            return "Correct under every semantics."
        if len(set(n.values())) == 1:
            return f"The same `{v[base]}` under every semantics."
        by_notify, by_spurious = _depends(n)
        if by_spurious and not by_notify:
            other = n[("fifo", "on")]
            return (f"The same `{v[base]}` under every semantics; spurious wakeups "
                    f"{'shorten' if other < n[base] else 'lengthen'} the counterexample from {n[base]} "
                    f"to {other} steps.")
        if by_notify and not by_spurious:
            other = n[("any", "off")]
            return (f"The same `{v[base]}` under every semantics; notify=any "
                    f"{'shortens' if other < n[base] else 'lengthens'} the counterexample from {n[base]} "
                    f"to {other} steps.")
        return (f"The same `{v[base]}` under every semantics; the shortest counterexample has "
                + ", ".join(f"{n[k]} steps with {_SETTING_PHRASE[k]}" for k in SEMANTICS) + ".")
    if v[base] == "ok":
        any_bad, sp_bad, both_bad = v[("any", "off")] != "ok", v[("fifo", "on")] != "ok", v[("any", "on")] != "ok"
        if any_bad and not sp_bad:
            return f"Correct only if notify_one is FIFO: with notify=any it fails with `{v[('any', 'off')]}`."
        if sp_bad and not any_bad:
            return f"Breaks under spurious wakeups (`{v[('fifo', 'on')]}`), whatever the notify order."
        if any_bad and sp_bad:
            return (f"Correct only with FIFO notify and no spurious wakeups: notify=any gives "
                    f"`{v[('any', 'off')]}`, spurious wakeups give `{v[('fifo', 'on')]}`.")
        return (f"Correct under each relaxation alone, but fails with `{v[('any', 'on')]}` when notify=any "
                f"and spurious wakeups combine.")
    by_notify, by_spurious = _depends(v)
    if by_spurious and not by_notify:
        other = v[("fifo", "on")]
        return (f"`{v[base]}` without spurious wakeups, "
                + ("but ok with them" if other == "ok" else f"`{other}` with them")
                + ", whatever the notify order.")
    if by_notify and not by_spurious:
        other = v[("any", "off")]
        return (f"`{v[base]}` with FIFO notify, " + ("but ok" if other == "ok" else f"`{other}`")
                + " with notify=any, with or without spurious wakeups.")
    return (f"`{v[base]}` by default; "
            + ", ".join(f"`{v[k]}` with {_SETTING_PHRASE[k]}" for k in SEMANTICS[1:]) + ".")


def round_robin_run(machine: Machine, cap: int = RUN_CAP) -> Trace:
    """A complete run, round-robin from the last thread down (deterministic).

    Consumers are usually declared after producers, so starting from the
    last thread makes them arrive first and wait: the run then shows the
    waits and notifies a design is made of, not just one thread at a time.
    """
    state = machine.init
    steps = []
    last = len(machine.thread_names)
    nthreads = len(machine.thread_names)
    while len(steps) < cap:
        succ = [(ch, nxt) for ch, nxt in machine.successors(state) if isinstance(nxt, tuple)]
        succ = [(ch, nxt) for ch, nxt in succ if machine.pc(state, ch[0]) not in machine.spurious_pcs[ch[0]]]
        if not succ:
            break
        (t, b), nxt = min(succ, key=lambda x: ((last - 1 - x[0][0]) % nthreads, x[0][1]))
        steps.append(choice_step(machine, state, (t, b)))
        state, last = nxt, t
    return Trace(tuple(steps))


# --------------------------------------------------------------------------
# Markdown helpers
# --------------------------------------------------------------------------


def _md(text: str | None) -> str:
    """Docstring prose as markdown: paragraphs re-joined, lists and indented blocks kept."""
    if not text:
        return ""
    out = []
    for para in re.split(r"\n[ \t]*\n", text.strip()):
        lines = para.splitlines()
        if any(re.match(r"^\s*([*-]|\d+\.)\s", line) for line in lines) or any(
                line.startswith(("    ", "\t")) for line in lines):
            out.append("\n".join(lines))
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def _cell_md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fence(text: str, lang: str = "text") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def _result_words(r: CheckResult) -> str:
    scope = "exhaustive" if r.exhaustive else "not exhaustive (state bound reached)"
    text = f"{r.verdict} ({r.states} states, {scope})"
    if r.violation is not None:
        text += f", shortest trace {len(r.trace)} steps"
    return text


def _source_path(model: type[Model]) -> str:
    import inspect

    return f"models/{Path(inspect.getsourcefile(model)).name}"


# --------------------------------------------------------------------------
# Pages
# --------------------------------------------------------------------------


def model_page(name: str, model: type[Model], sem: Mapping[tuple[str, str], CheckResult] | None,
               models: Mapping[str, type[Model]]) -> tuple[str, str]:
    """(markdown, svg) of one model's page."""
    doc = model_doc(model)
    machine = model.compile({})
    result = check(machine)
    reference = model.expected == "ok"
    out = [f"# {name}", ""]
    out += [f"*{'Reference design' if reference else 'Broken model'}.* {_md(sentence(doc.summary))}", ""]
    out += ["| | |", "|---|---|"]
    if doc.source:
        out.append(f"| source | {_cell_md(_md(sentence(doc.source)))} |")
    if doc.minimal_config:
        out.append(f"| minimal config | {_cell_md(_md(doc.minimal_config))} |")
    out.append(f"| expected verdict | `{model.expected}` |")
    out.append(f"| checked at | `{config_text(machine.config)}` |")
    mark = "" if result.verdict == model.expected else f" **(declared {model.expected})**"
    out.append(f"| checker verdict | `{result.verdict}`{mark}: {result.states} states, "
               f"{'exhaustive' if result.exhaustive else 'not exhaustive'} |")
    if result.violation is not None:
        out.append(f"| shortest trace | {len(result.trace)} steps |")
    out.append(f"| model source | [`{_source_path(model)}`](../../{_source_path(model)}) |")
    out.append("")

    if result.violation is not None:
        if doc.expected_detail:
            out += ["## What goes wrong", "", _md(doc.expected_detail), ""]
        out += ["## The shortest trace", "",
                "Found by breadth-first search over every interleaving, so no shorter schedule shows the bug. "
                "One column per thread; the last column says what each step changed.", "",
                _fence(trace_table(machine, result.trace, result.violation)), "",
                f"![Swimlane diagram of the shortest {name} trace]({name}.svg)", ""]
        svg = svg_for(machine, result.trace, result.violation)
    else:
        run = round_robin_run(machine)
        if doc.expected_detail:
            out += [_md(doc.expected_detail), ""]
        out += ["## A complete run", "",
                "The checker finds no violation, so there is no counterexample to show. This is one complete "
                "run instead, scheduled round-robin from the last thread down (each step goes to the next "
                "thread that can move)" + (f"; it is cut at {RUN_CAP} steps" if len(run) >= RUN_CAP else "") + ".", "",
                f"![Swimlane diagram of a complete {name} run]({name}.svg)", "",
                "<details><summary>The same run as a table</summary>", "",
                _fence(trace_table(machine, run)), "", "</details>", ""]
        svg = svg_for(machine, run, None)

    out += ["## The programs", "",
            "Each program's steps in declaration order (its threads start at the first), each with its kind and "
            "the labels it declares it may go to: `next`, plus `to=[...]` where the next label is computed. "
            "Drawn from the declarations, not from a run; a step that went anywhere else would be a model error.",
            "", _fence(programs_text(machine)), ""]

    for title, text in doc.sections:
        out += [f"## {title}", "", _md(text), ""]

    if reference:
        if model.sweep:
            out += ["## Proved over", "",
                    "The catalog tests check this design exhaustively at every combination of:", ""]
            out += [f"- `{k}` in {', '.join(f'`{x}`' for x in v)}" for k, v in model.sweep.items()]
            out.append("")
        fixes = [n for n, m in models.items() if m.expected != "ok" and fix_name(m) == name]
        if fixes:
            out += ["## Fixes", "", "This design is the fix of: "
                    + ", ".join(f"[{n}]({n}.md)" for n in fixes) + ".", ""]
    else:
        out += ["## The fix", ""]
        out.append(_md(sentence(doc.fix)) if doc.fix else "The model does not describe a fix.")
        out.append("")
        fname = fix_name(model)
        report = fix_report(model, machine.config) if fname else None
        if fname and report is None:
            out += [f"The fix names `{fname}`, which is not in the catalog.", ""]
        elif report is not None:
            out += [f"Checked with the parameters both models share, [{report.fix.name}]({report.fix.name}.md) "
                    f"(`{config_text(report.config)}`) gives {_result_words(report.result)}."
                    + (f" It has no parameter {', '.join(f'`{d}`' for d in report.dropped)}."
                       if report.dropped else ""), ""]
            out += [f"<details><summary>Source diff: <code>{_source_path(model)}</code> &rarr; "
                    f"<code>{_source_path(report.fix)}</code></summary>", "",
                    _fence(source_diff(model, report.fix), "diff"), "", "</details>", ""]

    if sem is not None:
        out += ["## Under each condvar semantics", "", "| notify | spurious | verdict |", "|---|---|---|"]
        out += [f"| {nt} | {sp} | {_cell(sem[(nt, sp)])} |" for nt, sp in SEMANTICS]
        out += ["", semantics_sentence(sem) + " See [the semantics table](../semantics.md).", ""]

    out += ["## Try it", "", _fence("\n".join([
        f"python -m safeprefetch check {name} --svg {name}.svg",
        f"python -m safeprefetch explain {name} --diff",
        f"python -m safeprefetch play {name}",
    ]), "sh"), ""]
    out += ["[All models](../index.md#the-catalog)", ""]
    return "\n".join(out), svg


def semantics_page(rows) -> str:
    out = ["# Condvar semantics, model by model", "",
           "Every catalog model that waits on or notifies a condition variable, checked exhaustively at its "
           "default configuration under each of the four condvar semantics. A cell is the verdict and the "
           "length of the shortest counterexample. `notify` says whom `notify_one` wakes: the longest waiter "
           "(`fifo`) or any waiter (`any`, a branch per waiter). `spurious=on` lets a sleeping thread wake on "
           "its own; since such a wakeup is allowed but never guaranteed, a state whose only moves are "
           "spurious wakeups still counts as stuck.", "",
           "Generated by `python docs/generate.py` from the checker's own results.", "",
           "| model | fifo, off | any, off | fifo, on | any, on | what the settings change |",
           "|---|---|---|---|---|---|"]
    for name, cells in rows:
        out.append(f"| [{name}](models/{name}.md) | "
                   + " | ".join(_cell(cells[k]) for k in SEMANTICS)
                   + f" | {_cell_md(semantics_sentence(cells))} |")
    if not rows:
        out.append("| (no condvar models) | | | | | |")
    fifo_only = [n for n, c in rows if c[("fifo", "off")].verdict == "ok" and c[("any", "off")].verdict != "ok"]
    spur = [n for n, c in rows if c[("fifo", "off")].verdict == "ok" and c[("fifo", "on")].verdict != "ok"]
    out += ["", "## In short", "",
            "- Correct only if `notify_one` is FIFO: " + (", ".join(fifo_only) if fifo_only else "none") + ".",
            "- Correct without spurious wakeups but broken with them: " + (", ".join(spur) if spur else "none")
            + ".", "",
            "Reproduce any cell with `python -m safeprefetch check MODEL --set notify=any --set spurious=on`.", ""]
    return "\n".join(out + liveness_section(liveness_rows(catalog())))


#: The liveness settings the semantics page crosses: fairness, then spurious wakeups.
LIVENESS = (("weak", "off"), ("weak", "on"), ("strong", "off"), ("strong", "on"))


def liveness_rows(models: Mapping[str, type[Model]]) -> list[tuple[str, str, dict[tuple[str, str], CheckResult]]]:
    """For every model that declares progress steps: its scheduling policy and its result under each
    :data:`LIVENESS` setting."""
    rows = []
    for name, model in models.items():
        machine = model.compile({})
        if not machine.progress_labels:
            continue
        cells = {(f, sp): check(model.compile({"fairness": f, "spurious": sp})) for f, sp in LIVENESS}
        rows.append((name, machine.config["policy"], cells))
    return rows


def liveness_section(rows) -> list[str]:
    out = ["## Liveness: fairness and spurious wakeups", "",
           "Starvation is a cycle the scheduler may repeat forever while some thread never takes a progress "
           "step (`m.progress(...)`), and whether a scheduler may do that is an assumption, the `fairness` "
           "setting:", "",
           "- `weak` (the default): a thread enabled in *every* state of the cycle takes a step in it. A thread "
           "enabled only now and then -- a lock others keep re-taking -- may be passed over forever.",
           "- `strong`: a step enabled in *some* state of the cycle is taken in it (enabled infinitely often, "
           "taken infinitely often). Under it a lock's fix can be verified: a thread whose `acquire` is enabled "
           "every time the lock is free gets it.", "",
           "Spurious wakeups are finite: a spurious wakeup is allowed, never guaranteed, so it does not count "
           "as enabled for fairness, and the cycle of a starvation lasso takes none (its stem may). A waiter "
           "that woke spuriously forever would otherwise make every correct design that waits look starving. "
           "The counterexample is the shortest lasso, stem plus cycle, over every starving thread.", "",
           "Every catalog model that declares progress steps, at its default configuration (and its own "
           "scheduling policy), under each setting:", "",
           "| model | policy | weak, spurious off | weak, spurious on | strong, spurious off | "
           "strong, spurious on |",
           "|---|---|---|---|---|---|"]
    for name, policy, cells in rows:
        out.append(f"| [{name}](models/{name}.md) | {policy} | " + " | ".join(_cell(cells[k]) for k in LIVENESS)
                   + " |")
    fixed = [n for n, _p, c in rows if c[("strong", "off")].verdict == "ok" and c[("weak", "off")].verdict != "ok"]
    always = [n for n, _p, c in rows if all(r.verdict == "starvation" for r in c.values())]
    out += ["", "- Verified only under strong fairness: " + (", ".join(fixed) if fixed else "none")
            + ". `writer_preference_rwlock` is the fix of `reader_preference_rwlock`: under weak fairness its "
            "writer can still lose the monitor's lock to a reader forever before it announces itself, which is "
            "what weak fairness permits, not a flaw of the design.",
            "- Starving under every setting: " + (", ".join(always) if always else "none")
            + ". No fairness helps a thread that is never enabled (the reader-preference writer asleep on its "
            "condvar) or a priority policy that never lets it run.", "",
            "Reproduce any cell with `python -m safeprefetch check MODEL --set fairness=strong --set spurious=on`.",
            ""]
    return out


# -- the tutorial -------------------------------------------------------------

TUTORIAL_MODEL = '''\
# mailbox_model.py
"""mailbox: one sender hands messages to receivers through a one-slot mailbox.

Expected verdict: ok (with ``recheck=True``).
"""

from safeprefetch.model import DONE, Model, violate


class Mailbox(Model):
    name = "mailbox"
    expected = "ok"
    params = {"receivers": 2, "messages": 1, "recheck": True}

    def build(self, m, receivers, messages, recheck):
        total = receivers * messages
        m.shared(full=False, sent=0, got=0)
        m.mutex("lock")
        m.condvar("changed")  # notified (all) after every send and every take

        def send(s, me):
            s.full = True
            s.sent += 1
            me.left -= 1

        def take(s, me):
            if not s.full:
                violate("underflow", f"{me.name} takes from an empty mailbox")
            s.full = False
            s.got += 1
            me.quota -= 1

        tx = m.program("sender", left=total)
        tx.acquire("lock", "lock", next="check")
        tx.step("check", next=lambda s, me: "wait" if s.full else "send", to=["wait", "send"])
        tx.wait("wait", "changed", "lock", next="check", until=lambda s, me: not s.full)
        tx.step("send", send, next="notify")
        tx.notify_all("notify", "changed", next="unlock")
        tx.release("unlock", "lock", next=lambda s, me: "lock" if me.left else DONE, to=["lock", DONE])

        rx = m.program("receiver", quota=messages)
        rx.acquire("lock", "lock", next="check")
        rx.step("check", next=lambda s, me: "take" if s.full else "wait", to=["take", "wait"])
        # With recheck=False this is the classic `if` instead of `while`.
        rx.wait("wait", "changed", "lock", next="check" if recheck else "take",
                until=lambda s, me: s.full)
        rx.step("take", take, next="notify")
        rx.notify_all("notify", "changed", next="unlock")
        rx.release("unlock", "lock", next=lambda s, me: "lock" if me.quota else DONE, to=["lock", DONE])

        m.thread("sender", tx)
        for i in range(receivers):
            m.thread(f"receiver{i}", rx)
        m.at_end(lambda s: None if s.got == total else ("lost_item", f"{total - s.got} messages never taken"))
'''

TUTORIAL_TEST = '''\
# test_mailbox.py
from mailbox_model import Mailbox

from safeprefetch import check
from safeprefetch.testing import assert_verdict


def test_mailbox_is_correct_exhaustively():
    for receivers in (1, 2, 3):
        for messages in (1, 2):
            assert_verdict(Mailbox, "ok", receivers=receivers, messages=messages)


def test_mailbox_is_correct_under_every_condvar_semantics():
    for notify in ("fifo", "any"):
        for spurious in ("off", "on"):
            assert_verdict(Mailbox, "ok", notify=notify, spurious=spurious)


def test_if_instead_of_while_takes_from_an_empty_mailbox():
    result = assert_verdict(Mailbox, "underflow", trace_length={if_length}, recheck=False)
    assert result.violation.trace.steps[-1].step == "take"


def test_a_single_receiver_gets_away_with_if_until_wakeups_are_spurious():
    assert_verdict(Mailbox, "ok", receivers=1, recheck=False)
    assert check(Mailbox, {{"receivers": 1, "recheck": False, "spurious": "on"}}).verdict == "underflow"
'''

TUTORIAL_COMMAND = ("check", "mailbox_model.py", "--set", "recheck=off")


def _tutorial_outputs() -> dict[str, Any]:
    """Run the tutorial model exactly as the reader will, and collect what the pages quote."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mailbox_model.py"
        path.write_text(TUTORIAL_MODEL)
        model = load_model(str(path))
        broken = model.compile({"recheck": "off"})
        result = check(broken)
        text = render_result(result, broken)
        spurious = check(model, {"receivers": 1, "recheck": False, "spurious": "on"})
    return {
        "if_length": len(result.trace),
        "cli": tidy_cli_output(text),
        "single_spurious": spurious,
    }


def tidy_cli_output(text: str) -> str:
    """The ``check`` output with its one non-deterministic number (seconds) elided."""
    return re.sub(r", \d+\.\d+ s, ", ", ... s, ", text)


def _play_transcript() -> str:
    """A real ``play`` session on no_predicate_wait, following its shortest trace."""
    models = catalog()
    name = "no_predicate_wait" if "no_predicate_wait" in models else next(
        n for n, m in models.items() if m.expected != "ok")
    machine = models[name].compile({})
    result = check(machine)
    numbers = choice_numbers(machine, result.trace)
    inp = io.StringIO("".join(f"{n}\n" for n in numbers) + "q\n")
    out = io.StringIO()
    Play(machine, inp, out, echo=True, summary=model_doc(models[name]).summary).run()
    return f"$ python -m safeprefetch play {name}\n" + out.getvalue()


def index_page(models: Mapping[str, type[Model]], results: Mapping[str, CheckResult], sem_rows) -> str:
    tut = _tutorial_outputs()
    test_code = TUTORIAL_TEST.format(if_length=tut["if_length"])
    broken = [n for n, m in models.items() if m.expected != "ok"]
    refs = [n for n, m in models.items() if m.expected == "ok"]
    out = ["# safeprefetch", "",
           "safeprefetch is two things built on one idea. It is a **model checker for concurrency designs**: "
           "you write a design -- threads, a mutex, condition variables, semaphores, flags -- as an explicit "
           "state machine of labelled atomic steps, and it explores every interleaving, breadth first, to "
           "prove the design correct or hand you the shortest schedule that breaks it. And it is a **numpy "
           "prefetcher** whose protocol is one of those models: the live `Prefetcher` runs the very "
           "transition functions the checker proved, so there is no second implementation to drift.", "",
           f"The catalog below holds {len(broken)} broken designs, each the smallest config that shows a real "
           f"bug (from OSTEP, the Little Book of Semaphores, the Deadlock Empire, Caffe2...), and "
           f"{len(refs)} reference designs proved correct over sweeps of configurations.", "",
           "- [Tutorial: write your own model and check it from pytest](#tutorial-write-your-own-model-and-check-it-from-pytest)",
           "- [The checks](#the-checks)",
           "- [Condvar semantics](#condvar-semantics) and [the per-model semantics table](semantics.md)",
           "- [Reading traces: tables, swimlanes, explain and play](#reading-traces-tables-swimlanes-explain-and-play)",
           "- [The catalog](#the-catalog)",
           "- [Cross-check against SPIN](#cross-check-against-spin)", ""]

    out += ["## Tutorial: write your own model and check it from pytest", "",
            "A model is a class with a `build` method. `build` declares shared variables and primitives, "
            "then one *program* per role: a table of labelled steps, each atomic. The label you write is "
            "the thread's program counter and is exactly what traces show. Here is a one-slot mailbox "
            "between a sender and some receivers, with a switch that reintroduces the classic bug of "
            "waiting under an `if` instead of a `while`:", "",
            _fence(TUTORIAL_MODEL, "python"), "",
            "A few rules of the vocabulary, all visible above:", "",
            "- `step(label, effect, next=...)` is an atomic step; the effect mutates `s` (shared variables) and "
            "`me` (the thread's locals) on a private copy of the state. `next` is a label, a function of the "
            "state, or `DONE`. A step whose next label is computed (a function, or an effect that returns it) "
            "declares every label it may go to with `to=[...]`: the compiler checks those labels, a step that "
            "goes anywhere else is an error, and the declarations are the program graph the docs draw.",
            "- `wait` is Mesa-style: it releases the mutex and sleeps in one step; once notified, the thread "
            "re-acquires the mutex as a separate step. `until=` declares what the thread waits for, which lets "
            "the checker tell a *lost wakeup* from a plain deadlock.",
            "- `violate(kind, message)` inside a step reports a bug found by that step; `invariant` and "
            "`at_end` declare checks on every state and on the final state.", "",
            "Check it from the command line (a path to a `.py` file works wherever a catalog name does):", "",
            _fence(f"$ python -m safeprefetch {' '.join(TUTORIAL_COMMAND)}\n{tut['cli']}"), "",
            "The `if` lets a receiver that was woken by the `notify_all` meant for the *other* receiver take "
            "from a mailbox that is already empty. The same checks run from pytest; `assert_verdict` asserts "
            "the verdict, that the search was exhaustive, and optionally the length of the shortest trace:",
            "", _fence(test_code, "python"), "",
            "Run it with `python -m pytest test_mailbox.py`. The last test is the one a unit test with real "
            "threads would almost never catch: with a single receiver the `if` is harmless until the platform "
            f"delivers a spurious wakeup (shortest counterexample: {len(tut['single_spurious'].trace)} steps). "
            "`tests/test_docs.py` extracts both files from this page and runs them, so the tutorial cannot "
            "rot.", ""]

    missing = [k for k in VIOLATION_KINDS if k not in CHECKS]
    if missing:
        raise SystemExit(f"docs/generate.py: no description for violation kinds {missing}")
    by_kind: dict[str, list[str]] = {}
    for n, m in models.items():
        for k in re.split(r"\W+", m.expected):
            by_kind.setdefault(k, []).append(n)
    out += ["## The checks", "",
            "Invariants run on every reachable state. A *terminal* state -- no thread can step -- is "
            "classified: every thread done means the end-of-run checks run; otherwise it is a "
            "`shutdown_hang` if close, an error or an abandon was requested, a `lost_wakeup` if a sleeper's "
            "predicate holds with no notify since, and a `deadlock` otherwise. These are the stable kind "
            "names a verdict can take (`--json` and scripts depend on them):", "",
            "| kind | holds when | catalog models expecting it |", "|---|---|---|"]
    for k in VIOLATION_KINDS:
        names = ", ".join(f"[{n}](models/{n}.md)" for n in by_kind.get(k, []))
        out.append(f"| `{k}` | {_cell_md(CHECKS[k])} | {names or '-'} |")
    out += ["", "A result also reports the distinct states, the transitions, whether the search was exhaustive "
            "(a `--max-states` bound can cut it short, and then an `ok` only means \"no violation among the "
            "states seen\"), and the shortest trace.", ""]

    moved = [(n, semantics_sentence(c)) for n, c in sem_rows if len({r.verdict for r in c.values()}) > 1]
    out += ["## Condvar semantics", "",
            "Condition-variable semantics differ between platforms, so they are settings of every model and "
            "a dimension of the search:", "",
            "| setting | values | meaning |", "|---|---|---|",
            "| `notify` | `fifo` (default), `any` | whom `notify_one` wakes: the longest waiter, or any one "
            "waiter (the search branches over each) |",
            "| `spurious` | `off` (default), `on` | whether a sleeping thread may wake with no notify; a state "
            "whose only moves are spurious wakeups still counts as stuck, since they are never guaranteed |", "",
            "Set them like any parameter: `python -m safeprefetch check one_cond_signal --set notify=any "
            "--set spurious=on`.", "",
            f"[semantics.md](semantics.md) gives, for all {len(sem_rows)} condvar models of the catalog, the "
            "verdict under each of the four combinations"
            + (". In this catalog the settings change the verdict of:" if moved else
               ". In this catalog no verdict depends on them.")]
    out += ["", *[f"- [{n}](models/{n}.md): {text}" for n, text in moved], ""] if moved else [""]

    out += ["## Reading traces: tables, swimlanes, explain and play", "",
            "Every counterexample is a list of choices, so it replays exactly and renders several ways:", "",
            "- `check MODEL` prints the OSTEP-style table: one column per thread, each row a step label and "
            "what it changed, the violation marked `<==`.",
            "- `check MODEL --json` gives the trace as `{\"thread\", \"step\", \"branch\"}` objects; "
            "`replay MODEL TRACE.json` re-runs a saved trace and prints the table again.",
            "- `check MODEL --svg FILE` draws a swimlane diagram: a lane per thread, sleeping threads hatched, "
            "an arrow from each notify to the thread it wakes, mutex ownership as a coloured bar, the violation "
            "in red. Every model page embeds one.",
            "- `explain MODEL` tells the bug in a sentence, its source, the shortest trace and the fix, "
            "re-checking the fixed design at the same config (`--diff` adds the source diff).",
            "- `play MODEL` makes you the scheduler. It reads plain lines from standard input, so it works in "
            "any terminal and in a pipe; `--trace FILE` saves your schedule for `replay`.", "",
            "A real session, following the shortest lost-wakeup schedule:", "",
            _fence(_play_transcript()), ""]

    out += ["## The catalog", "",
            "Every model, checked at its declared configuration by this generator "
            "(`python -m safeprefetch check --all` does the same and exits 0 exactly when all match).", "",
            "| model | expected | verdict | states | shortest trace | what it is |", "|---|---|---|---|---|---|"]
    for n, m in models.items():
        r = results[n]
        verdict = f"`{r.verdict}`" + ("" if r.verdict == m.expected else " (mismatch)")
        length = str(len(r.trace)) if r.violation is not None else "-"
        out.append(f"| [{n}](models/{n}.md) | `{m.expected}` | {verdict} | {r.states} | {length} | "
                   f"{_cell_md(_md(sentence(model_doc(m).summary)))} |")
    out += ["", "## Cross-check against SPIN", "",
            "Promela twins of the reference designs and of broken models covering deadlock, lost wakeup, "
            "overflow and shutdown hang are verified by the real SPIN model checker, and the verdicts are "
            "compared: see [spin.md](spin.md), which also compares state counts. The condvar semantics "
            "table is in [semantics.md](semantics.md).", "",
            "## More", "",
            "- [reductions.md](reductions.md): stored states under symmetry and partial-order reduction, "
            "next to SPIN's.",
            "- [exploration.md](exploration.md): explorer speed and memory against SPIN, liveness "
            "(starvation, bounded progress after shutdown), progress lines, state-count regression.",
            "- [strategies.md](strategies.md): random, PCT, preemption-bounded and Hypothesis-driven "
            "schedules for configurations too big to exhaust.",
            "- [parallel.md](parallel.md): the search on a dask cluster (the sequential result, exactly) "
            "and swarms; costs, sizing.",
            "- [soak.md](soak.md): the live Prefetcher under 10,000 random fault scenarios.",
            "- [architecture.md](architecture.md): the layers and what each may import, where new work "
            "goes, and one batch from the source to your loop.",
            "- [hardening.md](hardening.md): Ctrl-C, signal handlers, finalizers, fork and exit: what is "
            "guaranteed, and the injection harness and Ctrl-C soak that check it.",
            "- [interleavings.md](interleavings.md): test real threading code under every schedule, and the "
            "Prefetcher's own code checked that way.",
            "- [performance.md](performance.md): the live Prefetcher against its baselines.",
            "- [predictive.md](predictive.md): on-demand access with predictors, its checked protocol, and when "
            "prediction pays.", ""]
    return "\n".join(out)


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def render_all() -> dict[str, str]:
    """Every generated file, by path relative to ``docs/``."""
    models = catalog()
    sem_rows = semantics_rows(models)
    sem = dict(sem_rows)
    files: dict[str, str] = {}
    results: dict[str, CheckResult] = {}
    for name, model in models.items():
        results[name] = check(model.compile({}))
        page, svg = model_page(name, model, sem.get(name), models)
        files[f"models/{name}.md"] = page
        files[f"models/{name}.svg"] = svg
    files["semantics.md"] = semantics_page(sem_rows)
    files["index.md"] = index_page(models, results, sem_rows)
    return dict(sorted(files.items()))


def generated_paths(out_dir: Path) -> list[str]:
    """Files under ``out_dir`` that this generator owns (for finding stale pages)."""
    found = [p for p in (out_dir / "models").glob("*") if p.suffix in (".md", ".svg")]
    found += [out_dir / n for n in ("index.md", "semantics.md") if (out_dir / n).exists()]
    return sorted(str(p.relative_to(out_dir)) for p in found)


def generate(out_dir: str | Path | None = None) -> list[str]:
    """Write every page into ``out_dir`` (default: this docs/ folder); remove stale model pages.

    Returns the relative paths written.
    """
    out = Path(out_dir) if out_dir is not None else Path(__file__).resolve().parent
    files = render_all()
    (out / "models").mkdir(parents=True, exist_ok=True)
    for stale in set(generated_paths(out)) - set(files):
        (out / stale).unlink()
    for rel, text in files.items():
        path = out / rel
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    return list(files)


def main(argv: Iterable[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    written = generate(args[0] if args else None)
    print(f"wrote {len(written)} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
