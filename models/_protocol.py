"""The prefetcher's protocol vocabulary: the one place its names are spelled.

The reference model (``models/prefetcher.py``) and the live Prefetcher
(``safeprefetch/_prefetcher``) both import these names. The model builds its
steps, branches and threads from them; the Prefetcher drives the model by
them and looks its fields up by them (``machine.shared_index[SLOTS]``). So a
renamed label or branch changes both at once, and a renamed field fails the
Prefetcher's compile with a KeyError instead of silently changing what runs
live. (The model's step functions spell fields as attributes, ``s.slots``:
that is what the specializer rewrites to constant indices.)

Slot states are named integers: they compare and hash as the integers they
always were (so the state space, and every pinned count, is unchanged), and
print as their names in traces: ``slots=((LEASED, 0), (READY, 1))``.
"""

from __future__ import annotations

__all__ = [
    "ABANDON", "ACTION_FETCH", "ALIVE", "CLAIM", "CLAIMED", "CLOSE", "CLOSED", "CLOSER", "CLOSING",
    "CONSUMER", "DELIVERED", "EMPTY", "END", "ERROR", "ERROR_SEEN", "EXIT", "FAILED", "FETCH", "FETCH_END",
    "FETCH_ERROR", "FETCH_OK", "FILLING", "FREE", "GROW", "IDX", "JOIN", "LEASE", "LEASED", "LENGTH", "NEXT_INDEX",
    "READY", "RELEASE", "RESIZE", "SHRINK", "SLOT", "SLOTS", "STOP", "SlotState", "TAKE", "TAKE_ONE",
    "TARGET", "TUNER", "take_up_to", "worker",
]


class SlotState(int):
    """A slot's state: an ``int`` (for hashing, comparing and the specializer) that prints as its name."""

    __slots__ = ()
    _names: dict[int, str] = {}

    def __new__(cls, value: int, name: str) -> "SlotState":
        self = super().__new__(cls, value)
        cls._names[value] = name
        return self

    def __repr__(self) -> str:
        return self._names[int(self)]

    __str__ = __repr__

    def __reduce__(self):  # pickled as the named value (parallel search sends states between processes)
        return (_slot_state, (int(self),))


EMPTY = SlotState(0, "EMPTY")        # free: no worker, no consumer
FILLING = SlotState(1, "FILLING")    # a worker is fetching into it (only that worker touches the array)
READY = SlotState(2, "READY")        # holds a fetched batch, not yet taken
FAILED = SlotState(3, "FAILED")      # holds a fetch error, at its index
LEASED = SlotState(4, "LEASED")      # the consumer holds it (only the consumer touches the array)
_BY_VALUE = {int(s): s for s in (EMPTY, FILLING, READY, FAILED, LEASED)}


def _slot_state(value: int) -> SlotState:
    return _BY_VALUE[value]


#: A free slot: (state, stream index).
FREE = (EMPTY, -1)

# -- threads ------------------------------------------------------------------------------------

CONSUMER = "consumer"
CLOSER = "closer"
TUNER = "tuner"


def worker(i: int) -> str:
    """The name of the i-th worker thread."""
    return f"worker{i}"


# -- steps, by thread -----------------------------------------------------------------------------

CLAIM = "claim index and slot"   # worker: claim the next index and a free slot, or exit
FETCH = "fetch into slot"        # worker, external: the source runs outside the kernel lock
TAKE = "take next batch"         # consumer: a run of batches, or the end, the error, the close
RELEASE = "release lease"        # consumer: free the slots of its run
JOIN = "join workers"            # consumer after abandon, closer after close: wait for every worker
CLOSE = "close"                  # closer
RESIZE = "resize"                # tuner (autotune=on)

# -- branches: each step's outcomes, named and mutually exclusive --------------------------------

CLAIMED = "claim"                # CLAIM: an index and a slot were claimed
EXIT = "exit"                    # CLAIM: closing, failed or out of indices: the worker ends
TAKE_ONE = "take"                # TAKE with run=1: one batch
END = "end"                      # TAKE: every item was delivered
ERROR = "error"                  # TAKE: the next item is a fetch error
CLOSED = "closed"                # TAKE: close was requested
ABANDON = "abandon"              # TAKE (abandon=on): the consumer walks away
GROW, SHRINK, STOP = "grow", "shrink", "stop"  # RESIZE

FETCH_OK, FETCH_ERROR, FETCH_END = "ok", "error", "end"  # FETCH's outcomes (END: an iterator ran out)
ACTION_FETCH = "fetch"           # the external action FETCH runs (bound by the live Prefetcher)


def take_up_to(r: int) -> str:
    """TAKE with runs: up to ``r`` ready batches in one step."""
    return f"take up to {r}"


# -- fields ---------------------------------------------------------------------------------------

SLOTS = "slots"              # per slot: (state, stream index)
LENGTH = "length"            # stream length (lowered when an iterator ends)
NEXT_INDEX = "next_index"    # the next stream index a worker claims
DELIVERED = "delivered"      # items handed to the consumer
CLOSING = "closing"          # close or abandon requested
ALIVE = "alive"              # workers not yet exited
ERROR_SEEN = "error_seen"    # index of the error the consumer raised, -1 if none
TARGET = "target"            # slots the workers may use at once (autotune moves it)
IDX, SLOT = "idx", "slot"    # a worker's locals: the index and slot it is filling
LEASE = "lease"              # the consumer's local: the slots of its run
