"""Interleaving tests for real threading code: the controlled scheduler and its explorer.

Models prove a design; this package tests the code. A test body that starts
threads and asserts runs under a deterministic scheduler that lets one
thread run at a time and decides, at every synchronization operation, which
goes next (loom's model, at synchronization granularity). The explorer runs
the body under every schedule that matters -- stateless DFS with dynamic
partial-order reduction and sleep sets, optionally preemption-bounded -- or
under sampled ones (random, PCT, Hypothesis), and reports the first
violation with a minimized, replayable trace drawn by the model checker's
own renderers.

The modules, in the order they build on each other:

* ``ops`` -- the vocabulary: operations, choices, steps, settings;
* ``scheduler`` -- one execution: threads, batons, scheduling points,
  virtual time, the verdicts of a run;
* ``belonging`` -- which execution a drop-in belongs to, and what it is outside one;
* ``waiters`` -- a condition's list of waiters, in arrival order, and a blocked call's turn in it;
* ``semaphores``, ``primitives``, ``barrier``, ``queues`` -- the drop-ins for ``threading`` and ``queue``;
* ``lines`` -- line mode (points at line events, stores and deletes);
* ``patching`` -- putting the drop-ins in place for a check;
* ``runner`` -- running the body once under a controller;
* ``explore`` -- DFS with DPOR, the samplers, replay;
* ``report`` -- the frozen result and its rendering;
* ``arguments`` -- checking a check's arguments up front;
* ``check`` -- searches, minimization; ``api`` -- ``check``, ``replay``,
  ``@test``, the ``check-code`` command.

The public names are in :mod:`safeprefetch.interleavings`.
"""
