"""Finding models: the bundled catalog, or a user's own ``.py`` file.

The catalog lives in the top-level ``models/`` directory of the source tree
and is installed as the ``safeprefetch.models`` package, so it is there after
a non-editable install too. Each module defines exactly one :class:`Model`
subclass with a ``name``; that name is what ``list`` prints and ``check``
accepts. A path ending in ``.py`` is imported on its own; any error while
importing it becomes a :class:`ModelError` with a one-line message.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path

from .._dsl.model import Model, ModelError
from .._dsl.violations import USER_ERRORS

__all__ = ["catalog", "load_model", "models_in_module"]


def models_in_module(module) -> list[type[Model]]:
    found = []
    for value in vars(module).values():
        if (isinstance(value, type) and issubclass(value, Model) and value is not Model
                and value.__module__ == module.__name__):
            found.append(value)
    return found


def _only_model(module, where: str) -> type[Model]:
    found = models_in_module(module)
    if not found:
        raise ModelError(f"{where} defines no Model subclass")
    if len(found) > 1:
        names = ", ".join(sorted(m.__name__ for m in found))
        raise ModelError(f"{where} defines several models ({names}); keep one per file")
    model = found[0]
    if not model.__doc__ and module.__doc__:
        model.__doc__ = module.__doc__
    if not model.name:
        model.name = Path(where).stem
    return model


def catalog() -> dict[str, type[Model]]:
    """Every bundled model by name, sorted by name."""
    from .. import models as package

    out: dict[str, type[Model]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        model = _only_model(module, f"catalog module {info.name}")
        if model.name in out:
            raise ModelError(f"two catalog models are named {model.name!r}")
        out[model.name] = model
    return dict(sorted(out.items()))


def load_model(spec: str) -> type[Model]:
    """A catalog name, or a path to a ``.py`` file defining one model."""
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        return _load_file(Path(spec))
    models = catalog()
    try:
        return models[spec]
    except KeyError:
        close = difflib.get_close_matches(spec, list(models), n=3, cutoff=0.6)
        close += [n for n in models if spec.lower() in n.lower() and n not in close]
        hint = f"; did you mean {', '.join(close[:3])}?" if close else "; run `python -m safeprefetch list`"
        raise ModelError(f"unknown model {spec!r}{hint}") from None


def _load_file(path: Path) -> type[Model]:
    if not path.is_file():
        raise ModelError(f"model file {str(path)!r} " + ("is a directory, not a .py file" if path.is_dir()
                                                         else "does not exist"))
    modname = f"_safeprefetch_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"cannot import {str(path)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except USER_ERRORS as e:  # any failure in user code (sys.exit too) is a model error, in one line
        sys.modules.pop(modname, None)
        raise ModelError(f"cannot import {str(path)!r}: {type(e).__name__}: {e}") from None
    return _only_model(module, str(path))
