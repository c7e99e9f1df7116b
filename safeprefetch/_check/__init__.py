"""Checking: traces, verdicts, exploration, reductions, liveness, strategies, distributed search.

Every search in this layer asks the same two functions what a state means:
:mod:`.expand` (a state's moves, in canonical order, and whether it is
stuck) and :mod:`.verdict` (what a stuck state means). A search is a
visiting order around them -- :mod:`.explorer` (BFS, DFS over every state),
:mod:`.fpsearch` (BFS over fingerprints), :mod:`.bitstate` (DFS over bits),
chosen by :func:`.explore.check`'s ``store``; :mod:`.schedules`
(the sampling strategies of :mod:`.strategies`), :mod:`.shard` with
:mod:`.distributed` (the parallel BFS), and the oracle in
:mod:`safeprefetch.testing` -- so searches can differ in what they visit,
never in what they conclude about a state. What they report are the frozen
values of :mod:`.result`; :mod:`.replay` names choices and replays them;
:mod:`.reduce` and :mod:`.liveness` hold the reductions and the starvation
and shutdown-progress checks; :mod:`.trace` renders a trace as text.

This layer imports only the DSL below it: names of catalog models are
resolved above it (the distributed search takes a Model class and finds it
again in a worker through :mod:`.modelref`), and benchmarks live in
``safeprefetch._harness``.
"""
