"""``engine="auto"`` builds the compiled expansion in a child process while a big search goes on, and the
search switches to it once it is built; the build lands in the cache either way.

Every wait here is on the build's own process (observable state), never a timer: the progress callback
holds the search until the child has exited, so the switch happens at a known point.
"""

import os

import pytest

from safeprefetch._check import explorer as explorer_module, extension
from safeprefetch._check.explorer import Explorer
from _cython import cython_here
from test_generated_explorer_attacks import CountTo  # x counts to hi, then stop: hi + 2 states

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def _small_thresholds(tmp_path, monkeypatch):
    if not cython_here():
        pytest.skip("the compiled engine needs Cython")
    monkeypatch.setenv("SAFEPREFETCH_CACHE", str(tmp_path))
    monkeypatch.delenv("SAFEPREFETCH_BACKGROUND_BUILD", raising=False)
    monkeypatch.setattr(explorer_module, "AUTO_STATES", 1_000)
    monkeypatch.setattr(explorer_module, "BUILD_STATES", 3_000)
    for table in ("_FREE", "_FIRST", "_INSTANCES", "_BACKGROUND"):  # as in a new process: nothing loaded or building
        monkeypatch.setattr(extension, table, {})


def _search(hi, hold_until_built=False, **kw):
    """An auto search of the counter, its progress reported at every block of 1024 states; with
    ``hold_until_built``, the first report after the build started waits for the build's process to exit."""
    held = []

    def progress(states, frontier, transitions):
        if hold_until_built and e.build is not None and not held:
            held.append(states)
            e.build.proc.wait()

    e = Explorer(CountTo.compile({"hi": hi}), reduce="none", engine="auto", progress=progress, progress_every=0.0,
                 **kw)
    return e, e.run(), held


def test_a_big_auto_search_switches_to_the_compiled_expansion_once_its_build_is_done():
    e, r, held = _search(20_000, hold_until_built=True)
    assert (r.states, r.verdict, r.exhaustive) == (20_002, "ok", True)
    assert e.engine_used == "compiled" and held and held[0] >= 3_000
    assert "background" in e.engine_note and e.build is None
    assert list(extension.cache_dir().glob("_safeprefetch_explore_*"))  # in the cache: the next search starts on it
    again = Explorer(CountTo.compile({"hi": 20_000}), reduce="none", engine="auto")
    assert again.run().states == 20_002 and again.engine_used == "compiled" and again.build is None


def test_a_search_that_ends_first_leaves_its_build_running_into_the_cache():
    e, r, _ = _search(5_000)
    assert r.states == 5_002
    if e.build is None:  # pragma: no cover - the build beat a 5,000-state search: it was adopted
        assert e.engine_used == "compiled"
        return
    assert e.engine_used == "generated"
    e.build.proc.wait()
    assert e.build.done() and e.build.error is None and e.build.target.exists()
    assert not [p for p in extension.cache_dir().iterdir() if p.name.startswith("build-")]  # cleaned up


def test_a_failed_background_build_says_why_and_the_search_goes_on(monkeypatch):
    monkeypatch.setenv("CC", "false")  # a C compiler that always fails
    e, r, held = _search(20_000, hold_until_built=True)
    assert r.states == 20_002 and held
    assert e.engine_used == "generated"
    assert "background build failed" in e.engine_note and "the C compiler failed" in e.engine_note


def test_background_builds_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("SAFEPREFETCH_BACKGROUND_BUILD", "0")
    e, r, _ = _search(20_000)
    assert r.states == 20_002 and e.engine_used == "generated" and e.build is None
    assert not list(extension.cache_dir().glob("*"))


def test_a_search_under_a_small_cap_never_starts_a_build():
    e, r, _ = _search(20_000, max_states=2_500)
    assert not r.exhaustive and e.build is None and e.engine_used == "generated"
    assert not os.path.exists(extension.cache_dir()) or not list(extension.cache_dir().glob("*"))


# -- the build's tools: stopped with it, and never run twice for one module ----------------------------

def _wrapper(tmp_path, body):
    """A C compiler command that logs each call to ``calls`` (with its pid), then runs ``body``."""
    path = tmp_path / "cc-wrapper"
    path.write_text(f"#!/bin/sh\necho $$ >> {tmp_path / 'calls'}\n{body}\n")
    path.chmod(0o755)
    return str(path)


def _calls(tmp_path):
    log = tmp_path / "calls"
    return log.read_text().split() if log.exists() else []


def _until(predicate, what, seconds=120.0):
    import time
    end = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        os.sched_yield()


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # a zombie nobody reaps is dead too
    except FileNotFoundError:
        return True


def _waiting_on_a_build(thread):
    """Whether ``thread`` is blocked in ``Popen.wait`` under ``extension._compile``: it has chosen its build."""
    import sys
    frame = sys._current_frames().get(thread.ident)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "_compile" in names and "_wait" in names


def test_a_ctrl_c_during_a_foreground_build_stops_the_compiler_too(tmp_path, monkeypatch):
    # The build runs as a child process, which runs cython and the C compiler. A KeyboardInterrupt in the
    # caller killed the child only: the compiler ran on, orphaned, writing into a directory just removed.
    import signal
    import subprocess
    import sys

    cc = _wrapper(tmp_path, "exec sleep 600")  # a compiler that takes ten minutes
    script = ("from safeprefetch._check import extension\n"
              "try:\n    extension.build('def f():\\n    return 1\\n', 'ctrl-c')\n"
              "except KeyboardInterrupt:\n    print('interrupted')\n")
    env = {**os.environ, "CC": cc, "SAFEPREFETCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        _until(lambda: _calls(tmp_path), "the build to reach the C compiler")
        (compiler_pid,) = map(int, _calls(tmp_path))
        proc.send_signal(signal.SIGINT)  # to the caller alone, as a signal from another process would be
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert out.strip() == "interrupted"
    _until(lambda: _gone(compiler_pid), "the compiler to be stopped with the build", seconds=20.0)
    assert list((tmp_path / "cache").glob("build-*")) == []  # its work directory went with it


def test_a_foreground_build_waits_for_the_background_build_of_the_same_module(tmp_path, monkeypatch):
    # build() started a second child for a module a background build was compiling already.
    import shutil
    import threading

    go = tmp_path / "go"
    real = shutil.which("cc") or shutil.which("gcc")
    monkeypatch.setenv("CC", _wrapper(tmp_path, f'while [ ! -e {go} ]; do sleep 0.01; done\nexec {real} "$@"'))
    source = "def f():\n    return 41 + 1\n"
    background = extension.start(source, "shared")
    _until(lambda: _calls(tmp_path), "the background build to reach the C compiler")
    got = []
    caller = threading.Thread(target=lambda: got.append(extension.build(source, "shared")))
    caller.start()
    _until(lambda: _waiting_on_a_build(caller), "the foreground caller to wait on a build")
    go.touch()
    caller.join(timeout=240)
    assert not caller.is_alive()
    module, path, _seconds = got[0]
    assert module.f() == 42 and path == str(background.target)
    assert len(_calls(tmp_path)) == 1  # one compiler run for the one module
