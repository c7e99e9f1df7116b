"""safeprefetch: a prefetcher for ML pipelines whose protocol is a model-checked state machine.

The public surface:

* :class:`Prefetcher` -- the hardened numpy prefetcher, running the checked
  ``prefetcher`` model on threads (with :class:`Lease`, :class:`PrefetchStats`,
  :class:`PrefetchTimeout`, :class:`PrefetcherClosed`, :class:`LeaseHeld`,
  :class:`PrefetcherWarning`, :class:`PrefetcherExhausted`, :class:`PrefetcherForked`,
  :class:`LeaseReleased`); :class:`NpyFiles` is a ready ``.npy`` source;
  :func:`write_timeline` draws ``pf.timeline()``.
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
from ._prefetcher import Lease as Lease
from ._prefetcher import LeaseHeld as LeaseHeld
from ._prefetcher import LeaseReleased as LeaseReleased
from ._prefetcher import PrefetchStats as PrefetchStats
from ._prefetcher import PrefetchTimeout as PrefetchTimeout
from ._prefetcher import Prefetcher as Prefetcher
from ._prefetcher import PrefetcherClosed as PrefetcherClosed
from ._prefetcher import PrefetcherExhausted as PrefetcherExhausted
from ._prefetcher import PrefetcherForked as PrefetcherForked
from ._prefetcher import PrefetcherWarning as PrefetcherWarning
from ._sources import NpyFiles as NpyFiles
from ._sources import write_npy_batches as write_npy_batches
from ._timeline import write_timeline as write_timeline

__version__ = "0.1.0"

__all__ = [
    "CheckResult",
    "Lease",
    "LeaseHeld",
    "LeaseReleased",
    "Model",
    "ModelError",
    "NpyFiles",
    "PrefetchStats",
    "PrefetchTimeout",
    "Prefetcher",
    "PrefetcherClosed",
    "PrefetcherExhausted",
    "PrefetcherForked",
    "PrefetcherWarning",
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
    "write_npy_batches",
    "write_timeline",
]
