"""Mutants of the package's own methods, for tests that show a check catches what it is for."""

import inspect
import sys
import textwrap
from typing import Any

#: ``take_returned``'s atomic store of an outcome put back, and the mutant's split of it: the entry is
#: removed, a call into C is made (an interruption point), then the entry is stored.
ATOMIC_PUT_BACK = "self.stash = entry; del returned[0]  # noqa: E702"
SPLIT_PUT_BACK = "del returned[0]\n            len(returned)\n            self.stash = entry"


def mutant(cls: type, name: str, old: str, new: str) -> Any:
    """``cls.name`` with ``old`` replaced by ``new`` in its source, compiled under its own module's file name
    (so that the interrupt injector counts its points as the package's) in that module's namespace."""
    module = sys.modules[cls.__module__]
    src = textwrap.dedent(inspect.getsource(getattr(cls, name)))
    assert old in src, f"{cls.__name__}.{name} no longer contains {old!r}"
    namespace = dict(vars(module))
    exec(compile(src.replace(old, new), module.__file__, "exec"), namespace)  # noqa: S102 - our own source
    return namespace[name]
