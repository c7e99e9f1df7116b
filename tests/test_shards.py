"""The partitioned search's numbering holds for any number of shards, not only the two a test cluster has.

The cluster tests (tests/test_parallel.py) run on a real LocalCluster of two workers. Here the
same shards (:class:`Worker`, :class:`FingerprintWorker`) and the same coordinator (``_Levels``)
run in this process, each shard on a thread of its own, linked by queues: the transport is the
only thing that differs, so the serials, keys, ranks, caps and chains are checked at P = 1, 3
and 5 in a fraction of a second, with or without dask installed.
"""

import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from safeprefetch import catalog, load_model
from safeprefetch._check.distributed import _Levels
from safeprefetch._check.explore import Explorer
from safeprefetch._check.fpshard import FingerprintWorker
from safeprefetch._check.shard import Worker

pytestmark = pytest.mark.timeout(120)

MODELS = catalog()


class QueueLink:
    """One shard's end of the in-process link: a queue per shard."""

    def __init__(self, me: int, inboxes: list[queue.Queue]):
        self.me, self.inboxes = me, inboxes

    def send_all(self, messages: dict[int, tuple]) -> None:
        for w, m in messages.items():
            self.inboxes[w].put(m)

    def receive(self) -> tuple:
        return self.inboxes[self.me].get(timeout=60)


class ThreadPool:
    """What ``_Levels`` needs of ActorPool, with the shards on threads of this process."""

    def __init__(self, machine, nproc: int, reduce: str, store: str):
        inboxes = [queue.Queue() for _ in range(nproc)]
        kind = FingerprintWorker if store == "fingerprint" else Worker
        self.nproc = nproc
        self.shards = [kind(w, nproc, machine, reduce, QueueLink(w, inboxes)) for w in range(nproc)]
        self.threads = ThreadPoolExecutor(nproc)
        self.closed = False

    def broadcast(self, command: str, *args):
        return list(self.threads.map(lambda shard: getattr(shard, command)(*args), self.shards))

    def call(self, w: int, command: str, *args):
        return getattr(self.shards[w], command)(*args)

    def memory(self):
        return [{"rss": 0, "table": 0} for _ in self.shards]

    def close(self, graceful: bool = True) -> None:
        self.closed = True
        self.threads.shutdown()


def partitioned(machine, nproc: int, reduce="none", store="full", max_states=2_000_000):
    levels = _Levels(Explorer(machine, reduce=reduce), max_states, store)
    pool = ThreadPool(machine, nproc, reduce, store)
    levels.search(pool, None, 3.0)
    assert pool.closed and threading.active_count() < 50
    return levels


def assert_sequential(levels, seq):
    # As explore_cluster reports it: a search that found a violation is exhaustive as far as it needed.
    exhaustive = levels.exhaustive or levels.violation is not None
    assert (levels.stored, levels.transitions, levels.depth, exhaustive) == (
        seq.states, seq.transitions, seq.max_depth, seq.exhaustive)
    got = levels.violation
    if seq.violation is None or seq.verdict == "starvation":  # starvation: checked after, by the caller
        assert got is None
    else:
        fields = lambda v: (v.kind, v.message, v.on_step, v.step, v.state, v.trace)  # noqa: E731
        assert fields(got) == fields(seq.violation)


@pytest.mark.parametrize("nproc", [1, 3, 5])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_any_number_of_shards_numbers_the_states_as_sequential_bfs(name, nproc):
    machine = MODELS[name].compile({})
    if machine.invariant_violation(machine.init):
        pytest.skip("fails at the root: no level runs")
    reduce = "symmetry" if machine.symmetry else "none"
    seq = Explorer(machine, reduce=reduce).run()
    assert_sequential(partitioned(machine, nproc, reduce), seq)


PREFETCHER = {"workers": 3, "capacity": 2, "items": 3, "close": True, "error": True}  # 2246 states


@pytest.mark.parametrize("store", ["full", "fingerprint"])
@pytest.mark.parametrize("cap", [1, 2, 300, 2245, 2246])
def test_the_state_cap_cuts_where_sequential_bfs_cuts_with_three_shards(store, cap):
    machine = load_model("prefetcher").compile(PREFETCHER)
    seq = Explorer(machine, reduce="none", max_states=cap).run()
    assert_sequential(partitioned(machine, 3, store=store, max_states=cap), seq)


@pytest.mark.parametrize("name", ["one_cond_signal", "if_not_while", "lease_overwrite", "semaphores"])
def test_fingerprint_shards_rebuild_the_sequential_trace_from_parent_fingerprints(name):
    machine = MODELS[name].compile({})
    seq = Explorer(machine, reduce="none").run()
    assert_sequential(partitioned(machine, 4, store="fingerprint"), seq)
