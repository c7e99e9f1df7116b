"""The Prefetcher: the checked prefetcher model, run live over a numpy slot pool.

Theory of operation
-------------------
There is exactly one implementation of the prefetch protocol in this
project: the reference model in ``models/prefetcher.py``, which the checker
proves free of deadlocks, lost wakeups, lost, duplicated or reordered items,
swallowed errors and shutdown hangs, for every interleaving of every small
configuration. This package does not re-implement it. It compiles that model
with the real configuration (capacity, workers, number of items, ordered)
and hands it to the live runtime (``_runtime/kernel.py``), which applies the model's
own steps under one kernel lock. What this module adds is everything the
model deliberately leaves out -- arrays, time, users and the interpreter:

* **The slot pool.** The machine's state holds slot numbers, indices and
  flags, never arrays. The arrays live in one preallocated numpy block,
  ``pool[capacity, *batch_shape]``. A worker writes ``pool[k]`` only while
  the state says slot ``k`` is ``FILLING`` by that worker (between its
  "claim index and slot" step and its "fetch into slot" step); the consumer
  reads ``pool[k]`` only while the state says ``k`` is ``LEASED`` (between
  "take next batch" and "release lease"). The kernel lock orders those
  steps, so "no slot is written while it is read" is the model's checked
  property, not a hope. Leases are views of a read-only alias of the pool,
  so a caller cannot make one writeable.
* **Threads.** Each model worker runs on its own daemon ``threading.Thread``
  that drives its model thread with ``Runtime.step``; the model's external
  step "fetch into slot" runs the source outside the kernel lock. The model
  consumer is driven by the caller's ``get`` / ``__next__`` /
  ``copy_prefetched`` / ``lease``, one caller at a time (the *gate*); the
  model closer by ``close()``.
* **Sources.** Map-style sources (``__len__`` + ``__getitem__``, or
  ``fetch_into(i, out)``) are fetched in parallel; the model's indices
  0..n-1 are stream *positions*, mapped onto source indices by an index plan
  (sequential, strided shard, or seeded shuffle). An iterator source is read
  by one worker, in order; its end is the fetch outcome "end" (the model's
  ``sized=off`` mode, checked separately). Workers reach the source only
  through a weak reference to a box the Prefetcher owns, so a source that
  refers to its own Prefetcher (``self.pf = Prefetcher(self)``) does not
  keep it alive through the worker threads.
* **Errors** are values in the state: a failed fetch publishes its slot as
  ``FAILED`` at its index, and the exception object waits in a side table
  keyed by that index until the consumer's take reaches it. The consumer then
  re-raises the *same* object, so its type, message and traceback (which
  includes the worker's frames) are the original ones.

Where the proof ends: interrupts, finalizers, fork and exit
-----------------------------------------------------------
The model's steps are atomic; the interpreter can cut them. The rules this
module keeps (arguments in ``_interrupts.py`` and ``_lifecycle.py``):

* **Nothing that may run on a thread already inside a step waits for a
  lock that thread may hold.** ``close()`` checks first: if the calling
  thread holds the kernel lock or the close lock, or is one of the
  prefetcher's workers (a signal handler that interrupted ``next()``; a GC
  finalizer on a worker; a source closing its own prefetcher), it marks the
  prefetcher closed and leaves the rest to the reaper thread. The finalizer
  of an abandoned prefetcher always does that.
* **An interrupted consumer call loses no batch.** A call produces its
  outcome (a copied array, ``out`` filled, a Lease, the end, an error) into
  the *stash* under the gate, and takes it out of the stash on the line that
  returns it. A run of batches the model consumer holds is released only
  after the last batch of it is in the stash. So wherever a
  ``KeyboardInterrupt`` lands -- in the kernel, while copying, while
  releasing -- the next call finds either the run still held (and serves the
  next batch of it) or the outcome in the stash (and returns it), and a take
  whose caller never saw its result is recognised by the model consumer's
  own lease. With the SIGINT wrapper installed (``_interrupts.py``), a
  Ctrl-C inside a call is delivered at the blocking wait or just before the
  call returns, with the outcome kept for the next call; a ``queue.Queue``
  consumer loses the item it was handing out.
* **No lock leaks.** The gate and the kernel lock are ``RLock`` s used
  without re-entry (so a thread can ask whether it holds one), taken by
  ``with`` or, for timed waits, by a wait that releases what it took if it
  is interrupted before the ``with`` owns it.
* **Fork:** the child's copy raises :class:`PrefetcherForked`. **Exit:**
  open prefetchers are closed concurrently, within one ``close_timeout``.

Decisions, and why
------------------
* ``BaseException`` from a source (``SystemExit``, ``KeyboardInterrupt``
  raised by source code, ``GeneratorExit``) is delivered like any other
  error: the consumer re-raises the same object at its position. Calling the
  source inline would have raised it in the consumer, so that is what the
  prefetched stream does too; silently ending the stream (as
  ``prefetch_generator`` does) would hide it. A ``StopIteration`` raised by a
  map-style source is not an end of stream (there is no such thing for an
  indexed source): it is a ``RuntimeError`` at its position, as PEP 479
  makes it for generators.
* The first batch is read eagerly, in the constructor, unless both
  ``shape=`` and ``dtype=`` are given: the pool is allocated from its shape
  and dtype, and ``memory_budget`` needs the batch size to cap the capacity.
  An exception from that read is *not* raised by the constructor: it is
  delivered at position 0, like every other source error. With
  ``timeout=``, that read runs on a helper thread and the constructor raises
  :class:`PrefetchTimeout` when it does not finish in time.
* One lease at a time (the model's "at most one lease"): any other take
  while a lease is held raises :class:`LeaseHeld` instead of blocking.
* ``close()`` never hangs: joining is bounded by ``close_timeout``. A fetch
  that never returns is reported by a :class:`PrefetcherWarning` and its
  daemon thread is left behind; when the fetch returns at last, the model
  discards the result and the thread exits on its own.
* Sources are called from several worker threads at once when
  ``workers > 1``. A source that is not thread-safe says so with
  ``thread_safe=False``: its calls are then serialized by a lock (the workers
  still overlap the copy into the slots and the consumer's work).

* **Autotune** (``autotune=True``) is the model's own tuner thread: the
  pool is allocated at ``max_capacity`` slots and the model's ``target``
  says how many the workers may use; the consumer's calls take the tuner's
  "grow" and "shrink" steps when the policy in ``_Core._autotune`` says so.
  Every resize at every point is checked (tests/test_prefetcher_autotune.py).
* The hot path (measured in docs/performance.md): the compiled machine is
  shared per shape and only its initial stream length differs; workers take
  "fetch into slot" and the next claim in one critical section
  (``chain=True``), parking there when no slot is free.
* **Runs.** The model is compiled with ``run = min(capacity, 16)``: the
  consumer may take several ready batches in one step and hand them out one
  call at a time from ``_Core.run``, releasing them together after the
  last. The checker proves every run length safe; the policy here only
  picks one: as many batches as the caller uses in ``_RUN_BUDGET`` (100 µs)
  at its own pace between calls (a running average). A caller slower than
  that takes one batch per step, exactly as without runs; a fast one pays
  two kernel steps per run instead of per batch. A new ``Lease`` starts a
  run of one. Workers publish every batch as soon as it is fetched, before
  calling the source again: a source whose next item waits for the caller
  to receive the previous one (a request/response stream) would hang behind
  a worker holding fetched batches back.

Open questions: a signal landing in the few bytecodes between the gate's
``with`` exit and a consumer call's return is deferred and delivered by the
call, which puts its outcome back first; with two consumer threads racing,
that outcome may then be delivered after a batch another thread took in
between (never lost, never duplicated).

Where things are
----------------
``api`` (Prefetcher: arguments, opening the source, the consumer methods),
``lease`` (Lease), ``core`` (the object the threads share), ``fetching``
(workers and sources), ``consumer`` (hand-out and the stash), ``closing``,
``policy`` (run lengths, autotune), ``stats``, ``machine`` (compiling the
reference model), ``sources`` (source adaptation, the index plan, NpyFiles),
``waits`` (interrupt-aware waits), ``args``, ``errors``, ``lifecycle``
(reaper, fork, exit) and ``timeline``. The protocol's names are in
``models/_protocol.py``, shared with the model.
"""
