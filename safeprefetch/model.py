"""Public namespace for writing models: ``from safeprefetch.model import Model, DONE``."""

from ._model import DONE as DONE
from ._model import VIOLATION_KINDS as VIOLATION_KINDS
from ._model import Builder as Builder
from ._model import Machine as Machine
from ._model import Model as Model
from ._model import ModelError as ModelError
from ._model import Program as Program
from ._model import StepInfo as StepInfo
from ._model import StepViolation as StepViolation
from ._model import delivery_violation as delivery_violation
from ._model import violate as violate

__all__ = ["DONE", "VIOLATION_KINDS", "Builder", "Machine", "Model", "ModelError", "Program", "StepInfo",
           "StepViolation", "delivery_violation", "violate"]
