"""Fresh-eyes review of round 22's merged commits: what the typed transitions still translate differently.

``runtime='typed'`` promises, for every state, exactly the generated Python function's result (equal, and of
the same types) or a fallback to it. A generator expression's variables are its own scope in Python: after
``all(x > 0 for x in t)`` a local ``x`` of the function still holds what it held before. The typed
translation wrote the generator's loop over the function's own C variable of that name, so the local came
out as the tuple's last item. Each test compares every typed function with its generated twin, type by type
(the helpers of ``test_typed_transitions_review``).
"""

import pytest
from _cython import cython_here
from test_typed_transitions_review import _differences, _one_step

pytestmark = pytest.mark.skipif(not cython_here(), reason="the typed transitions need Cython (the speed extra)")


def generator_shadows_a_local(s, me):
    x = s.a
    ok = all(x > 0 for x in s.t)
    s.a = x
    s.b = ok


def enumerated_generator_shadows_locals(s, me):
    k, v = 5, s.a
    found = any(k == v for k, v in enumerate(s.t))
    s.a = k + v
    s.b = found


def test_a_generators_variable_leaves_the_functions_local_of_that_name_alone():
    model = _one_step("typed_gen_shadow", generator_shadows_a_local, a=7, t=(1, 2, 3), b=False)
    assert _differences(model, [(-4, (), False, "go"), (2, (0, 9), True, "go")]) == []


def test_an_enumerated_generators_variables_leave_the_locals_alone():
    model = _one_step("typed_gen_shadow_enum", enumerated_generator_shadows_locals, a=1, t=(4, 1, 2), b=False)
    assert _differences(model, [(0, (), False, "go"), (9, (9, 9), True, "go")]) == []


# -- a memory-mapped source sent to a process pool by its file --------------------------------------------------
#
# Round 22 sends an ``np.memmap`` to a ``ProcessPoolExecutor`` as its file's name, mapped again in the worker. The
# name is not the mapping: a file replaced at that path (a checkpoint rewritten with ``os.replace``) since the
# source was mapped made every batch the new file's rows while the caller's array held the old ones; a file
# unlinked since (a scratch file cleaned up while mapped) failed in the worker's unpickling, which broke the
# caller's pool. Both worked before (the memmap pickled as its bytes).

import concurrent.futures  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402

from safeprefetch import Prefetcher  # noqa: E402


def _mapped(tmp_path):
    path = tmp_path / "rows.npy"
    np.save(path, np.arange(40, dtype=np.float32).reshape(10, 4))
    return path, np.load(path, mmap_mode="r")


def _delivered(source):
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        with Prefetcher(source, capacity=2, workers=2, executor=ex, timeout=60) as pf:
            return [b.copy() for b in pf]


def test_a_memmap_whose_path_now_names_another_file_delivers_its_own_rows(tmp_path):
    path, source = _mapped(tmp_path)
    np.save(tmp_path / "new.npy", -np.ones((10, 4), np.float32))
    os.replace(tmp_path / "new.npy", path)
    got = _delivered(source)
    assert len(got) == 10 and all((g == s).all() for g, s in zip(got, source)), got[0]


def test_a_memmap_whose_file_was_unlinked_delivers_its_rows(tmp_path):
    path, source = _mapped(tmp_path)
    os.unlink(path)
    got = _delivered(source)
    assert len(got) == 10 and all((g == s).all() for g, s in zip(got, source)), got[0]


def test_a_memmap_whose_file_is_replaced_while_it_streams_raises_and_leaves_the_pool_working(tmp_path):
    path, source = _mapped(tmp_path)
    np.save(tmp_path / "new.npy", -np.ones((10, 4), np.float32))
    got = []
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        with pytest.raises(Exception) as raised:
            # capacity 2: the workers wait for room before the rows past the first few, so those are fetched
            # after the replacement, from the file's old name
            with Prefetcher(source, capacity=2, workers=1, executor=ex, timeout=60) as pf:
                os.replace(tmp_path / "new.npy", path)
                for b in pf:
                    got.append(b.copy())
        assert not isinstance(raised.value, concurrent.futures.process.BrokenProcessPool), raised.value
        assert "replaced" in str(raised.value) or "replaced" in str(raised.value.__cause__), raised.value
        assert ex.submit(abs, -3).result(timeout=30) == 3
    assert len(got) < 10 and all((g == s).all() for g, s in zip(got, source)), got
