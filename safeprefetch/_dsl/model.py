"""The model vocabulary, in one import: what the checker, the runtime and the tools use from the DSL.

The DSL lives in modules named for what they hold; this module re-exports
their public names so that ``from .._dsl.model import Machine, DONE`` keeps
working across the package (``safeprefetch.model`` is the public face of the
same names):

* ``violations.py`` -- VIOLATION_KINDS, StepViolation, violate, ModelError,
  StepError, delivery_violation;
* ``program.py``    -- DONE, Program (labelled steps, ``next`` and ``to=``);
* ``builder.py``    -- Builder (what ``build`` talks to);
* ``graph.py``      -- GraphStep and the declared program graph;
* ``machine.py``    -- Machine and StepInfo (what every driver consumes);
* ``modelbase.py``  -- Model (configuration and ``compile``);
* ``compiler.py``, ``layout.py``, ``user_steps.py``, ``primitives.py``,
  ``views.py``, ``specialize.py`` -- how a model becomes a Machine;
  ``usererror.py`` -- how an exception in the model's own code is reported.

Nothing in the DSL imports ``threading``: it describes machines, it does
not run them.
"""

from __future__ import annotations

from .builder import Builder as Builder
from .graph import GraphStep as GraphStep
from .machine import Machine as Machine
from .machine import StepInfo as StepInfo
from .modelbase import Model as Model
from .program import DONE as DONE
from .program import Program as Program
from .violations import VIOLATION_KINDS as VIOLATION_KINDS
from .violations import CheckError as CheckError
from .violations import ModelError as ModelError
from .violations import StepError as StepError
from .violations import StepViolation as StepViolation
from .violations import delivery_violation as delivery_violation
from .violations import violate as violate

__all__ = [
    "DONE",
    "VIOLATION_KINDS",
    "Builder",
    "CheckError",
    "GraphStep",
    "delivery_violation",
    "Machine",
    "Model",
    "ModelError",
    "Program",
    "StepError",
    "StepInfo",
    "StepViolation",
    "violate",
]
