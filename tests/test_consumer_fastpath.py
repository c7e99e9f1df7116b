"""The consumer's per-batch path with its calls trimmed (docs/performance.md §25): the same bytes, the same
dispatch, the same errors as the plain calls it replaced.

* ``copy_prefetched`` into a plain ndarray calls numpy's C copy directly (``np.copyto`` less its
  ``__array_function__`` dispatch). An ``out`` of a subclass that overrides ``__array_function__`` must still
  see the call, and the same call: ``np.copyto(out, batch, casting="no")``, as ``_adapt`` makes it. Checked by
  a subclass that records it and unpacks it as the documented call (``dst, src = args``, ``casting`` by
  keyword). (Review 25: the copy passed ``casting`` positionally to the override too; it was asked
  ``args=(out, batch, "no")`` with no keyword, and an override that unpacks two arguments raised ValueError.)
* The direct copy against ``np.copyto`` itself, over dtypes and layouts (a padded record, a bool, 0-d batches,
  Fortran order, a strided ``out``): the same bytes, and the same error for an ``out`` it cannot write.
"""

from __future__ import annotations

import numpy as np
import pytest

from safeprefetch import Prefetcher
from safeprefetch._prefetcher import consumer

pytestmark = pytest.mark.timeout(60)

_PADDED = np.dtype({"names": ["label", "weight"], "formats": ["u1", "<f8"], "offsets": [0, 8], "itemsize": 24})


class Recording(np.ndarray):
    """An ndarray subclass whose ``__array_function__`` records each numpy function it is asked to run, with
    the call's shape (how many positional arguments, which keywords); it takes ``np.copyto`` as the documented
    call, ``(dst, src)`` and ``casting`` by keyword, as an override written for that call may unpack it."""

    seen: list = []

    def __array_function__(self, func, types, args, kwargs):
        Recording.seen.append((func, len(args), dict(kwargs)))
        if func is np.copyto:
            dst, src = args  # a third positional argument: ValueError
            np.copyto(dst.view(np.ndarray), src, casting=kwargs.get("casting", "same_kind"))
            return None
        return super().__array_function__(func, types, args, kwargs)


def test_an_out_that_overrides_array_function_still_sees_the_copy():
    source = np.arange(24, dtype=np.float32).reshape(6, 4)
    Recording.seen = []
    with Prefetcher(source, capacity=2) as pf:
        out = np.zeros(4, np.float32).view(Recording)
        for i in range(6):
            assert pf.copy_prefetched(out)
            assert np.array_equal(np.asarray(out), source[i])
        assert not pf.copy_prefetched(out)
    # One dispatch per batch copied into the subclass, each the call np.copyto(out, batch, casting="no").
    assert Recording.seen == [(np.copyto, 2, {"casting": "no"})] * 6


def test_a_plain_out_gets_every_batch_in_order():
    source = np.random.default_rng(3).standard_normal((40, 3, 5)).astype(np.float32)
    with Prefetcher(source, capacity=3) as pf:
        out = np.empty((3, 5), np.float32)
        got = []
        while pf.copy_prefetched(out):
            got.append(out.copy())
    assert np.array_equal(np.stack(got), source)


def _cases():
    """(name, batch, a maker of a fresh ``out``): each side copies into its own ``out``, made the same way
    (``np.zeros``: a padded dtype's padding zero in both, where ``out.copy()`` would leave it unset)."""
    rng = np.random.default_rng(7)
    padded = np.zeros(5, _PADDED)
    padded["label"], padded["weight"] = np.arange(5), rng.standard_normal(5)
    yield "padded record", padded, lambda: np.zeros(5, _PADDED)
    yield "bool", rng.integers(0, 2, (3, 4)).astype(bool), lambda: np.zeros((3, 4), bool)
    yield "0-d", np.array(2.5), lambda: np.zeros((), np.float64)
    yield "Fortran order", np.asfortranarray(rng.standard_normal((4, 3))), lambda: np.zeros((4, 3), order="F")
    yield "C source into F out", rng.standard_normal((4, 3)), lambda: np.zeros((4, 3), order="F")
    yield "strided out", rng.standard_normal(6), lambda: np.zeros(12)[::2]


@pytest.mark.parametrize("name, src, make_out", list(_cases()), ids=[c[0] for c in _cases()])
def test_the_direct_copy_writes_what_np_copyto_writes(name, src, make_out):
    plain, direct = make_out(), make_out()
    np.copyto(plain, src, "no")
    consumer._copyto_plain(direct, src, "no")
    assert plain.tobytes() == direct.tobytes()
    assert np.array_equal(direct, src)


def test_the_direct_copy_refuses_what_np_copyto_refuses():
    src = np.ones(4, np.float32)
    read_only = np.zeros(4, np.float32)
    read_only.flags.writeable = False
    for out, kind in ((read_only, ValueError), (np.zeros(4, np.float64), TypeError)):
        with pytest.raises(kind) as plain:
            np.copyto(out, src, "no")
        with pytest.raises(kind) as direct:
            consumer._copyto_plain(out, src, "no")
        assert str(plain.value) == str(direct.value)


@pytest.mark.parametrize("api", ["get", "copy_prefetched"])
def test_a_run_is_given_back_with_its_last_batch(api):
    """``_serve`` gives the model consumer's run back in the call that stashes its last batch, not the next one
    (review 25: the run's position is kept in a local; one left stale kept each run held a call longer)."""
    from safeprefetch.models import _protocol as P

    source = np.arange(60, dtype=np.int64).reshape(30, 2)
    with Prefetcher(source, capacity=4) as pf:
        core, out, got, ends = pf._core, np.zeros(2, np.int64), [], 0
        for _ in range(30):
            got.append(int(pf.get()[0]) if api == "get" else pf.copy_prefetched(out) and int(out[0]))
            if core.run_next >= len(core.run):  # the run's last batch: given back already
                ends += 1
                assert core.rt.state[core.i_consumer_pc] != P.RELEASE, (got[-1], core.run)
    assert got == list(range(0, 60, 2)) and ends >= 1


def test_the_copy_profile_books_the_direct_copy_and_the_run_as_its_lines():
    """``live_profile.profile_copy`` (the harness of §25's profile): the direct copy is a C built-in, which
    cProfile books as a call of its own, apart from the wrapper that stands for it; and ``_run_of`` builds the
    run with a comprehension (its own frame on 3.11). Both are in their lines (C1, C5), none left as a row of
    its own (fresh review 25: the copy's time was a row beside C1, which had only the wrapper's)."""
    from safeprefetch._harness.live_profile import profile_copy

    table = profile_copy(Prefetcher, mib=0.0001, batches=16, buffered=True, repeats=1)
    loose = [r.line for r in table.rows if "copyto" in r.line.split(" (")[0] and not r.line.startswith("C1 ")
             or r.line.startswith("consumer.py:")]
    assert not loose, loose
    assert any(r.line.startswith("C1 ") for r in table.rows)
