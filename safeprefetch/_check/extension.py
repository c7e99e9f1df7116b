"""Building, caching and loading the compiled expansion: one loaded instance per search.

What it guarantees
------------------
*Built once per configuration.* :func:`build` compiles a Cython source to
a C extension and keeps it in the cache (``SAFEPREFETCH_CACHE``, default
``~/.cache/safeprefetch``) under a hash of the source, a description of the
values the module binds by name, Cython's and Python's versions and the C
flags. A build is written beside its final place and renamed into it, so
two processes building the same key at once leave one whole file. Its
last bytes are the SHA-256 of the rest, and a file is loaded only when it
still matches (:func:`intact`); otherwise it is built again, never mapped
as it is (a cut-short file killed the process with SIGBUS).

*One build per module, stopped whole.* A foreground build of a module that a
background build (:func:`start`) is compiling already waits for that build
instead of starting a second. A build runs in its own process group, so a
Ctrl-C in the caller stops the build's child and the tools it runs
(cython, the C compiler) together, and removes its work directory; the
terminal's Ctrl-C reaches the caller, not the build, so a background build
that another search started runs on into the cache.

*No two searches share a loaded instance.* The generated module reads the
model's values from its own globals, which the caller binds after loading.
A C extension is loaded once per file and process -- loading the same file
again returns the same module, whose globals are shared -- so two searches
at once (threads) whose cache keys are equal would share one set of
bindings, the later one's. The description behind the key tells most
values apart, but not all (a function's globals, for one, are not in it),
and nothing could prove it does. So :func:`build` hands each caller an
instance for itself: one returned by an earlier search, if any is free,
else a new one, loaded from a private copy of the cached file (a different
file is a different shared object to the dynamic loader, with its own
statics). The caller gives it back with :func:`release` when its search is
over. Taking and giving back are ``list.pop`` and ``list.append``, which
are atomic in CPython: no lock is needed, and this layer imports no
``threading``. Copies are loaded only while searches overlap, and the
dynamic loader never unloads one: a process holds as many instances as
its most compiled searches at once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import types
from pathlib import Path

from .._dsl.model import ModelError

__all__ = ["CFLAGS", "Build", "CompileUnavailable", "build", "cache_dir", "compiler", "cython_available", "intact",
           "release", "run", "start"]

#: How the extension is compiled (part of the cache key). No ``-march=native``: a cache directory may be
#: shared by machines of different CPUs.
CFLAGS = ("-O2", "-shared", "-fPIC", "-w")

#: Loaded instances no search is using, by module name (each search takes one and gives it back).
_FREE: dict[str, list[types.ModuleType]] = {}
#: Who loaded the cached file itself, by module name: loading that path again gives back the same instance,
#: so every later instance is loaded from a copy.
_FIRST: dict[str, object] = {}
#: Every instance loaded in this process, by module name (the dynamic loader never unloads one).
_INSTANCES: dict[str, list[types.ModuleType]] = {}


class CompileUnavailable(ModelError):
    """The compiled engine was asked for, and Cython or a C compiler is missing (or the build failed)."""


def cython_available() -> bool:
    """Whether the compiled engine can be built here as far as Python goes (Cython importable)."""
    return importlib.util.find_spec("Cython") is not None


def cache_dir() -> Path:
    """Where built extensions are kept: ``SAFEPREFETCH_CACHE``, else ``$XDG_CACHE_HOME/safeprefetch``."""
    env = os.environ.get("SAFEPREFETCH_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "safeprefetch"


def compiler() -> list[str]:
    """The C compiler command: ``CC`` (which may carry a wrapper, ``ccache gcc``), else Python's own, else cc."""
    for spec in (os.environ.get("CC", ""), sysconfig.get_config_var("CC") or "", "cc", "gcc", "clang"):
        words = spec.split()
        if words and shutil.which(words[0]):
            return [shutil.which(words[0]) or words[0], *words[1:]]
    raise CompileUnavailable("engine 'compiled' needs a C compiler (cc, gcc or clang on PATH)")


