"""Public namespace for writing models: ``from safeprefetch.model import Model, DONE``."""

from ._dsl.model import DONE as DONE
from ._dsl.model import VIOLATION_KINDS as VIOLATION_KINDS
from ._dsl.model import Builder as Builder
from ._dsl.model import GraphStep as GraphStep
from ._dsl.model import Machine as Machine
from ._dsl.model import Model as Model
from ._dsl.model import ModelError as ModelError
from ._dsl.model import Program as Program
from ._dsl.model import CheckError as CheckError
from ._dsl.model import StepError as StepError
from ._dsl.model import StepInfo as StepInfo
from ._dsl.model import StepViolation as StepViolation
from ._dsl.model import delivery_violation as delivery_violation
from ._dsl.model import violate as violate

__all__ = ["DONE", "VIOLATION_KINDS", "Builder", "CheckError", "GraphStep", "Machine", "Model", "ModelError",
           "Program", "StepError", "StepInfo", "StepViolation", "delivery_violation", "violate"]
