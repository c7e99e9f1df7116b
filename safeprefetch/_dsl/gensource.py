"""Where generated modules' source lives: ``linecache``, under a file name that traces as ``codegen.py``.

What it guarantees
------------------
* **A traceback through generated code shows its line**, and ``inspect``
  finds its source: the text is registered with ``linecache`` under the
  module's own file name.
* **The name is a path to codegen.py.** ``.../_dsl/generated-TAG/../codegen.py``
  is a name of its own (so ``linecache`` keeps each module's source apart)
  whose real path is ``codegen.py``: the interrupt-injection sweep, which
  traces safeprefetch's own files by real path, traces the generated
  transitions too, as it traced the generic step path they replace.
* **The text lives as long as the code it describes.** It is unregistered
  when the object owning the generated functions is collected: registered
  for good (``linecache`` never evicts an entry without a file), every shape
  a long-running process ever built kept its module's text, about 48 KB
  each, after the caches had let the transitions go.
"""

from __future__ import annotations

import functools
import linecache
import os
import weakref
from typing import Any

__all__ = ["filename_for", "register"]

_CODEGEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "codegen.py")


def filename_for(tag: str) -> str:
    """The generated module's file name: codegen.py's path, by way of a directory that does not exist."""
    return os.path.join(os.path.dirname(_CODEGEN), f"generated-{tag}", "..", os.path.basename(_CODEGEN))


def register(filename: str, source: str, owner: Any) -> None:
    """Register ``source`` under ``filename`` for as long as ``owner`` (or another owner of the same name:
    the same shape generated again makes the same text) lives."""
    _owners.setdefault(filename, []).append(weakref.ref(owner, functools.partial(_release, filename)))
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


#: File name -> weak references to the objects owning a module of that name (their callbacks release it).
_owners: dict[str, list[weakref.ref]] = {}


def _release(filename: str, _gone: weakref.ref) -> None:
    """An owner was collected: unregister the source once no owner of that name is left."""
    refs = _owners.get(filename)
    if refs is None:
        return
    refs[:] = [r for r in refs if r() is not None]
    if not refs:
        _owners.pop(filename, None)
        linecache.cache.pop(filename, None)