def build(source: str, extra: str, build: bool = True) -> tuple[types.ModuleType, str, float] | None:
    """An instance of the extension for ``source`` that no other caller holds, with the cached file's
    path and the seconds spent building it (0 when it came from the cache); None if it is not built yet
    and ``build`` is False. Give it back with :func:`release`. Any failure to build, store or load it is
    a :class:`CompileUnavailable` that says what failed."""
    try:
        return _build_or_load(source, extra, build)
    except CompileUnavailable:
        raise
    except (OSError, ImportError) as e:
        raise CompileUnavailable(f"the compiled expansion could not be built or loaded ({type(e).__name__}: {e}); "
                                 f"set SAFEPREFETCH_CACHE to a writable directory, or use --engine generated") from e


def release(module: types.ModuleType) -> None:
    """Give back an instance :func:`build` handed out: a later search may take it (and bind it again)."""
    _FREE.setdefault(module.__name__, []).append(module)


def _build_or_load(source: str, extra: str, build: bool) -> tuple[types.ModuleType, str, float] | None:
    try:
        name, target = _where(source, extra)
    except CompileUnavailable:
        if not build:
            return None  # nothing to load, and not asked to build
        raise
    try:
        return _FREE.setdefault(name, []).pop(), str(target), 0.0
    except IndexError:
        pass  # none loaded, or every one in use
    built = 0.0
    if not intact(target):
        if not build:
            return None
        built = _compile(source, name, target.name[len(name):], target)
    return _load(name, target), str(target), built


def _compile(source: str, name: str, suffix: str, target: Path) -> float:
    t0 = time.perf_counter()
    running = _BACKGROUND.get(name)
    shared = running is not None and not running.done()
    job = running if shared else _start(source, name, suffix, target)
    try:
        job.proc.wait()
    except BaseException:  # a Ctrl-C while it builds: stop our build, with the tools it runs
        if not shared:  # a background build is another search's: it runs on, into the cache
            job.kill()
        raise
    error = job.finish()
    if error is not None:
        raise CompileUnavailable(error)
    return time.perf_counter() - t0


#: The build itself, run as a child process (``python -c``; it imports nothing of ours): Cython, then the C
#: compiler, in a directory beside the cache's file, then an atomic rename into place. A failure prints
#: which tool failed and the tail of its output, and exits 1.
_CHILD = r"""
import hashlib, json, os, shutil, subprocess, sys
job = json.loads(sys.argv[1])
try:
    for what, cmd in (("cython", job["cython"]), ("the C compiler", job["cc"])):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
            sys.stderr.write(what + " failed to build the compiled expansion:\n" + "\n".join(tail)[-8000:])
            sys.exit(1)
    with open(job["so"], "rb+") as f:  # its digest after its last byte, which the dynamic loader never maps
        f.write(job["magic"].encode() + hashlib.sha256(f.read()).hexdigest().encode())
    os.replace(job["so"], job["target"])  # atomic: file and digest arrive together
finally:
    shutil.rmtree(os.path.dirname(job["so"]), ignore_errors=True)  # the parent may be gone: clean up here
"""


