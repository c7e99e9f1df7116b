"""The model checker against bad input and wrong verdicts: every case names the exit code and the message.

The contract (ARCHITECTURE.md, "CLI contract"): bad input -- a malformed
model, a model whose own code misbehaves, an option out of range, a saved
trace that was tampered with -- gets exit 2 and one line naming what was
wrong; never a traceback, a hang, or a verdict. A check cut short (the state
cap, a memory budget) is exit 3, inconclusive, and never a pass. A verdict is
only ever the one the search actually established.

Each test here pins a hole an adversarial review of the checker's CLI and API
found: it failed before its fix. Most run the CLI in process
(``cli.main``), which is what ``python -m safeprefetch`` calls; a few run it
as a subprocess where the exit code of the process itself is the point (a
model calling ``sys.exit`` must not become the checker's exit code). Models
are written to ``tmp_path`` as the small files a user would write.
"""

import json
import textwrap

import pytest
from test_cli import run  # python -m safeprefetch ARGS -> (exit code, stdout, stderr)

from safeprefetch._cli import main as cli

pytestmark = pytest.mark.timeout(60)


def model_file(tmp_path, name, body):
    """Write a one-class model file; ``body`` is the build method's body (indented by us)."""
    path = tmp_path / f"{name}.py"
    path.write_text(f'"""{name}: a model written by a test."""\n'
                    "import sys\n"
                    "from safeprefetch.model import DONE, Model\n\n\n"
                    f"class M(Model):\n    name = {name!r}\n\n    def build(self, m):\n"
                    + textwrap.indent(textwrap.dedent(body), " " * 8))
    return str(path)


def cli_run(capsys, *args):
    """``cli.main(args)`` in process: (exit code, stdout, stderr)."""
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- 1. a model that calls sys.exit -------------------------------------------------------------

ONE_STEP = """
m.shared(n=0)
p = m.program("t")
p.step("quit", STEP, next=DONE)
m.thread("t0", p)
"""


@pytest.mark.parametrize("where, body, names", [
    ("step", ONE_STEP.replace("STEP", "lambda s, me: sys.exit(0)"), "t0, step 'quit'"),
    ("build", "sys.exit(0)\n", "its build"),
    ("invariant", ONE_STEP.replace("STEP", "lambda s, me: None") + "m.invariant('small', lambda s: sys.exit(0))\n",
     "invariant 'small'"),
    ("end check", ONE_STEP.replace("STEP", "lambda s, me: None") + "m.at_end(lambda s: sys.exit(0))\n",
     "end check"),
])
def test_a_model_calling_sys_exit_is_a_model_error_not_the_checkers_exit_code(tmp_path, where, body, names):
    path = model_file(tmp_path, "exits", body)
    code, out, err = run("check", path)
    assert code == 2, (out, err)
    line = err.splitlines()[0]
    assert "sys.exit(0)" in line and "'exits'" in line and names in line
    assert "Traceback" not in err


def test_a_step_calling_sys_exit_is_a_step_error_from_the_api(tmp_path):
    from safeprefetch import check
    from safeprefetch.model import ModelError
    from safeprefetch._tools.catalog import load_model

    model = load_model(model_file(tmp_path, "exits", ONE_STEP.replace("STEP", "lambda s, me: sys.exit(7)")))
    for engine in ("plain", "generated"):
        with pytest.raises(ModelError, match=r"t0, step 'quit': the model called sys.exit\(7\)"):
            check(model, engine=engine)
