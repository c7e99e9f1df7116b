"""The nineteenth round (docs/hardening.md): what the eighteenth left, and three adversarial reviews.

The tests of a fix reproduce a finding and failed on the commit before the fix; the others guard what each
fix must keep.
"""

from __future__ import annotations

import gc
import json
import os

import numpy as np
import pytest

from safeprefetch import NpyFiles, Prefetcher

# -- 1. NpyFiles: a .npz, and bytes after the data in any format version --------------------------------------


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")
def test_npz_is_refused_by_name_and_its_file_closed(tmp_path):
    path = tmp_path / "batch.npz"
    np.savez(path, x=np.zeros(4, np.float32))
    source = NpyFiles([path])
    gc.collect()
    before = _open_fds()
    with pytest.raises(ValueError, match=r"batch\.npz: holds a NpzFile, not one array") as kept:
        source[0]
    gc.collect()
    assert _open_fds() == before  # the error kept (``kept`` holds its traceback) holds no file open
    assert kept.value is not None
    with pytest.raises(ValueError, match=r"batch\.npz"):  # the Prefetcher's first read reports it by name
        with Prefetcher(NpyFiles([path, path]), capacity=2) as pf:
            list(pf)


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_bytes_after_the_data_are_refused_on_both_paths_in_every_version(tmp_path, version):
    data = np.arange(6, dtype=np.float32)
    path = tmp_path / "batch.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, data, version=version)
        f.write(b"\0" * 8)
    source = NpyFiles([path])
    out = np.zeros_like(data)
    with pytest.raises(ValueError, match=r"batch\.npy: 8 bytes after the 24 data bytes"):
        source.fetch_into(0, out)
    with pytest.raises(ValueError, match=r"batch\.npy: 8 bytes after the 24 data bytes"):
        source[0]


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("fortran", [False, True])
def test_whole_files_are_still_read_in_every_version_and_order(tmp_path, version, fortran):
    data = np.arange(12, dtype=np.int32).reshape(3, 4)
    data = np.asfortranarray(data) if fortran else data
    path = tmp_path / "batch.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, data, version=version)
    source = NpyFiles([path])
    out = np.zeros((3, 4), np.int32)
    assert source.fetch_into(0, out) is None
    assert np.array_equal(out, data)
    assert np.array_equal(source[0], data)


# -- 2. --json on an error path: a document saying so, not an empty standard output ---------------------------

_RAISING_BUILD = """
from safeprefetch.model import Model
class Raising(Model):
    def build(self, b):
        raise RuntimeError("broken at build")
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "safeprefetch", *argv], capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("argv, says", [
    (("check", "no_such_model", "--json"), "unknown model 'no_such_model'"),
    (("check", "prefetcher", "--set", "capacity=0", "--json"), "capacity must be at least 1"),
    (("check", "prefetcher", "--json", "--max-states", "0"), "--max-states must be at least 1"),
    (("check", "{model}", "--json"), "raised RuntimeError: broken at build"),
    (("check-code", "no_such_module_here:test", "--json"), "no_such_module_here"),
])
def test_json_error_paths_print_one_error_document(tmp_path, argv, says):
    model = tmp_path / "raising.py"
    model.write_text(_RAISING_BUILD)
    code, out, err = _cli(*(a.replace("{model}", str(model)) for a in argv))
    assert code == 2, err
    document = json.loads(out)  # (one document: json.loads refuses two)
    assert document["exit_code"] == 2 and document["command"] == argv[0]
    assert says in document["error"] and says in err


def test_json_a_command_that_wrote_its_document_adds_no_second_one(tmp_path):
    code, out, err = _cli("check", "one_cond_signal", "--json", "--svg", "/dev/full")
    assert code == 2 and "--svg" in err
    document = json.loads(out)
    assert "error" not in document and document["verdict"] == "deadlock"