class Build:
    """A build of one extension, running in a child process (see :func:`start`)."""

    def __init__(self, proc: subprocess.Popen, workdir: str, target: Path):
        self.proc, self.workdir, self.target = proc, workdir, target
        #: Why the build failed (None: it has not, or not yet).
        self.error: str | None = None

    def done(self) -> bool:
        """Whether the child has exited (then :meth:`finish` has been called)."""
        if self.proc.poll() is None:
            return False
        self.finish()
        return True

    def kill(self) -> None:
        """Stop the build now: the child and every tool it started (they share its process group)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # exited already, group and all
        self.proc.wait()
        self.finish()

    def finish(self) -> str | None:
        """Collect the exited child: None if the extension is in place, else why not. Idempotent."""
        if self.workdir:
            err = self.proc.stderr.read() if self.proc.stderr is not None else ""
            if self.proc.stderr is not None:
                self.proc.stderr.close()
            if self.proc.returncode != 0 or not intact(self.target):
                self.error = err.strip() or f"the build exited with status {self.proc.returncode}"
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = ""
        return self.error


def _start(source: str, name: str, suffix: str, target: Path) -> Build:
    cc = compiler()
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built beside its final place, so the last step is a rename within one file system.
    tmp = tempfile.mkdtemp(prefix="build-", dir=target.parent)
    pyx = Path(tmp) / f"{name}.pyx"
    pyx.write_text(source)
    c, so = pyx.with_suffix(".c"), Path(tmp) / (name + suffix)
    include = sysconfig.get_paths()["include"]
    job = {"cython": [sys.executable, "-m", "cython", "-3", str(pyx), "-o", str(c)],
           "cc": [*cc, *CFLAGS, f"-I{include}", str(c), "-o", str(so)], "so": str(so), "target": str(target),
           "magic": _MAGIC}
    # Its own session: a Ctrl-C at the terminal reaches us, not the build, and we stop it as a whole
    # (Build.kill), or let it run on into the cache when it is a background build.
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(job)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    return Build(proc, tmp, target)


#: Builds started in the background in this process, by module name: one per module at a time.
_BACKGROUND: dict[str, Build] = {}


def start(source: str, extra: str) -> Build | None:
    """Start building the extension for ``source`` in a child process, and return at once: None if it is
    already built (cached); the same build if this process is building it already. Poll it with
    :meth:`Build.done`; once it is, :func:`build` with ``build=False`` loads it. A build the caller stops
    polling runs to its end, so a later search finds it in the cache. Raises :class:`CompileUnavailable`
    without Cython or a C compiler."""
    name, target = _where(source, extra)
    if intact(target):
        return None
    running = _BACKGROUND.get(name)
    if running is not None and (not running.done() or running.error is not None):
        return running  # still building (every caller polls the same build), or failed (it would again)
    try:
        job = _start(source, name, target.name[len(name):], target)
    except OSError as e:
        raise CompileUnavailable(f"the compiled expansion could not be built ({type(e).__name__}: {e})") from e
    _BACKGROUND[name] = job
    return job


#: What precedes the SHA-256 (hex) a build appends to its file.
_MAGIC = "\nsafeprefetch-sha256:"


def intact(target: Path) -> bool:
    """Whether the cache holds ``target`` whole: its bytes hash to the digest its build appended to it.

    A cached file cut short (a full disk, a copy interrupted, a hand-edited cache) was loaded as it was:
    ``dlopen`` mapped it and the process died of SIGBUS with nothing printed, on every later run too, since
    its name said it was built. A file that does not match its digest (or has none) is built again, and
    the new build replaces it. The digest is in the file, not beside it: two builds of one key write
    different bytes (Cython records its build directory), and a digest file beside would be a second
    rename that a concurrent build could pair with the other build's file.
    """
    tail = len(_MAGIC) + 64
    try:
        with open(target, "rb") as f:
            data = f.read()
    except OSError:
        return False
    if len(data) <= tail or data[-tail:-64] != _MAGIC.encode():
        return False
    return hashlib.sha256(data[:-tail]).hexdigest().encode() == data[-64:]


def _where(source: str, extra: str) -> tuple[str, Path]:
    """The module's name (from the cache key, which includes Cython's version) and its file in the cache;
    :class:`CompileUnavailable` without Cython."""
    try:
        import Cython
    except ImportError:
        raise CompileUnavailable("engine 'compiled' needs Cython: pip install 'safeprefetch[speed]'") from None
    key = hashlib.sha256("\n".join([source, extra, Cython.__version__, sys.version, " ".join(CFLAGS)]).encode()
                         ).hexdigest()[:20]
    name = f"_safeprefetch_explore_{key}"
    return name, cache_dir() / (name + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))


def _load(name: str, target: Path) -> types.ModuleType:
    """A new instance of module ``name``: the cached file itself the first time, a private copy after."""
    known = _INSTANCES.setdefault(name, [])
    token = object()
    if _FIRST.setdefault(name, token) is token:  # one caller ever loads the cached file itself (atomic)
        module = _exec(name, target)
        known.append(module)
        return module
    # The same path would give back the instance already loaded; a copy is another object to dlopen.
    fd, copy = tempfile.mkstemp(prefix=name + "-", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    try:
        shutil.copyfile(target, copy)
        module = _exec(name, Path(copy))
    finally:
        try:
            os.unlink(copy)  # the loaded mapping outlives the file's name
        except OSError:  # pragma: no cover - a platform that keeps a loaded library's file open
            pass
    if any(module is m for m in known):  # pragma: no cover - would mean the loader shares copies
        raise CompileUnavailable(f"loading a copy of {target} gave back an instance already in use")
    known.append(module)
    return module


def _exec(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - the path was just written
        raise CompileUnavailable(f"cannot load the built expansion {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(cmd: list[str], what: str) -> None:
    """Run one build command; its failure is a :class:`CompileUnavailable` with the tail of its output."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
        raise CompileUnavailable(f"{what} failed to build the compiled expansion:\n" + "\n".join(tail))
