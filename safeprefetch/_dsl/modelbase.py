"""The Model base class: a configuration space, a ``build`` method, and the way to compile them.

A model is a class. Its ``params`` are its configuration space (with
defaults), every model also takes the *settings* (``notify``,
``spurious``, ``policy``, ``fairness``), and its ``build(m, **config)`` declares the
machine on a :class:`Builder`. :meth:`Model.compile` builds it at one
configuration and compiles it (``compiler.py``); :meth:`Model.graph` builds
it and reads only its program graph, which is cheap: nothing is compiled.

Configuration values usually arrive as text (``--set capacity=2``), so
:meth:`Model.configure` converts each one to the type of its default and
refuses, with a :class:`ModelError` naming the parameter, what does not fit.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .builder import MAX_THREADS, MAX_VALUE_LEN, Builder
from .compiler import builder_graph, compile_model
from .graph import GRAPH_PENDING, GraphStep, did_you_mean
from .machine import Machine
from .violations import VIOLATION_KINDS, ModelError, exited

__all__ = ["Model"]


class Model:
    """Base class of every model. Subclass it and implement :meth:`build`.

    Class attributes:

    * ``name``: the catalog name (``list`` prints it).
    * ``expected``: the verdict this model expects at its default config.
    * ``params``: the config parameters and their defaults.
    * ``sweep``: for reference designs, ``{param: [values]}`` to prove over.
    * ``minimums``: the least value of integer parameters, ``{param: least}``.
      An integer parameter not named there whose default is not negative is a
      count, and may not be set negative; one whose default is negative (a
      sentinel such as ``error_at=-1``) takes any integer.
    * ``graph_checked``: whether compiling requires every computed step to
      declare its targets (``to=``); see graph.py. Leave it True.
    """

    name: str = ""
    expected: str = "ok"
    params: Mapping[str, Any] = {}
    sweep: Mapping[str, Sequence[Any]] | None = None
    #: The least value of each integer parameter named here (see the class doc for the others).
    minimums: Mapping[str, int] = {}

    #: Settings that every model accepts; they change condvar semantics.
    SETTINGS: Mapping[str, tuple[str, ...]] = {"notify": ("fifo", "any"), "spurious": ("off", "on"),
                                               "policy": ("fair", "priority"), "fairness": ("weak", "strong")}

    #: Defaults for the settings above that this model changes (e.g. ``{"policy": "priority"}``).
    settings: Mapping[str, str] = {}

    #: Every step whose next label is computed must declare ``to=`` (graph.py). False lets a model
    #: compile with undeclared computed steps while its declarations are being written.
    graph_checked: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse, when the class is defined, parameters that shadow a setting and settings that do not exist."""
        super().__init_subclass__(**kwargs)
        where = f"model {cls.name or cls.__name__!r}"
        if not isinstance(cls.name, str):
            raise ModelError(f"model {cls.__name__!r}: its name must be a str (the catalog and traces name it), "
                             f"not {cls.name!r}")
        if cls.expected != "ok" and cls.expected not in VIOLATION_KINDS:
            # A typo here made `check --all` fail forever against a verdict no search can give.
            raise ModelError(f"{where}: expected must be 'ok' or a violation kind, not {cls.expected!r}"
                             + did_you_mean(str(cls.expected), ("ok", *VIOLATION_KINDS)))
        clash = sorted(set(cls.params) & set(cls.SETTINGS))
        if clash:
            raise ModelError(f"{where}: parameter {clash[0]!r} has the name of a setting every model takes "
                             f"({', '.join(cls.SETTINGS)}); rename it")
        for key, value in dict(cls.settings).items():
            if key not in cls.SETTINGS:
                raise ModelError(f"{where}: settings names {key!r}, which is not a setting (known: "
                                 f"{', '.join(cls.SETTINGS)})" + did_you_mean(key, cls.SETTINGS))
            if value not in cls.SETTINGS[key]:
                raise ModelError(f"{where}: setting {key} must be one of {'|'.join(cls.SETTINGS[key])}, "
                                 f"not {value!r}")

    def build(self, m: Builder, **config: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- configuration -----------------------------------------------------

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {**dict(cls.params), **{k: v[0] for k, v in cls.SETTINGS.items()}, **dict(cls.settings)}

    @classmethod
    def configure(cls, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The full config: defaults updated with ``overrides``, each checked and converted."""
        config = cls.defaults()
        for key, raw in (overrides or {}).items():
            if key not in config:
                known = ", ".join(sorted(config))
                raise ModelError(f"model {cls.name!r} has no parameter {key!r} (known: {known})"
                                 + did_you_mean(key, config))
            value = config[key] = _convert(key, raw, config[key], cls.SETTINGS.get(key))
            least = cls.minimums.get(key, 0 if _is_int(config[key]) and cls.defaults()[key] >= 0 else None)
            if least is not None and _is_int(value) and value < least:
                raise ModelError(f"model {cls.name!r}: parameter {key} must be at least {least}, not {value}"
                                 + ("" if key in cls.minimums else " (a count)"))
        return config

    @classmethod
    def _built(cls, overrides: Mapping[str, Any] | None, bounded: bool = True) -> tuple[dict[str, Any], Builder]:
        config = cls.configure(overrides)
        b = Builder({k: config[k] for k in cls.SETTINGS}, *((MAX_THREADS, MAX_VALUE_LEN) if bounded else (None, None)))
        model = cls()
        kwargs = {k: v for k, v in config.items() if k not in cls.SETTINGS}  # not inside the with: 3.13
        with exited(f"model {cls.name or cls.__name__!r}: its build"):
            model.build(b, **kwargs)
        return config, b

    @classmethod
    def _graph_strict(cls) -> bool:
        """Whether undeclared computed steps are refused: ``graph_checked``, unless the model (or a model
        it extends) is still listed in GRAPH_PENDING."""
        pending = any(vars(k).get("name") in GRAPH_PENDING for k in cls.__mro__)
        return bool(cls.graph_checked) and not pending

    @classmethod
    def compile(cls, overrides: Mapping[str, Any] | None = None, *, bounded: bool = True) -> Machine:
        """Build this model at ``overrides`` (on top of its defaults) and compile it. ``bounded=False`` lifts
        the checker's bounds on its size (``MAX_THREADS`` threads, ``MAX_VALUE_LEN`` entries a variable),
        for a live runtime that only runs it."""
        config, b = cls._built(overrides, bounded)
        machine = compile_model(cls.name or cls.__name__, config, b, cls._graph_strict())
        machine.model = cls
        return machine

    @classmethod
    def graph(cls, overrides: Mapping[str, Any] | None = None) -> dict[str, dict[str, GraphStep]]:
        """The program graph at ``overrides``, checked, without compiling: ``compile(...).graph``."""
        _config, b = cls._built(overrides)
        return builder_graph(b, cls._graph_strict())


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _convert(key: str, raw: Any, default: Any, choices: tuple[str, ...] | None) -> Any:
    """``raw`` (often text) as the type of ``default``, or one of ``choices`` for a setting."""
    if choices is not None:
        value = str(raw).lower()
        aliases = {"true": "on", "1": "on", "false": "off", "0": "off"}
        if choices == ("off", "on"):
            value = aliases.get(value, value)
        if value not in choices:
            raise ModelError(f"{key} must be one of {'|'.join(choices)}, not {raw!r}")
        return value
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        text = str(raw).lower()
        if text in ("1", "true", "on", "yes"):
            return True
        if text in ("0", "false", "off", "no"):
            return False
        raise ModelError(f"{key} must be a boolean (on/off), not {raw!r}")
    if isinstance(default, int):
        if isinstance(raw, bool):
            raise ModelError(f"{key} must be an integer, not {raw!r}")
        if isinstance(raw, int):
            return raw
        try:
            return int(str(raw), 10)
        except ValueError:
            raise ModelError(f"{key} must be an integer, not {raw!r}") from None
    if isinstance(default, str):
        return str(raw)
    raise ModelError(f"parameter {key} cannot be set from {raw!r}")
