"""The on-demand (predictive) prefetcher's protocol vocabulary: the one place its names are spelled.

The model (``models/predictive_prefetcher.py``) and the live
``OnDemandPrefetcher`` (``safeprefetch/_prefetcher/ondemand*.py``) both import
these names, as the streaming pair shares ``models/_protocol.py``. A renamed
step, branch or field changes both at once, or fails the live object's
compile with a KeyError.

The closing half of the protocol is the streaming one, word for word: the
closer's "close" and "join workers", the ``closing`` and ``alive`` fields,
and the workers' external "fetch into slot". Those names are imported from
``models/_protocol.py``, so the streaming Prefetcher's close machinery
(``_prefetcher/closing.py``) drives this machine unchanged.

Tags, not indices
-----------------
A step cannot take an argument: every choice a thread makes is a branch with
a fixed name. The caller's index is an arbitrary integer, so the model
speaks of *tags* ``0..keys-1`` instead, and the live object keeps the
tag -> index table (a cache's tag store). The protocol only ever compares
tags for equality, so it is *data independent* (Wolper, POPL 1986): with as
many tags as values can matter at once -- one per slot, plus the index the
consumer is asking for -- the checker sees every equality pattern the live
object can produce. Hence ``keys = capacity + 1``.

Slot states extend the streaming ones (``EMPTY``, ``FILLING``, ``READY``,
``FAILED``, ``LEASED``) with three of their own, and print as their names.
"""

from __future__ import annotations

from ._protocol import (ACTION_FETCH, ALIVE, CLOSE, CLOSED, CLOSER, CLOSING, CONSUMER, EMPTY, EXIT, FAILED, FETCH,
                        FETCH_ERROR, FETCH_OK, FILLING, FREE, JOIN, LEASE, LEASED, READY, RELEASE, SLOT, SLOTS,
                        SlotState, worker)

__all__ = [
    "ACTION_DEMAND", "ACTION_FETCH", "ALIVE", "CANCEL", "CANCELLED", "CLOSE", "CLOSED", "CLOSER", "CLOSING",
    "CONSUMER", "DEMAND", "DEMAND_FETCH", "DROP", "EMPTY", "ERROR", "ERROR_SLOT", "EVICT", "EXIT", "FAILED", "FETCH",
    "FETCH_DROP", "FETCH_ERROR", "FETCH_OK", "FILLING", "FREE", "HIT", "IN_FLIGHT", "JOIN", "JOIN_FETCH", "LEASE",
    "LEASED", "LEAVE", "MISS", "PROMOTE", "QUEUE", "QUEUED", "READY", "RELEASE", "REQUEST", "REVIVE", "SERVE",
    "SLOT", "SLOTS", "SPECULATE", "START", "STARTED", "UNCANCEL", "WANT", "WITHDRAW", "branch", "worker",
]


class SpecState(SlotState):
    """A slot state of the on-demand protocol (an ``int`` that prints as its name), beyond the streaming ones."""

    __slots__ = ()
    _names: dict[int, str] = {}

    def __reduce__(self):  # pickled as the named value (parallel search sends states between processes)
        return (_spec_state, (int(self),))


QUEUED = SpecState(5, "QUEUED")        # a speculative claim: the slot is reserved for a tag, no worker yet
CANCELLED = SpecState(6, "CANCELLED")  # a worker is fetching a tag no longer wanted: freed when it lands
DEMAND = SpecState(7, "DEMAND")        # the consumer itself is fetching the tag it asked for
_BY_VALUE = {int(s): s for s in (QUEUED, CANCELLED, DEMAND)}

#: States of a slot a worker is fetching into (only that worker touches the array).
IN_FLIGHT = (FILLING, CANCELLED)


def _spec_state(value: int) -> SpecState:
    return _BY_VALUE[value]


# -- steps, by thread ---------------------------------------------------------------------------

REQUEST = "request or predict"   # consumer: ask for a tag, or speculate, cancel, evict; or leave, or see closed
SERVE = "wait for in-flight"     # consumer: the tag it asked for is being fetched by a worker
DEMAND_FETCH = "demand fetch"    # consumer, external: the caller's own thread fetches a demand miss
START = "start queued fetch"     # worker: take the oldest speculative claim, or exit
# FETCH ("fetch into slot"), RELEASE ("release lease"), CLOSE and JOIN are the streaming names.

# -- branches -------------------------------------------------------------------------------------
# REQUEST's branches carry a tag (``hit 3``) or a slot (``cancel slot 1``): see :func:`branch`.

HIT = "hit"              # the tag is READY: lease it
JOIN_FETCH = "join"      # the tag is being fetched by a worker: wait for it (SERVE)
REVIVE = "revive"        # the tag's fetch was cancelled but is still in flight: want it again, and wait
PROMOTE = "promote"      # the tag is QUEUED, no worker yet: the consumer fetches it itself, now
MISS = "miss"            # no slot holds the tag: take a free slot, or evict a speculative one, and fetch it now
ERROR = "error"          # the tag's fetch failed: the consumer raises it
SPECULATE = "speculate"  # claim a free slot for a predicted tag (QUEUED, at the back of the queue)
UNCANCEL = "uncancel"    # a predicted tag whose fetch was cancelled in flight: keep it after all
CANCEL = "cancel slot"   # a speculative claim no longer predicted: QUEUED -> free, FILLING -> CANCELLED
EVICT = "evict slot"     # a speculative batch no longer predicted (READY or FAILED): free the slot
LEAVE = "leave"          # REQUEST (leave=on): the consumer closes on its way out, and joins the workers
WITHDRAW = "withdraw"    # SERVE: stop waiting (a timeout, an interrupt); the fetch goes on, speculative
STARTED = "start"        # START: the oldest QUEUED slot becomes FILLING by this worker
FETCH_DROP = "drop"      # DEMAND_FETCH: not fetched after all (an interrupted call's, no longer asked for)
DROP = FETCH_DROP
ACTION_DEMAND = "demand fetch"  # the external action DEMAND_FETCH runs (bound by the live object)


def branch(name: str, arg: int) -> str:
    """A REQUEST branch with its tag or slot: ``branch(HIT, 3) == "hit 3"``."""
    return f"{name} {arg}"


# -- fields ---------------------------------------------------------------------------------------

QUEUE = "queue"            # slots holding QUEUED claims, oldest first (workers start them in this order)
WANT = "want"              # the tag the consumer asked for last
ERROR_SLOT = "error_slot"  # the slot whose error the consumer took last (-1: none): the live error table's key
# SLOTS: per slot (state, tag); LEASE: the slot the consumer holds (LEASED or DEMAND), -1 if none;
# CLOSING, ALIVE as in the streaming model; SLOT: a worker's local, the slot it is filling.
