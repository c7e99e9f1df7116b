"""The eleventh review's compiler finding 5 (docs/hardening.md); each test failed before its fix.

Specialize._same_code, the guard against rewriting source that is not what was compiled (a model
file edited after import), compares instruction arguments with ``==``. Constants that are equal but not the
same value pass: ``10**20`` (an int) edited to ``1e20`` (a float), ``1`` -> ``True`` / ``1.0``, ``0.0`` -> ``-0.0``.
The specializer then compiles the *edited* text while the plain path runs the imported code: another state,
another verdict.
"""
import importlib
import os
import sys
import textwrap
import time

from safeprefetch import check
from safeprefetch._dsl import specialize

V1 = textwrap.dedent('''
    from safeprefetch.model import DONE, Model


    def bump(s, me):
        s.total = s.total + 100000000000000000000


    class Edited(Model):
        name = "edited"

        def build(self, m):
            m.shared(total=1)
            p = m.program("p")
            p.step("bump", bump, next=DONE)
            m.thread("t", p)
            m.invariant("not past 10**20", lambda s: s.total != 100000000000000000001)
''')


def test_edited_source_is_not_rewritten(tmp_path, monkeypatch):
    path = tmp_path / "edited_model.py"
    path.write_text(V1)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("edited_model", None)
    mod = importlib.import_module("edited_model")
    # Edited on disk after import (an editor, a REPL session): one constant, same value by ==.
    path.write_text(V1.replace("s.total + 100000000000000000000", "s.total + 1e20"))
    future = time.time() + 10
    os.utime(path, (future, future))

    monkeypatch.setattr(specialize, "ENABLED", False)
    plain = check(mod.Edited, engine="plain")
    monkeypatch.setattr(specialize, "ENABLED", True)
    fast = check(mod.Edited, engine="plain")
    assert plain.verdict == "invariant"  # the code that was imported: 1 + 10**20
    assert fast.verdict == plain.verdict  # fails: the rewrite ran the edited text, 1 + 1e20 == 1e20: "ok"


def test_reloaded_module_uses_its_own_source(tmp_path, monkeypatch):
    """The proper workflow -- edit, then importlib.reload -- goes wrong too: specialize._cache keys a file's
    parsed tree by (filename, number of lines, first line), not its content, so the tree of the *old* text is
    reused for the reloaded code, and _same_code's == lets it through."""
    path = tmp_path / "reloaded_model.py"
    path.write_text(V1.replace("s.total + 100000000000000000000", "s.total + 1e20"))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("reloaded_model", None)
    mod = importlib.import_module("reloaded_model")
    check(mod.Edited, engine="plain")  # specialized once: the file's tree is cached
    path.write_text(V1)  # the fix: an exact int; same number of lines, same first line
    future = time.time() + 10
    os.utime(path, (future, future))
    mod = importlib.reload(mod)

    monkeypatch.setattr(specialize, "ENABLED", False)
    plain = check(mod.Edited, engine="plain")
    monkeypatch.setattr(specialize, "ENABLED", True)
    fast = check(mod.Edited, engine="plain")
    assert plain.verdict == "invariant"
    assert fast.verdict == plain.verdict  # fails: the cached tree of the old text (1e20) was rewritten: "ok"
