"""predictive_prefetcher: the on-demand prefetcher, the state machine the live ``OnDemandPrefetcher`` runs.

Source: safeprefetch's own design (issue 17), after hardware prefetchers:
stream buffers (Jouppi, ISCA 1990), the reference prediction table of
Chen and Baer (IEEE TC 1995) and Markov prefetching (Joseph and Grunwald,
ISCA 1997). A demand miss is served first; speculation only uses what the
demand does not need.

Minimal config: capacity=2 workers=1 (three tags) with a closer; proved over
the ``sweep`` (capacity 1..2, workers 1..2, with and without fetch errors)
and, in tests/test_predictive_model.py, with no reduction, closed by a closer
or by the consumer leaving or never, state counts pinned; at capacity 3 with
up to three workers in the slow set.

Expected verdict: ok.

Design
------
The caller asks for items in an order only it knows, so the model's
consumer asks, at every step, for any tag (see ``_predictive_protocol.py``:
tags stand for indices, ``keys = capacity + 1`` of them), and may speculate
on any tag, cancel or evict any speculation, in any order. A live predictor
picks some of those choices; the checker explores all of them.

* **Speculative claims.** "speculate t" claims a free slot for tag t as
  ``QUEUED`` and appends it to the queue; a worker's "start queued fetch"
  takes the oldest one (``FILLING``) and fetches outside the kernel lock.
* **A demand is served first.** "request or predict" with the asked-for
  tag has one branch per case: *hit* (``READY``: lease it), *error*
  (``FAILED``: raise it), *join* (a worker is fetching it: wait for that
  fetch, never a second one), *revive* (its fetch was cancelled in flight:
  want it again and wait), *promote* (``QUEUED``, no worker yet: the
  consumer fetches it itself, now), *miss* (no slot holds it: take a free
  slot or evict a speculative one, and fetch it now, on the consumer's own
  thread). Workers may have at most ``capacity - 1`` fetches in flight, so
  a miss always finds a slot free or evictable: a demand never waits behind
  speculation, which is an invariant here, not a hope.
* **Eviction.** A speculative batch nobody asked for (``READY`` or
  ``FAILED``) is evicted by the consumer when its prediction is dropped, or
  by a miss that needs its slot.
* **Cancellation in flight.** "cancel slot k" on a ``FILLING`` slot marks it
  ``CANCELLED``: the worker's fetch cannot be stopped, but its result is
  discarded when it lands, and the slot is free again. Asked for (or
  predicted) again before it lands, it is revived instead of fetched twice.
* **Close and errors** as in the streaming model: ``closing`` wakes every
  blocked step, workers exit, a fetch that lands after it is discarded, the
  consumer's next request reports *closed*, and the closer joins the
  workers. A failed fetch is published in its slot at its tag; the consumer
  raises it when it asks for that tag (a speculative error nobody asks for
  is evicted with its slot).

Checks, in every reachable state: no tag is in two live slots (no item is
fetched twice); the consumer's lease holds the tag it asked for; while it
holds no slot, a miss finds one free or evictable, and a request for any
tag has exactly one enabled outcome (so it never waits, except for a fetch
of that very tag already in flight); the queue lists exactly the ``QUEUED``
slots; closed means every worker has exited. The consumer loops
forever (there is no request counter), so every sequence of requests and
predictions of any length is covered: the state space stays finite because
a state records only slots, the queue and flags.

``request_check=off`` leaves out the one check that costs O(tags) per
state -- that a request for *every* tag has exactly one enabled outcome,
tested by re-running the request's own guard -- and keeps its O(slots)
core, that a miss finds a slot free or evictable. The live object compiles with it off
(its steps are checked against the invariants as they run); the checker
proves the model with it on.
"""

from safeprefetch.model import DONE, Model, ModelError, violate
from safeprefetch.models._predictive_protocol import (ACTION_DEMAND, ACTION_FETCH, CANCEL, CANCELLED, CLOSE, CLOSED,
                                                      CLOSER, CONSUMER, DEMAND, DEMAND_FETCH, EMPTY, ERROR, EVICT,
                                                      EXIT, FAILED, FETCH, FETCH_DROP, FETCH_ERROR, FETCH_OK, FILLING,
                                                      FREE, HIT, JOIN, JOIN_FETCH, LEASED, LEAVE, MISS, PROMOTE,
                                                      QUEUED, READY, RELEASE, REQUEST, REVIVE, SERVE, SPECULATE,
                                                      START, STARTED, UNCANCEL, WITHDRAW, branch, worker)


