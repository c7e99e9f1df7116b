"""The SVG swimlane renderer: valid XML, one lane per thread, primitive events drawn, the violation in red."""

import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from safeprefetch import catalog, check
from safeprefetch._tools.svg import svg_for, write_svg
from safeprefetch.model import DONE, Model, violate



def parse(text):
    return ET.fromstring(text)


def groups(root, cls):
    return [g for g in root.iter("{http://www.w3.org/2000/svg}g") if cls in g.get("class", "").split()]


def rects(root, cls):
    return [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == cls]


def all_text(root):
    return " ".join("".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text"))


@pytest.fixture(scope="module")
def one_cond_signal():
    machine = catalog()["one_cond_signal"].compile({})
    return machine, check(machine)


def test_svg_is_valid_xml_with_one_lane_per_thread(one_cond_signal):
    machine, result = one_cond_signal
    root = parse(svg_for(machine, result.trace, result.violation))
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    lanes = groups(root, "lane")
    assert [g.get("data-thread") for g in lanes] == list(machine.thread_names)


def test_every_step_is_a_box_in_its_threads_lane(one_cond_signal):
    machine, result = one_cond_signal
    root = parse(svg_for(machine, result.trace, result.violation))
    steps = groups(root, "step")
    assert len(steps) == len(result.trace)
    assert [g.get("data-thread") for g in steps] == [s.thread for s in result.trace]
    assert [g.get("data-step") for g in steps] == [str(i) for i in range(1, len(result.trace) + 1)]


def test_deadlock_is_marked_on_a_final_state_row(one_cond_signal):
    machine, result = one_cond_signal
    root = parse(svg_for(machine, result.trace, result.violation))
    final = groups(root, "final")
    assert len(final) == 1 and final[0].get("data-kind") == "deadlock"
    assert "violation" in final[0].get("class")
    text = all_text(root)
    assert "deadlock" in text and "asleep on cond" in text


def test_notifies_are_arrows_to_the_thread_they_wake_and_sleepers_are_hatched(one_cond_signal):
    machine, result = one_cond_signal
    root = parse(svg_for(machine, result.trace, result.violation))
    arrows = [line for line in root.iter("{http://www.w3.org/2000/svg}line") if line.get("class") == "notify"]
    titles = sorted("".join(a.itertext()) for a in arrows)
    assert titles == ["consumer0 wakes consumer1", "producer0 wakes consumer0"]
    asleep = rects(root, "asleep")
    assert asleep and all(r.get("fill") == "url(#asleep)" for r in asleep)
    assert rects(root, "holds"), "mutex ownership bars are drawn"


class Escapes(Model):
    """escapes: labels with XML metacharacters, and a step that fails."""

    name = "escapes"
    expected = "underflow"

    def build(self, m):
        m.shared(n=0)

        def take(s, me):
            if s.n == 0:
                violate("underflow", "take <from> an \"empty\" & sad buffer")

        p = m.program("t<1>")
        p.step('if a < b && c > "d"', next='take & go')
        p.step("take & go", take, next=DONE)
        m.thread("t<&>", p)


def test_labels_and_messages_are_escaped_and_a_failing_step_is_red():
    machine = Escapes.compile({})
    result = check(machine)
    assert result.verdict == "underflow" and result.violation.on_step
    text = svg_for(machine, result.trace, result.violation)
    root = parse(text)  # would raise on a bare < or &
    assert 'if a < b && c > "d"' in all_text(root)
    assert "take <from> an \"empty\" & sad buffer" in all_text(root)
    assert [g.get("data-thread") for g in groups(root, "lane")] == ["t<&>"]
    bad = groups(root, "violation")
    assert len(bad) == 1 and bad[0].get("data-step") == "2"
    assert any(r.get("stroke") == "#c62828" for r in bad[0].iter("{http://www.w3.org/2000/svg}rect"))


def test_an_ok_result_draws_an_empty_diagram(tmp_path):
    machine = catalog()["monitor"].compile({})
    result = check(machine)
    assert result.ok
    path = tmp_path / "ok.svg"
    write_svg(machine, result, path)
    root = parse(path.read_text())
    assert len(groups(root, "lane")) == len(machine.thread_names)
    assert not groups(root, "step") and not groups(root, "violation")
    assert "ok" in all_text(root)


def test_output_is_deterministic(one_cond_signal):
    machine, result = one_cond_signal
    assert svg_for(machine, result.trace, result.violation) == svg_for(machine, result.trace, result.violation)


def test_check_svg_flag_writes_the_diagram(tmp_path):
    path = tmp_path / "trace.svg"
    p = subprocess.run([sys.executable, "-m", "safeprefetch", "check", "no_predicate_wait", "--svg", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    root = parse(path.read_text())
    assert groups(root, "final")[0].get("data-kind") == "lost_wakeup"


@pytest.mark.parametrize("name", sorted(catalog()))
def test_every_catalog_counterexample_renders(name):
    machine = catalog()[name].compile({})
    result = check(machine)
    root = parse(svg_for(machine, result.trace, result.violation))
    assert len(groups(root, "lane")) == len(machine.thread_names)
    if result.violation is not None:
        assert groups(root, "violation"), "the violation is marked"


def test_a_starvation_lasso_marks_the_cycle_that_repeats():
    machine = catalog()["priority_inversion"].compile({})
    result = check(machine)
    assert result.verdict == "starvation"
    root = parse(svg_for(machine, result.trace, result.violation))
    cycles = [p for p in root.iter("{http://www.w3.org/2000/svg}path") if p.get("class") == "cycle"]
    assert len(cycles) == 1
    assert "can repeat forever" in all_text(root)


def test_the_lasso_is_drawn_from_the_violations_field_not_its_message():
    from dataclasses import replace

    machine = catalog()["priority_inversion"].compile({})
    result = check(machine)
    quiet = replace(result.violation, message="starved")  # a message that says nothing of the cycle
    root = parse(svg_for(machine, result.trace, quiet))
    cycles = [p for p in root.iter("{http://www.w3.org/2000/svg}path") if p.get("class") == "cycle"]
    assert len(cycles) == 1
    start, n = result.violation.cycle_start, len(result.trace)
    span = f"step {n}" if start + 1 == n else f"steps {start + 1}-{n}"
    assert f"({span} can repeat forever)" in all_text(root)
