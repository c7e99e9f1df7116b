"""safeprefetch: a prefetcher for ML pipelines whose protocol is a model-checked state machine.

The public surface:

* :class:`Prefetcher` -- the hardened numpy prefetcher, running the checked
  ``prefetcher`` model on threads (with :class:`Lease`, :class:`PrefetchStats`,
  :class:`PrefetchTimeout`, :class:`PrefetcherClosed`, :class:`LeaseHeld`,
  :class:`PrefetcherWarning`, :class:`PrefetcherExhausted`, :class:`PrefetcherForked`,
  :class:`LeaseReleased`); :class:`NpyFiles` is a ready ``.npy`` source;
  :func:`write_timeline` draws ``pf.timeline()``.
* :class:`OnDemandPrefetcher` -- ``get(i)`` for any index, in any order, with a
  predictor fetching ahead (:class:`Predictor`, :class:`SequentialPredictor`,
  :class:`StridePredictor`, :class:`MarkovPredictor`,
  :class:`AdaptivePredictor`); :class:`OnDemandStats` says whether prediction pays.
* :mod:`safeprefetch.model` -- write models (``Model``, ``DONE``, ``violate``).
* :func:`check`, :func:`explore`, :func:`replay` -- explore a model; results
  are frozen :class:`CheckResult` / :class:`Violation` values.
* :mod:`safeprefetch.testing` -- helpers for checking models from pytest.
* :mod:`safeprefetch.models` -- the bundled catalog of broken and reference models.
"""

from ._tools.catalog import catalog as catalog
from ._tools.catalog import load_model as load_model
from ._check.result import CheckResult as CheckResult
from ._check.result import ReplayDivergence as ReplayDivergence
from ._check.result import Trace as Trace
from ._check.result import TraceError as TraceError
from ._check.result import TraceStep as TraceStep
from ._check.result import Violation as Violation
from ._check.explore import check as check
from ._check.explore import explore as explore
from ._check.replay import replay as replay
from ._check.determinism import NondeterministicModel as NondeterministicModel
from ._check.symmetry_check import SymmetryError as SymmetryError
from ._dsl.model import Model as Model
from ._dsl.model import ModelError as ModelError
from ._prefetcher.api import Prefetcher as Prefetcher
from ._prefetcher.errors import LeaseHeld as LeaseHeld
from ._prefetcher.errors import LeaseReleased as LeaseReleased
from ._prefetcher.errors import PrefetchTimeout as PrefetchTimeout
from ._prefetcher.errors import PrefetcherClosed as PrefetcherClosed
from ._prefetcher.errors import PrefetcherExhausted as PrefetcherExhausted
from ._prefetcher.errors import PrefetcherForked as PrefetcherForked
from ._prefetcher.errors import PrefetcherWarning as PrefetcherWarning
from ._prefetcher.errors import SourceErrorNotSent as SourceErrorNotSent
from ._prefetcher.lease import Lease as Lease
from ._prefetcher.stats import PrefetchStats as PrefetchStats
from ._prefetcher.npy import NpyFiles as NpyFiles
from ._prefetcher.ondemand import OnDemandPrefetcher as OnDemandPrefetcher
from ._prefetcher.ondemand_stats import OnDemandStats as OnDemandStats
from ._prefetcher.predictors import AdaptivePredictor as AdaptivePredictor
from ._prefetcher.predictors import MarkovPredictor as MarkovPredictor
from ._prefetcher.predictors import Predictor as Predictor
from ._prefetcher.predictors import SequentialPredictor as SequentialPredictor
from ._prefetcher.predictors import StridePredictor as StridePredictor
from ._prefetcher.npy import write_npy_batches as write_npy_batches
from ._prefetcher.timeline import write_timeline as write_timeline

__version__ = "0.1.0"

__all__ = [
    "AdaptivePredictor",
    "CheckResult",
    "Lease",
    "LeaseHeld",
    "LeaseReleased",
    "MarkovPredictor",
    "Model",
    "ModelError",
    "NondeterministicModel",
    "NpyFiles",
    "OnDemandPrefetcher",
    "OnDemandStats",
    "Predictor",
    "PrefetchStats",
    "PrefetchTimeout",
    "Prefetcher",
    "PrefetcherClosed",
    "PrefetcherExhausted",
    "PrefetcherForked",
    "PrefetcherWarning",
    "ReplayDivergence",
    "SequentialPredictor",
    "SourceErrorNotSent",
    "StridePredictor",
    "SymmetryError",
    "Trace",
    "TraceError",
    "TraceStep",
    "Violation",
    "catalog",
    "check",
    "explore",
    "load_model",
    "replay",
    "write_npy_batches",
    "write_timeline",
]