def _set(slots, k, value):
    return slots[:k] + (value,) + slots[k + 1:]


def _find(slots, state, tag):
    """The slot holding ``(state, tag)``, or -1."""
    for k, held in enumerate(slots):
        if held[0] == state and held[1] == tag:
            return k
    return -1


def _absent(slots, tag):
    for st, t in slots:
        if t == tag and st != EMPTY:
            return False
    return True


def _victim(slots, queue):
    """The slot a miss takes: a free one; else a failed, then the newest queued, then a ready speculation; or -1."""
    if FREE in slots:
        return slots.index(FREE)
    for k, (st, _) in enumerate(slots):
        if st == FAILED:
            return k
    if queue:
        return queue[-1]
    for k, (st, _) in enumerate(slots):
        if st == READY:
            return k
    return -1


def _in_flight(slots):
    n = 0
    for st, _ in slots:
        if st == FILLING or st == CANCELLED:
            n += 1
    return n


def _unqueue(queue, k):
    return tuple(q for q in queue if q != k)


class PredictivePrefetcher(Model):
    name = "predictive_prefetcher"
    expected = "ok"
    params = {"capacity": 2, "workers": 1, "keys": 0, "close": True, "leave": False, "error": False,
              "request_check": True}
    sweep = {"capacity": [1, 2], "workers": [1, 2], "error": [False, True]}

    def build(self, m, capacity, workers, keys, close, leave, error, request_check):
        if capacity < 1 or workers < 1 or keys < 0:
            raise ModelError("predictive_prefetcher needs capacity >= 1, workers >= 1, keys >= 0")
        keys = keys or capacity + 1  # one tag per slot, plus the one asked for (data independence)
        m.shared(
            slots=(FREE,) * capacity,  # per slot: (state, tag)
            queue=(),                  # QUEUED slots, oldest first
            want=-1,                   # the tag the consumer asked for last
            lease=-1,                  # the slot the consumer holds (LEASED, or DEMAND while it fetches)
            error_slot=-1,             # the slot whose error the consumer took last
            alive=workers,             # workers not yet exited
            closing=False,             # close (or leave) requested
            closed=False,              # the closer has joined the workers
        )
        tags = range(keys)

        # -- consumer -------------------------------------------------------
        # "request or predict": a request for tag t has exactly one enabled branch among
        # hit / error / join / revive / promote / miss (which one depends only on what the slots
        # hold for t); predictions are speculate / uncancel / cancel / evict. Each is named by its
        # tag or slot, so the live object asks for exactly the branch it means.
        request_kinds = (HIT, ERROR, JOIN_FETCH, REVIVE, PROMOTE, MISS)
        holds = {HIT: READY, ERROR: FAILED, JOIN_FETCH: FILLING, REVIVE: CANCELLED, PROMOTE: QUEUED,
                 UNCANCEL: CANCELLED}
        choice = {}
        for t in tags:
            for kind in request_kinds + (SPECULATE, UNCANCEL):
                choice[branch(kind, t)] = (kind, t)
        for k in range(capacity):
            choice[branch(CANCEL, k)] = (CANCEL, k)
            choice[branch(EVICT, k)] = (EVICT, k)
        branches = tuple(choice) + ((LEAVE,) if leave else ()) + (CLOSED,)

        def may_request(s, me, name):
            if name == CLOSED:
                return s.closing
            if s.closing:
                return False
            if name == LEAVE:
                return True
            kind, arg = choice[name]
            slots = s.slots
            if kind == MISS:
                return _absent(slots, arg) and _victim(slots, s.queue) >= 0
            if kind == SPECULATE:
                return _absent(slots, arg) and FREE in slots
            if kind == CANCEL:
                return slots[arg][0] == QUEUED or slots[arg][0] == FILLING
            if kind == EVICT:
                return slots[arg][0] == READY or slots[arg][0] == FAILED
            return _find(slots, holds[kind], arg) >= 0

        def request(s, me, name):
            if name == CLOSED:
                return DONE
            if name == LEAVE:
                s.closing = True
                return JOIN
            kind, arg = choice[name]
            slots, queue = s.slots, s.queue
            if kind == SPECULATE:
                k = slots.index(FREE)
                s.slots, s.queue = _set(slots, k, (QUEUED, arg)), queue + (k,)
                return REQUEST
            if kind == UNCANCEL:
                s.slots = _set(slots, _find(slots, CANCELLED, arg), (FILLING, arg))
                return REQUEST
            if kind == CANCEL or kind == EVICT:
                st, t = slots[arg]
                if st == FILLING:
                    s.slots = _set(slots, arg, (CANCELLED, t))  # in flight: discarded when it lands
                else:
                    s.slots, s.queue = _set(slots, arg, FREE), _unqueue(queue, arg)
                return REQUEST
            # A request for tag ``arg``.
            s.want, s.error_slot = arg, -1
            if kind == MISS:
                k = _victim(slots, queue)
                s.slots, s.queue, s.lease = _set(slots, k, (DEMAND, arg)), _unqueue(queue, k), k
                return DEMAND_FETCH
            k = _find(slots, holds[kind], arg)
            if kind == HIT:
                s.slots, s.lease = _set(slots, k, (LEASED, arg)), k
                return RELEASE
            if kind == ERROR:
                s.slots, s.error_slot = _set(slots, k, FREE), k
                return REQUEST
            if kind == PROMOTE:
                s.slots, s.queue, s.lease = _set(slots, k, (DEMAND, arg)), _unqueue(queue, k), k
                return DEMAND_FETCH
            if kind == REVIVE:
                s.slots = _set(slots, k, (FILLING, arg))
            return SERVE  # join, revive: a worker's fetch of it is in flight

        # "wait for in-flight": the asked-for tag is FILLING; a worker's fetch lands it.
        def may_serve(s, me, name):
            if name == WITHDRAW:
                return True
            if name == CLOSED or s.closing:
                return name == CLOSED and s.closing
            return _find(s.slots, READY if name == HIT else FAILED, s.want) >= 0

        def serve(s, me, name):
            if name == CLOSED:
                return DONE
            if name == WITHDRAW:
                return REQUEST
            if name == HIT:
                k = _find(s.slots, READY, s.want)
                s.slots, s.lease = _set(s.slots, k, (LEASED, s.want)), k
                return RELEASE
            k = _find(s.slots, FAILED, s.want)
            s.slots, s.error_slot = _set(s.slots, k, FREE), k
            return REQUEST

        def demand_fetched(s, me, outcome):
            k = s.lease
            if s.slots[k] != (DEMAND, s.want):
                violate("invariant", f"slot {k} changed while the consumer was fetching into it")
            if s.closing:
                s.slots, s.lease = _set(s.slots, k, FREE), -1
                return DONE
            if outcome == FETCH_OK:
                s.slots = _set(s.slots, k, (LEASED, s.want))
                return RELEASE
            s.slots, s.lease = _set(s.slots, k, FREE), -1
            if outcome == FETCH_ERROR:
                s.error_slot = k
            return REQUEST

        def release(s, me):
            k = s.lease
            if s.slots[k] != (LEASED, s.want):
                violate("invariant", f"slot {k} was changed while leased")
            s.slots, s.lease = _set(s.slots, k, FREE), -1

        outcomes = (FETCH_OK, FETCH_ERROR) if error else (FETCH_OK,)
        c = m.program("consumer")
        c.step(REQUEST, request, guard=may_request, branches=branches,
               to=[REQUEST, SERVE, DEMAND_FETCH, RELEASE, JOIN, DONE])
        c.step(SERVE, serve, guard=may_serve, branches=(HIT, ERROR, CLOSED, WITHDRAW), to=[RELEASE, REQUEST, DONE])
        c.external(DEMAND_FETCH, ACTION_DEMAND, demand_fetched, branches=outcomes + (FETCH_DROP,),
                   to=[RELEASE, REQUEST, DONE])
        c.step(RELEASE, release, next=REQUEST)
        c.step(JOIN, guard=lambda s, me: s.alive == 0, next=DONE)

        # -- worker ---------------------------------------------------------
        # "start queued fetch": the oldest QUEUED claim, while fewer than capacity - 1 fetches are
        # in flight (one slot always stays free or evictable for a demand miss); or exit on close.

        def may_start(s, me, name):
            if name == EXIT:
                return s.closing
            return not s.closing and len(s.queue) > 0 and _in_flight(s.slots) < capacity - 1

        def start(s, me, name):
            if name == EXIT:
                s.alive -= 1
                return DONE
            k = s.queue[0]
            s.slots, s.queue, me.slot = _set(s.slots, k, (FILLING, s.slots[k][1])), s.queue[1:], k
            return FETCH

        def fetched(s, me, outcome):
            k = me.slot
            st, t = s.slots[k]
            if st != FILLING and st != CANCELLED:
                violate("invariant", f"slot {k} changed while {me.name} was filling it")
            if st == CANCELLED or s.closing:
                s.slots = _set(s.slots, k, FREE)  # a misprediction (or closing): discard
            elif outcome == FETCH_OK:
                s.slots = _set(s.slots, k, (READY, t))
            else:
                s.slots = _set(s.slots, k, (FAILED, t))
            me.slot = -1

        w = m.program("worker", slot=-1)
        w.step(START, start, guard=may_start, branches=(STARTED, EXIT), to=[FETCH, DONE])
        w.external(FETCH, ACTION_FETCH, fetched, branches=outcomes, next=START)

        # -- closer ---------------------------------------------------------

        def do_close(s, me):
            s.closing = True

        def joined(s, me):
            s.closed = True

        cl = m.program("closer")
        cl.step(CLOSE, do_close, next=JOIN)
        cl.step(JOIN, joined, guard=lambda s, me: s.alive == 0, next=DONE)

        for i in range(workers):
            m.thread(worker(i), w)
        m.symmetric(*(worker(i) for i in range(workers)))
        m.thread(CONSUMER, c)
        if close:
            m.thread(CLOSER, cl)

        # -- checks ---------------------------------------------------------

        def live_once(s):
            seen = set()
            for st, t in s.slots:
                if st != EMPTY and st != CANCELLED:
                    if t in seen:
                        return False
                    seen.add(t)
            return True

        def lease_is_wanted(s):
            if s.lease < 0:
                return True
            return s.slots[s.lease] == (LEASED, s.want) or s.slots[s.lease] == (DEMAND, s.want)

        def demand_has_room(s):
            return s.closing or s.lease >= 0 or _victim(s.slots, s.queue) >= 0

        def one_outcome(s):
            # The consumer holds no slot exactly while it may ask (REQUEST) or waits for a
            # worker's fetch of its tag (SERVE). Then a request for any tag must have exactly one
            # enabled outcome: the guard itself is tested, so a miss that cannot find a slot
            # (speculation holding them all) is caught however it comes about, and so are two
            # outcomes that compete (a second fetch of a tag already being fetched).
            if s.closing or s.lease >= 0:
                return True
            for t in tags:
                enabled = 0
                for kind in request_kinds:
                    if may_request(s, None, branch(kind, t)):
                        enabled += 1
                if enabled != 1:
                    return False
            return True

        def queue_is_queued(s):
            queued = tuple(k for k, (st, _) in enumerate(s.slots) if st == QUEUED)
            return sorted(s.queue) == list(queued) and len(set(s.queue)) == len(s.queue)

        m.shutdown_when(lambda s: s.closing)
        m.invariant("no tag is held by two live slots (no item is fetched twice)", live_once, "duplicate_item")
        m.invariant("the consumer's slot holds the tag it asked for", lease_is_wanted)
        m.invariant("a demand miss always finds a slot free or evictable", demand_has_room)
        if request_check:
            m.invariant("a request for any tag has exactly one outcome, at once (a miss never waits behind "
                        "speculation)", one_outcome)
        m.invariant("the queue lists exactly the QUEUED slots, once each", queue_is_queued)
        m.invariant("closed means every worker has exited and no slot is being filled",
                    lambda s: not s.closed or (s.alive == 0 and all(st != FILLING and st != CANCELLED
                                                                    for st, _ in s.slots)),
                    "use_after_close")

        def at_end(s):
            if s.lease >= 0:
                return "invariant", f"the consumer ended holding slot {s.lease}"
            return None

        m.at_end(at_end)
