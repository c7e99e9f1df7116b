"""The worker's fetch in C (``_prefetcher/cfetch.py``) against the Python action it replaces.

Every source here is drained twice, by a typed Prefetcher with the C action and by one whose action stayed
``FetchSide._fetch`` (``cfetch.install`` switched off): the same outcome at every position -- the same bytes, or
the same exception type and message -- over plain and padded dtypes, a shuffled plan, items that are not plain
arrays of the batch's layout (Fortran order, a subclass, a list, another dtype, another shape), a source that
raises, one that raises StopIteration, and sources the C action hands to ``_fetch`` (``thread_safe=False``,
``fetch_into``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
from _cython import cython_here

from safeprefetch import Prefetcher
from safeprefetch._prefetcher import cconsumer, cfetch

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not cython_here(), reason="needs Cython (speed extra)")]

N = 24
_PADDED = np.dtype({"names": ["label", "weight"], "formats": ["u1", "<f8"], "offsets": [0, 8], "itemsize": 24})


class Source:
    """A map-style source of ``N`` items ``make(i)``."""

    def __init__(self, make: Callable[[int], Any]) -> None:
        self.make = make

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> Any:
        return self.make(i)


def _outcomes(source: Any, c_action: bool, monkeypatch, **kw: Any) -> list:
    """Each position's outcome: ("ok", the batch's bytes) or (exception type, message), and whether the C
    action was the one installed."""
    if not c_action:
        monkeypatch.setattr(cfetch, "install", lambda core, module: None)
    try:
        got: list = []
        with Prefetcher(source, capacity=4, runtime="typed", **kw) as pf:
            action = pf._core.rt.actions["fetch"]
            while True:
                try:
                    b = pf.get()
                except StopIteration:
                    break
                except Exception as e:  # noqa: BLE001 - the outcome compared
                    got.append((type(e).__name__, str(e)))
                    continue
                got.append(("ok", b.dtype.str, b.shape, b.tobytes()))
        return [getattr(action, "__name__", ""), got]
    finally:
        monkeypatch.undo()


def _float(i: int) -> np.ndarray:
    return np.full((2, 3), i, np.float32)


class Sub(np.ndarray):
    pass


def _raising(error: BaseException, at: int) -> Callable[[int], np.ndarray]:
    def make(i: int) -> np.ndarray:
        if i == at:
            raise error
        return _float(i)
    return make


SOURCES = {
    "plain": lambda i: _float(i),
    "fortran": lambda i: np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3) + i),
    "subclass": lambda i: _float(i).view(Sub),
    "list": lambda i: _float(i).tolist(),
    "another dtype at 5": lambda i: _float(i).astype(np.float64) if i == 5 else _float(i),
    "another shape at 7": lambda i: np.zeros((3, 2), np.float32) if i == 7 else _float(i),
    "raises at 4": _raising(ValueError("bad item"), 4),
    "StopIteration at 3": _raising(StopIteration("out"), 3),
    "a non-contiguous view": lambda i: np.full((2, 6), i, np.float32)[:, ::2],
}


@pytest.mark.parametrize("name", list(SOURCES))
def test_the_c_action_gives_the_python_actions_outcomes(name, monkeypatch):
    make = SOURCES[name]
    fast_name, fast = _outcomes(Source(make), True, monkeypatch)
    slow_name, slow = _outcomes(Source(make), False, monkeypatch)
    # The C action ran, and the Python one; a source whose first item is not an array leaves the batch's
    # layout unknown (no pool), and then no fast path is installed at all.
    assert fast_name == ("_fetch" if name == "list" else "fetch") and slow_name == "_fetch"
    assert fast == slow
    assert len(fast) == N or fast[-1][0] != "ok"  # whole, or up to the source's error


@pytest.mark.parametrize("dtype", [np.float32, np.bool_, np.dtype(">i4"), _PADDED, np.dtype("U3")])
def test_arrays_of_several_dtypes_shuffled(dtype, monkeypatch):
    rng = np.random.default_rng(5)
    data = np.zeros((N, 4), dtype)
    if data.dtype.names:
        data["label"], data["weight"] = rng.integers(0, 255, (N, 4)), rng.standard_normal((N, 4))
    elif data.dtype.kind == "U":
        data[...] = rng.integers(0, 999, (N, 4)).astype(str)
    else:
        data[...] = rng.integers(0, 2, (N, 4)).astype(dtype)
    fast = _outcomes(data, True, monkeypatch, shuffle=True, seed=3)
    slow = _outcomes(data, False, monkeypatch, shuffle=True, seed=3)
    assert fast[0] == "fetch" and slow[0] == "_fetch"
    assert fast[1] == slow[1] and len(fast[1]) == N


@pytest.mark.parametrize("kw", [{"thread_safe": False}], ids=["thread_safe=False"])
def test_a_source_the_c_action_hands_to_the_python_one(kw, monkeypatch):
    fast = _outcomes(Source(SOURCES["plain"]), True, monkeypatch, **kw)
    slow = _outcomes(Source(SOURCES["plain"]), False, monkeypatch, **kw)
    assert fast[0] == "fetch" and fast[1] == slow[1] and len(fast[1]) == N


def test_fetch_time_is_counted(monkeypatch):
    assert cconsumer.load() is not None
    with Prefetcher(Source(SOURCES["plain"]), capacity=4, runtime="typed") as pf:
        assert pf._core.rt.actions["fetch"].__name__ == "fetch"
        list(pf)
        assert sum(pf._core.counts.fetch_seconds) > 0


class FetchInto:
    """A ``fetch_into`` source of ``N`` items: fills ``out`` with ``i``; at ``bad`` it returns False (a failed
    read, refused by ``fill_into``) or raises."""

    def __init__(self, bad: int = -1, how: str = "") -> None:
        self.bad, self.how = bad, how

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> np.ndarray:
        return _float(i)

    def fetch_into(self, i: int, out: np.ndarray) -> Any:
        if i == self.bad and self.how == "raise":
            raise OSError(f"read of {i} failed")
        out[...] = i
        return False if i == self.bad else None


@pytest.mark.parametrize("bad, how", [(-1, ""), (6, "false"), (9, "raise")], ids=["whole", "False at 6", "raises at 9"])
def test_a_fetch_into_source_gives_the_python_actions_outcomes(bad, how, monkeypatch):
    fast = _outcomes(FetchInto(bad, how), True, monkeypatch, shuffle=True, seed=2)
    slow = _outcomes(FetchInto(bad, how), False, monkeypatch, shuffle=True, seed=2)
    assert fast[0] == "fetch" and slow[0] == "_fetch"
    assert fast[1] == slow[1]
    assert len(fast[1]) == N if bad < 0 else fast[1][-1][0] in ("TypeError", "OSError")
