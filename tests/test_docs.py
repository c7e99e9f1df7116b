"""The generated docs: current with the tool (byte for byte), and the tutorial's code really runs."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from safeprefetch import catalog

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def load_generator():
    spec = importlib.util.spec_from_file_location("safeprefetch_docs_generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen():
    return load_generator()


@pytest.fixture(scope="module")
def regenerated(gen, tmp_path_factory):
    out = tmp_path_factory.mktemp("docs")
    written = gen.generate(out)
    return out, written


def test_committed_docs_are_what_the_generator_writes(gen, regenerated):
    out, written = regenerated
    stale = sorted(set(gen.generated_paths(DOCS)) - set(written))
    missing = [rel for rel in written if not (DOCS / rel).exists()]
    differ = [rel for rel in written if (DOCS / rel).exists()
              and (DOCS / rel).read_bytes() != (out / rel).read_bytes()]
    assert not (stale or missing or differ), (
        f"docs/ is out of date (run `python docs/generate.py`): missing {missing}, differ {differ}, stale {stale}")


def test_every_catalog_model_has_a_page_and_a_diagram(regenerated):
    out, written = regenerated
    for name in catalog():
        assert f"models/{name}.md" in written and f"models/{name}.svg" in written
        page = (out / "models" / f"{name}.md").read_text()
        assert f"]({name}.svg)" in page
    index = (out / "index.md").read_text()
    for name in catalog():
        assert f"](models/{name}.md)" in index
    assert "](spin.md)" in index and "](semantics.md)" in index


def test_generation_is_deterministic(gen, regenerated, tmp_path):
    out, written = regenerated
    gen.generate(tmp_path)
    for rel in written:
        assert (tmp_path / rel).read_bytes() == (out / rel).read_bytes(), rel


def test_no_absolute_paths_or_timings_leak_into_the_docs(regenerated):
    out, written = regenerated
    for rel in written:
        text = (out / rel).read_text()
        assert str(ROOT) not in text and "/tmp" not in text, rel
        assert not re.search(r"\d+\.\d{3} s\b", text), rel


def test_semantics_page_lists_every_condvar_model_under_four_settings(gen, regenerated):
    out, _ = regenerated
    text = (out / "semantics.md").read_text().split("## Liveness")[0]
    for name, model in catalog().items():
        row = [line for line in text.splitlines() if line.startswith(f"| [{name}](")]
        if gen.uses_condvars(model.compile({})):
            assert len(row) == 1 and row[0].count("|") == 7, name
        else:
            assert not row, name


def test_semantics_page_shows_every_liveness_model_under_each_fairness_setting(gen, regenerated):
    out, _ = regenerated
    text = (out / "semantics.md").read_text()
    liveness = text.split("## Liveness")[1]
    for name, model in catalog().items():
        row = [line for line in liveness.splitlines() if line.startswith(f"| [{name}](")]
        if model.compile({}).progress_labels:
            assert len(row) == 1 and row[0].count("|") == 7, name
        else:
            assert not row, name
    fix, = [line for line in liveness.splitlines() if line.startswith("| [writer_preference_rwlock](")]
    assert fix.split("|")[-3:-1] == [" ok ", " ok "]  # strong fairness, with and without spurious wakeups


def fake(verdict, length=0):
    return SimpleNamespace(verdict=verdict, trace=[None] * length)


@pytest.mark.parametrize("cells, phrase", [
    (("ok", "deadlock", "ok", "deadlock"), "Correct only if notify_one is FIFO"),
    (("ok", "ok", "underflow", "underflow"), "Breaks under spurious wakeups"),
    (("ok", "ok", "ok", "lost_item"), "when notify=any and spurious wakeups combine"),
    (("ok", "ok", "ok", "ok"), "Correct under every semantics"),
    (("lost_wakeup", "lost_wakeup", "underflow", "underflow"), "`lost_wakeup` without spurious wakeups"),
])
def test_semantics_sentence_is_derived_from_the_verdicts(gen, cells, phrase):
    results = {k: fake(v, 5) for k, v in zip(gen.SEMANTICS, cells)}
    assert phrase in gen.semantics_sentence(results)


# -- the tutorial ------------------------------------------------------------------


def tutorial_blocks():
    """Every ```python block of the committed tutorial whose first line names its file."""
    index = (DOCS / "index.md").read_text()
    section = index.split("## Tutorial", 1)[1].split("\n## ", 1)[0]
    files = {}
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        first = block.splitlines()[0]
        m = re.match(r"# (\w+\.py)$", first)
        if m:
            files[m.group(1)] = block
    outputs = re.findall(r"```text\n\$ python -m safeprefetch (.*?)\n(.*?)```", section, re.S)
    return files, outputs


def test_tutorial_code_runs_under_pytest(tmp_path):
    files, _ = tutorial_blocks()
    assert set(files) == {"mailbox_model.py", "test_mailbox.py"}
    for name, code in files.items():
        (tmp_path / name).write_text(code)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "test_mailbox.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "4 passed" in p.stdout


def test_tutorial_cli_output_is_what_the_cli_prints(gen, tmp_path):
    files, outputs = tutorial_blocks()
    (tmp_path / "mailbox_model.py").write_text(files["mailbox_model.py"])
    assert outputs, "the tutorial shows a check command and its output"
    for command, shown in outputs:
        p = subprocess.run([sys.executable, "-m", "safeprefetch", *command.split()], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 1, p.stderr
        assert gen.tidy_cli_output(p.stdout).rstrip() == shown.rstrip()
