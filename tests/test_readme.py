"""The README's code runs: the Prefetcher contract example's shape, and the model-writing example."""

import re
from pathlib import Path

README = (Path(__file__).parent.parent / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_readme_model_example_checks_ok_under_every_semantics():
    ns: dict = {}
    model_block = next(b for b in BLOCKS if "class Handoff(Model)" in b)
    test_block = next(b for b in BLOCKS if "def test_handoff_is_correct" in b)
    exec(model_block, ns)
    exec(test_block, ns)
    ns["test_handoff_is_correct"]()


def test_readme_prefetcher_example_runs_on_real_files(tmp_path):
    import numpy as np

    files = []
    for i in range(5):
        f = tmp_path / f"shard{i}.npy"
        np.save(f, np.full((4, 3), i, dtype=np.float32))
        files.append(f)
    seen = []
    ns = {"files": files, "train_step": lambda b: seen.append(float(b[0, 0]))}
    block = next(b for b in BLOCKS if "with Prefetcher(" in b)
    exec(block, ns)
    assert seen == [0.0, 1.0, 2.0, 3.0, 4.0]
