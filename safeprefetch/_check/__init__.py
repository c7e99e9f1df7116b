"""Checking: traces, verdicts, exploration, reductions, liveness, strategies, distributed search."""
