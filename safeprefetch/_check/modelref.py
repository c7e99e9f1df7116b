"""A Model class by reference, so that another process can get it back.

What it guarantees
------------------
:meth:`ModelRef.of` records how to find a :class:`~.._dsl.model.Model`
subclass again, and :meth:`ModelRef.resolve`, run in a worker process,
returns that class:

* a class in an importable module (the catalog, a user's package, a test
  module on ``sys.path``) is found by module name and qualified name;
* a class loaded from a user's ``.py`` file (whose module, named by the
  loader, is importable nowhere else) is found by re-importing that file
  with :mod:`importlib` under the same module name.

A process that already holds the module (a forked one) takes it from
``sys.modules``; any other -- a dask worker, here or on another machine --
imports it afresh. Only names and a path cross the process boundary, which
is what lets the cluster search (:mod:`.cluster`) run on workers that share
nothing with the caller but the installed package and the model's file.

Why not pickle the class? Pickle finds a class by module and qualified name
too, and fails exactly where this helper does more: a module loaded from a
file. Why not a catalog name? Resolving names is the catalog's job, one
layer up (``safeprefetch._tools.catalog``); the checking layer must not
import it, so the caller resolves names and hands a class down.

A class defined inside a function cannot be found by name in another
process; :meth:`ModelRef.of` refuses it with a :class:`ModelError` before
any process starts.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass

from .._dsl.model import Model, ModelError
from .._dsl.violations import USER_ERRORS

__all__ = ["ModelRef"]


@dataclass(frozen=True)
class ModelRef:
    """Where a Model class lives: its module, its qualified name, and the file it came from."""

    #: The module's ``__name__``.
    module: str
    #: The class's ``__qualname__`` within that module.
    qualname: str
    #: The module's source file, or None (a module without one).
    path: str | None = None

    @classmethod
    def of(cls, model: type[Model]) -> "ModelRef":
        if not (isinstance(model, type) and issubclass(model, Model)):
            raise ModelError(f"expected a Model class, not {type(model).__name__} {model!r} "
                             "(resolve a catalog name or a .py path with safeprefetch.load_model first)")
        if "<locals>" in model.__qualname__:
            raise ModelError(f"model class {model.__qualname__!r} is defined inside a function, so another "
                             "process cannot find it; define it at module level")
        module = sys.modules.get(model.__module__)
        path = getattr(module, "__file__", None)
        return cls(model.__module__, model.__qualname__, str(path) if path else None)

    def resolve(self) -> type[Model]:
        """The class, importing its module (or its file) if this process does not hold it yet."""
        module = sys.modules.get(self.module)
        if module is None:
            if self.path is not None and importlib.util.find_spec(self.module.partition(".")[0]) is None:
                module = self._import_file()
            else:
                module = importlib.import_module(self.module)
        value = module
        for part in self.qualname.split("."):
            value = getattr(value, part, None)
        if not (isinstance(value, type) and issubclass(value, Model)):
            raise ModelError(f"{self.module} has no Model class {self.qualname!r}")
        return value

    def _import_file(self):
        spec = importlib.util.spec_from_file_location(self.module, self.path)
        if spec is None or spec.loader is None:
            raise ModelError(f"cannot import {self.path!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.module] = module
        try:
            spec.loader.exec_module(module)
        except USER_ERRORS as e:  # a failure in user code (sys.exit too) is a model error, in one line
            sys.modules.pop(self.module, None)
            raise ModelError(f"cannot import {self.path!r}: {type(e).__name__}: {e}") from None
        return module
