"""prefetcher: the reference prefetcher, the state machine the live ``Prefetcher`` runs.

Source: safeprefetch's own design, after Caffe2's PrefetchOperator with
``copy_prefetched``, generalised to k slots and N workers.

Minimal config: capacity=2 workers=2 items=3 (ordered), and every
combination of close, error and abandon injection in the sweep.

Expected verdict: ok.

Design
------
There is no mutex or condvar here: every step is atomic (the live runtime
applies it under its one kernel lock) and a step with a false guard simply
blocks (the runtime parks the thread and wakes it when the guard may have
changed). What remains to get right is the protocol itself:

* A worker *claims* the next index and the lowest free slot in one step, then
  *fetches* outside the lock (an external step, which may fail). Only the
  claiming worker touches that slot's array until it publishes it.
* Indices are claimed in order, so in ordered mode the next expected item is
  always either in flight or ready: the pool can never fill up with later
  items while the one the consumer needs is unclaimed.
* The consumer *takes* a ready slot as a lease (zero-copy) and *releases* it
  later; a slot is reused only after release.
* A fetch error is published in the slot like an item, at its index. Workers
  stop claiming; items before it still arrive; the consumer then raises it at
  its position and the stream ends.
* ``closing`` (set by close or by an abandoning consumer) wakes every blocked
  step: workers exit, an in-flight fetch is discarded when it lands, the
  consumer's next take reports "closed", and close joins the workers.

Every step's outcomes are named, mutually exclusive branches, so a trace
says which happened: "claim index and slot" is *claim* or *exit*; "take
next batch" is *take* (or *take up to r*), *error*, *end*, *closed*, or the
*abandon* choice. Slot states print as names (``(LEASED, 0)``). Every name
the live Prefetcher relies on -- steps, branches, threads, fields, slot
states -- is spelled once, in ``models/_protocol.py``, which both this model
and the Prefetcher import.

Two settings exist for the live ``Prefetcher``, and are checked in
``tests/test_prefetcher_model_modes.py``:

* ``sized=off`` models an iterator source of unknown length, read by one
  worker (``workers=1``): a fetch has a third outcome, "end", which frees the
  slot and sets ``length`` to that index. The checker lets the source end at
  any index below ``items``, so it covers every length up to ``items``.
* ``history=off`` stops recording ``received`` (only the end-of-run check
  reads it), so a long live stream costs O(1) per step.

``error_seen`` holds the index of the error the consumer raised, so the live
consumer knows which exception to re-raise.

Autotune (``autotune=on``) makes the buffer size a variable: ``capacity`` is
the physical pool (preallocated at the maximum), ``target`` is how many slots
the workers may have in use at once, and a **tuner** thread may grow it (up to
``capacity``), shrink it (down to 1) or stop, at any point. A worker claims
only while a slot is free *and* fewer than ``target`` slots are in use; a
shrink below what is in use takes nothing away, it only holds claims back
until slots are released. The checker explores every resize at every moment
-- workers blocked on a full buffer, a lease held, an error published, close
in progress -- so "a resize never deadlocks and never loses, duplicates or
reorders an item" is proved, not hoped: tests/test_prefetcher_autotune.py checks
every capacity 2..3, workers 1..3, items 0..3, ordered or not, with no
injection, each of close, error and abandon, and all three, starting from the
smallest and the largest target (480 configs, each exhaustively).
The live ``Prefetcher(autotune=True)`` drives the tuner from the consumer's
calls; only its policy (when to grow or shrink) lives outside the model.

Runs (``run=r``, 1 <= r <= capacity) let the consumer take several batches
in one step: its take has branches "take up to 1" .. "take up to r" (each
batch the one a single take would pick next, stopping before a failed one),
and it holds them all as leases until one "release lease" frees them all.
The checker explores every run length at every take, so the live Prefetcher
may pick any of them; it picks long runs only for a fast caller, where a
step costs more than a batch. Workers have no runs, on purpose: a batch is
published as soon as it is fetched, before the source is called again, so a
source whose next item waits for the consumer to receive the previous one
(a request/response stream) never waits on a batch a worker is sitting on.
``run=1`` is the model without runs (same states, same branches). Proved in
tests/test_prefetcher_runs.py, with mutations of the run logic caught.
"""

