"""safeprefetch: a prefetcher for ML pipelines whose protocol is a model-checked state machine.

The public surface:

* :mod:`safeprefetch.model` -- write models (``Model``, ``DONE``, ``violate``).
* :func:`check`, :func:`explore`, :func:`replay` -- explore a model; results
  are frozen :class:`CheckResult` / :class:`Violation` values.
* :mod:`safeprefetch.testing` -- helpers for checking models from pytest.
* :mod:`safeprefetch.models` -- the bundled catalog of broken and reference models.
"""

from ._catalog import catalog as catalog
from ._catalog import load_model as load_model
from ._explore import CheckResult as CheckResult
from ._explore import ReplayDivergence as ReplayDivergence
from ._explore import Trace as Trace
from ._explore import TraceError as TraceError
from ._explore import TraceStep as TraceStep
from ._explore import Violation as Violation
from ._explore import check as check
from ._explore import explore as explore
from ._explore import replay as replay
from ._model import Model as Model
from ._model import ModelError as ModelError

__version__ = "0.1.0"

__all__ = [
    "CheckResult",
    "Model",
    "ModelError",
    "ReplayDivergence",
    "Trace",
    "TraceError",
    "TraceStep",
    "Violation",
    "catalog",
    "check",
    "explore",
    "load_model",
    "replay",
]