from safeprefetch.model import DONE, Model, delivery_violation, violate
from safeprefetch.models._protocol import (ABANDON, ACTION_FETCH, CLAIM, CLAIMED, CLOSE, CLOSED, CLOSER, CONSUMER, END,
                                           ERROR, EXIT, FAILED, FETCH, FETCH_END, FETCH_ERROR, FETCH_OK, FILLING,
                                           FREE, GROW, JOIN, LEASED, READY, RELEASE, RESIZE, SHRINK, STOP, TAKE,
                                           TAKE_ONE, TUNER, take_up_to, worker)


def _set(slots, k, value):
    return slots[:k] + (value,) + slots[k + 1:]


class Prefetcher(Model):
    name = "prefetcher"
    expected = "ok"
    params = {"capacity": 2, "workers": 2, "items": 3, "ordered": True,
              "close": False, "error": False, "abandon": False, "closers": 1,
              "error_at": -1, "close_after": -1, "sized": True, "history": True,
              "autotune": False, "target": 1, "run": 1}
    minimums = {"capacity": 1, "workers": 1, "closers": 1, "run": 1}
    sweep = {"capacity": [1, 2, 3], "workers": [1, 2, 3], "items": [0, 1, 2, 3, 4],
             "close": [False, True], "error": [False, True], "abandon": [False, True]}

    def build(self, m, capacity, workers, items, ordered, close, error, abandon, closers, error_at, close_after,
              sized, history, autotune, target, run):
        if capacity < 1 or workers < 1 or items < 0 or closers < 1:
            from safeprefetch.model import ModelError
            raise ModelError("prefetcher needs capacity >= 1, workers >= 1, items >= 0, closers >= 1")
        if autotune and not 1 <= target <= capacity:
            from safeprefetch.model import ModelError
            raise ModelError(f"prefetcher with autotune=on needs 1 <= target <= capacity, got target={target}")
        if not 1 <= run <= capacity:
            from safeprefetch.model import ModelError
            raise ModelError(f"prefetcher needs 1 <= run <= capacity, got run={run}")
        if not sized and workers != 1:
            from safeprefetch.model import ModelError
            raise ModelError("prefetcher with sized=off (an iterator source) needs workers=1: "
                             "only one reader may call next() on it, in index order")
        m.shared(
            slots=(FREE,) * capacity,  # per slot: (state, index)
            next_index=0,              # next index to claim
            delivered=0,               # items handed to the consumer (ordered: next index expected)
            received=(),               # indices the consumer got, in order (only with history=on)
            length=items,              # stream length; sized=off: lowered when a fetch reports "end"
            alive=workers,             # workers not yet exited
            closing=False,             # close or abandon requested
            closed=False,              # close finished joining the workers
            failed=False,              # a fetch error was published
            first_error=-1,            # lowest index whose fetch failed
            error_seen=-1,             # index of the error the consumer raised, -1 if none
        )
        # Slots the workers may have in use at once (FILLING, READY or LEASED): the whole
        # pool, or with autotune=on what the tuner moves within 1..capacity.
        m.shared(target=target if autotune else capacity)

        # -- worker ---------------------------------------------------------
        # "claim index and slot" has two outcomes: claim (an index, and the lowest free slot
        # within the target), or exit (closing, a published error, or no index left).

        def may_claim(s, me, branch):
            stop = s.closing or s.failed or s.next_index >= s.length
            if branch == EXIT:
                return stop
            return not stop and s.slots.count(FREE) > capacity - s.target

        def claim(s, me, branch):
            if branch == EXIT:
                s.alive -= 1
                return DONE
            k = s.slots.index(FREE)
            me.idx, me.slot = s.next_index, k
            s.next_index += 1
            s.slots = _set(s.slots, k, (FILLING, me.idx))
            return FETCH

        def fetched(s, me, outcome):
            k, i = me.slot, me.idx
            if s.slots[k] != (FILLING, i):
                violate("invariant", f"slot {k} changed while {me.name} was filling it")
            if s.closing:
                s.slots = _set(s.slots, k, FREE)  # discard: nobody will take it
            elif outcome == FETCH_OK:
                s.slots = _set(s.slots, k, (READY, i))
            elif outcome == FETCH_END:
                s.slots = _set(s.slots, k, FREE)  # the source ran out: index i does not exist
                s.length = i
            else:
                s.slots = _set(s.slots, k, (FAILED, i))
                s.failed = True
                if s.first_error < 0 or i < s.first_error:
                    s.first_error = i
            me.idx = me.slot = -1
            return CLAIM

        w = m.program("worker", idx=-1, slot=-1)
        w.step(CLAIM, claim, guard=may_claim, branches=(CLAIMED, EXIT), to=[FETCH, DONE])
        if error:
            outcomes = (FETCH_OK, FETCH_ERROR)  # any fetch may fail
        elif error_at >= 0:
            outcomes = (FETCH_OK, FETCH_ERROR)  # exactly the fetch of item error_at fails
        else:
            outcomes = (FETCH_OK,)
        if not sized:
            outcomes += (FETCH_END,)  # an iterator may run out at any index below items

        def fetch_outcome(s, me, outcome):
            if error or error_at < 0:
                return True
            return (outcome == FETCH_ERROR) == (me.idx == error_at)

        w.external(FETCH, ACTION_FETCH, fetched, branches=outcomes,
                   guard=fetch_outcome if error_at >= 0 and not error else None, to=[CLAIM])

        # -- consumer -------------------------------------------------------

        def next_slot(slots, delivered):
            """The slot the consumer takes next, or None.

            Ordered: the slot holding index ``delivered``, ready or failed (an index
            is claimed once, so at most one slot holds it). Unordered: the ready or
            failed slot with the lowest index.
            """
            if ordered:
                if (READY, delivered) in slots:
                    return slots.index((READY, delivered))
                if (FAILED, delivered) in slots:
                    return slots.index((FAILED, delivered))
                return None
            best, best_i = None, None
            for k, (state, i) in enumerate(slots):
                if (state == READY or state == FAILED) and (best_i is None or i < best_i):
                    best, best_i = k, i
            return best

        def holds_lease(slots):
            for state, _ in slots:
                if state == LEASED:
                    return True
            return False

        # "take next batch" has these outcomes, each its own branch, exactly one of the first
        # four enabled at a time (the abandon choice aside):
        #   closed       close was requested: the consumer is done (get() raises PrefetcherClosed);
        #   take (up to r)  the next batch is ready: lease it, and with run > 1 up to r-1 more,
        #                each the one a single take would pick next, stopping before a failed
        #                slot (every run length is its own branch: the live Prefetcher may pick any);
        #   error        the next item is a fetch error: the consumer is done (get() re-raises it);
        #   end          every item was delivered: the consumer is done (end of stream);
        #   abandon      (abandon=on) the consumer walks away, as a garbage-collected prefetcher.
        # The helpers take fields, not ``s``, so each step specializes to constant indices.
        takes = (TAKE_ONE,) if run == 1 else tuple(take_up_to(r) for r in range(1, run + 1))
        run_of = {name: r for r, name in enumerate(takes, 1)}
        branches = takes + (ERROR, END, CLOSED) + ((ABANDON,) if abandon else ())

        def may_take(s, me, branch):
            if branch == ABANDON:
                return True
            if s.closing:
                return branch == CLOSED
            if branch == CLOSED:
                return False
            k = next_slot(s.slots, s.delivered)
            if branch == END:
                return k is None and s.delivered >= s.length
            if k is None:
                return False
            if branch == ERROR:
                return s.slots[k][0] == FAILED
            return s.slots[k][0] == READY  # a take

        def take(s, me, branch):
            if branch == ABANDON:
                s.closing = True
                return JOIN
            if branch == CLOSED or branch == END:
                return DONE
            k = next_slot(s.slots, s.delivered)
            state, i = s.slots[k]
            if branch == ERROR:
                s.slots = _set(s.slots, k, FREE)
                s.error_seen = i
                return DONE
            if holds_lease(s.slots):
                violate("invariant", "a second lease while the consumer still holds one")
            slots, delivered, want, held, got = s.slots, s.delivered, run_of[branch], (), ()
            while True:
                slots = _set(slots, k, (LEASED, i))
                held += (k,)
                got += (i,)
                delivered += 1
                if len(held) == want:
                    break
                k = next_slot(slots, delivered)
                if k is None or slots[k][0] == FAILED:
                    break
                i = slots[k][1]
            s.slots, s.delivered, me.lease = slots, delivered, held
            if history:
                s.received += got
            return RELEASE

        def release(s, me):
            slots = s.slots
            for k in me.lease:
                if slots[k][0] != LEASED:
                    violate("invariant", f"slot {k} was changed while leased")
                slots = _set(slots, k, FREE)
            s.slots, me.lease = slots, ()

        c = m.program("consumer", lease=())
        c.step(TAKE, take, guard=may_take, branches=branches, to=[RELEASE, JOIN, DONE])
        c.step(RELEASE, release, next=TAKE)
        c.step(JOIN, guard=lambda s, me: s.alive == 0, next=DONE)

        # -- closer ---------------------------------------------------------

        def do_close(s, me):
            s.closing = True

        def joined(s, me):
            s.closed = True

        cl = m.program("closer")
        cl.step(CLOSE, do_close, next=JOIN,
                guard=None if close_after < 0 else lambda s, me: s.delivered >= min(close_after, items) or s.closing
                or s.failed)
        cl.step(JOIN, joined, guard=lambda s, me: s.alive == 0, next=DONE)

        # -- tuner (autotune=on) --------------------------------------------
        # The live Prefetcher's autotuner resizes ``target`` between the other
        # threads' steps; here it may grow, shrink or stop at any point, so every
        # resize at every moment (workers blocked, a lease held, closing) is checked.

        if autotune:
            def may_resize(s, me, branch):
                if branch == GROW:
                    return s.target < capacity
                if branch == SHRINK:
                    return s.target > 1
                return True

            def resize(s, me, branch):
                if branch == GROW:
                    s.target += 1
                elif branch == SHRINK:
                    s.target -= 1
                else:
                    return DONE
                return RESIZE

            tu = m.program("tuner")
            tu.step(RESIZE, resize, guard=may_resize, branches=(GROW, SHRINK, STOP), to=[RESIZE, DONE])

        for i in range(workers):
            m.thread(worker(i), w)
        m.symmetric(*(worker(i) for i in range(workers)))
        m.thread(CONSUMER, c)
        if close:
            for i in range(closers):
                m.thread(f"{CLOSER}{i}" if closers > 1 else CLOSER, cl)
        if autotune:
            m.thread(TUNER, tu)

        # -- checks ---------------------------------------------------------

        m.shutdown_when(lambda s: s.closing or s.failed)
        if autotune:
            m.invariant("the target capacity stays within 1..capacity",
                        lambda s: 1 <= s.target <= capacity, "overflow")
        m.invariant("closed means every worker has exited and no slot is being filled",
                    lambda s: not s.closed or (s.alive == 0 and all(st != FILLING for st, _ in s.slots)),
                    "use_after_close")

        def at_end(s):
            expected = tuple(range(s.length))
            if s.closing:
                return delivery_violation(expected, s.received, ordered, complete=False)
            if s.failed:
                if s.error_seen < 0:
                    return "error_lost", f"the fetch of item {s.first_error} failed but the consumer never saw it"
                want = tuple(range(s.first_error)) if ordered else None
                if ordered and s.received != want:
                    return delivery_violation(want, s.received, ordered)
                return delivery_violation(expected, s.received, ordered, complete=False)
            return delivery_violation(expected, s.received, ordered)

        if history:  # without the history there is nothing to compare the delivery with
            m.at_end(at_end)
