"""The distributed search's machinery on dask.distributed: the cluster, the shard actors, the barrier.

What it guarantees
------------------
:func:`open_cluster` yields a :class:`distributed.Client` for a cluster
named by the caller -- ``"local:N"`` starts a :class:`~distributed.LocalCluster`
of N single-threaded worker processes and closes it on the way out,
``"tcp://HOST:PORT"`` (any scheduler address) connects to a running
scheduler, and a ``Client`` is used as given -- and nothing it started
outlives the ``with`` block. Without dask installed it raises a
:class:`~.._dsl.model.ModelError` that says which extra to install
(``pip install -e ".[distributed]"``); the command line turns that into one
line and exit code 2.

:class:`ActorPool` puts one :class:`ShardActor` on every dask worker, each
holding one :class:`~.shard.Worker` (or :class:`~.fpshard.FingerprintWorker`)
-- the same object the search logic lives in, so there is one
implementation of a shard, whatever carries its messages. The coordinator
(:mod:`.distributed`) calls :meth:`ActorPool.broadcast`; every exit from the
pool, an exception included, goes through :meth:`ActorPool.close`, which
unblocks and releases every actor and waits until the workers have dropped
them.

Theory of operation
-------------------
*Actors talk to actors.* A dask actor is an object living on one worker;
calling a method on its handle runs the method there. The actors receive
each other's handles (:meth:`ShardActor.connect`), and a worker's batch for
peer q travels as ``q.deliver(message)``: from worker to worker, never
through the client or the scheduler. One BFS level is one client call per
actor, ``run("level", ...)``; the client is the barrier.

*Why ``deliver`` is a coroutine.* Dask runs an actor's plain methods on one
thread per worker, and ``level`` holds that thread while it waits for its
peers' batches. A coroutine method runs on the worker's event loop instead,
so a peer's ``deliver`` gets in while ``level`` waits: it appends to the
inbox and wakes the waiter. The waiter polls (:data:`POLL`) for an abort
and for its own release, so a search whose coordinator gave up never
leaves a thread blocked on a worker.

*Failure.* An exception in model code reaches the client as itself, with
the worker's traceback as a note; the peers blocked on the failed worker's
batch are aborted. A worker that dies (its process killed) is noticed by
the client, which checks every :data:`POLL` seconds of waiting that each
actor's worker is still in the cluster: the search then raises
:class:`ClusterError` instead of waiting for a batch that will not come.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import logging
import pickle
import re
import threading
import time
import traceback
import uuid
from typing import Any, Iterator, Mapping

from .._dsl.model import Machine, Model, ModelError
from .explore import _is_default
from .modelref import ModelRef

__all__ = ["POLL", "ActorPool", "ClusterError", "ShardActor", "open_cluster", "prepare",
           "require_distributed"]

#: Seconds between liveness checks while someone waits: how soon an actor notices an abort or
#: its own release, and the client a worker that died. Waits themselves end the moment their
#: message arrives; this bounds only how long a failure goes unnoticed.
POLL = 0.5

#: Seconds :meth:`ActorPool.close` waits for the workers to drop the actors, and a local cluster
#: to shut down, before it gives up (the cluster's own close then kills what is left).
CLOSE_TIMEOUT = 10.0

#: Seconds a search waits for a cluster that has no worker at the moment it starts.
WORKER_WAIT = 30.0

INSTALL_HINT = 'pip install -e ".[distributed]"'

_LOCAL = re.compile(r"local:(\d+)\Z")


class ClusterError(RuntimeError):
    """The cluster failed under the search: a worker died, or an actor could not be reached."""


class _Aborted(Exception):
    """Raised in an actor whose search was abandoned by its coordinator."""


def _portable(e: BaseException) -> BaseException:
    """``e`` if it survives pickling and unpickling, else a RuntimeError that says what it was."""
    try:
        pickle.loads(pickle.dumps(e))
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")
    return e


def prepare(model: type[Model], config: Mapping[str, Any] | None) -> tuple[ModelRef, dict, Machine, str | None]:
    """What a search on a cluster does before it starts one: the model by reference, the config,
    the machine compiled here (so a bad config is a ModelError in the caller) and the expected
    verdict, and a clear ModelError if dask is missing."""
    ref = ModelRef.of(model)
    config = dict(config or {})
    machine = model.compile(config)
    expected = model.expected if not config or _is_default(model, machine.config) else None
    require_distributed()
    return ref, config, machine, expected


def require_distributed() -> Any:
    """The ``distributed`` module, or a ModelError saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise ModelError("the cluster search needs dask.distributed, which is not installed: "
                         f"{INSTALL_HINT} (or pip install distributed)") from None
    return distributed


@contextlib.contextmanager
def open_cluster(cluster: Any) -> Iterator[Any]:
    """A Client for ``cluster``: ``"local:N"``, a scheduler address, or a Client (used as is, not closed)."""
    distributed = require_distributed()
    if isinstance(cluster, distributed.Client):
        yield cluster
        return
    if not isinstance(cluster, str):
        raise ModelError(f"cluster must be 'local:N', a scheduler address or a distributed.Client, not {cluster!r}")
    m = _LOCAL.match(cluster)
    if m:
        n = int(m.group(1))
        if n < 1:
            raise ModelError("local:N needs at least one worker")
        with distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                                      silence_logs=logging.ERROR) as local:
            with distributed.Client(local, direct_to_workers=True) as client:
                client.wait_for_workers(n)
                yield client
        return
    if "://" not in cluster:
        raise ModelError(f"unknown cluster {cluster!r}: use local:N or a scheduler address such as tcp://HOST:PORT")
    client = _connect(distributed, cluster)
    with client:
        yield client


#: Seconds a scheduler address has to answer as a dask scheduler (dask's own timeout covers the connect only).
CONNECT_SECONDS = 30.0


def _connect(distributed: Any, address: str) -> Any:
    """A Client of the scheduler at ``address``, or a :class:`ModelError` that says why not, within
    :data:`CONNECT_SECONDS`.

    A listener that accepts and never speaks dask (a web server on the dashboard's port) hung the search for
    good: dask's ``timeout`` bounds the connect, not the handshake. Another service's bytes, or an address
    of an unknown or unusable scheme, raised whatever dask's parsing met (a 2.8 EiB ``MemoryError`` for an
    SSH banner), and it was blamed on the model. The Client is made on a thread of its own; one that does
    not finish in time is left to end when the connection does.
    """
    box: list[Any] = []
    done = threading.Event()

    def make() -> None:
        try:
            box.append(("client", distributed.Client(address, direct_to_workers=True, timeout=10)))
        except Exception as e:  # noqa: BLE001 - every failure to connect is reported as one
            box.append(("error", e))
        finally:
            done.set()

    threading.Thread(target=make, name="safeprefetch-cluster-connect", daemon=True).start()
    if not done.wait(CONNECT_SECONDS):
        raise ModelError(f"cannot reach the dask scheduler at {address}: no dask handshake within "
                         f"{CONNECT_SECONDS:g} s (is a dask scheduler listening there?)")
    kind, value = box[0]
    if kind == "error":
        text = str(value).strip() or type(value).__name__
        raise ModelError(f"cannot reach the dask scheduler at {address}: {type(value).__name__}: {text[:300]}")
    return value


class ShardActor:
    """A dask actor holding one shard of the search, and its end of the actor-to-actor link.

    Every method is a coroutine, so none occupies the worker's one actor thread: the shard's
    work runs on a thread of its own (:meth:`run`), and actors of two searches sharing a
    worker never wait on each other.
    """

    def __init__(self, ref: ModelRef, config: Mapping[str, Any], reduce: str, store: str, me: int, nproc: int):
        from concurrent.futures import ThreadPoolExecutor

        from distributed import get_worker

        from .fpshard import FingerprintWorker
        from .shard import Worker

        machine = ref.resolve().compile(dict(config))
        kind = FingerprintWorker if store == "fingerprint" else Worker
        self.worker = kind(me, nproc, machine, reduce, self)
        self.dask_worker = get_worker()
        self.thread = ThreadPoolExecutor(1, thread_name_prefix=f"safeprefetch-shard-{me}")
        self.peers: list[Any] = []
        self.inbox: list[tuple] = []
        self.outbox: list[Any] = []  # sends not yet known to be delivered
        self.cond = threading.Condition()
        self.aborted = False

    async def connect(self, peers: list[Any]) -> None:
        self.peers = peers

    async def run(self, command: str, *args: Any) -> Any:
        """Run ``command`` on the shard, on the shard's thread; an exception comes back as itself,
        with this worker's traceback (the dask context goes along: the peers' handles need it)."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.thread, context.run, self._run, command, args)

    def _run(self, command: str, args: tuple) -> Any:
        try:
            return getattr(self.worker, command)(*args)
        except _Aborted:
            raise
        except Exception as e:
            text = traceback.format_exc()
            e.add_note(f"raised in cluster search worker {self.worker.me}:\n{text}")
            if _portable(e) is not e:
                raise ClusterError(f"cluster search worker {self.worker.me}: {type(e).__name__}: {e}\n{text}") from None
            raise

    async def memory(self) -> dict[str, int]:
        """This worker process's resident bytes, and the fingerprint table's bytes (fingerprint mode)."""
        from .budget import resident_bytes

        table = getattr(self.worker, "table", None)
        return {"rss": resident_bytes(), "table": table.nbytes if table is not None else 0}

    # -- the link (see shard.Link) ----------------------------------------------------

    async def deliver(self, message: tuple) -> None:
        with self.cond:
            self.inbox.append(message)
            self.cond.notify()

    async def abort(self) -> None:
        with self.cond:
            self.aborted = True
            self.cond.notify_all()

    async def disconnect(self) -> None:
        """Drop the shard, the peers' handles (each one holds its actor's key on the scheduler) and the thread.

        The shard froze what it stored (``gc.freeze``); unfreezing hands it back to the cyclic
        GC, so a long-lived worker of a shared cluster does not keep it out of collection.
        """
        self.peers, self.outbox = [], []
        self.thread.shutdown(wait=False)
        # The shard and this actor refer to each other, and dask keeps actors in reference
        # cycles: dropping the shard here frees its states now, not at the next full collection.
        self.worker = None
        gc.unfreeze()

    def send_all(self, messages: dict[int, tuple]) -> None:
        # No wait for the peers' acknowledgements: a level ends only once every shard has
        # received every message addressed to it, so the barrier already covers them. A send
        # that failed is noticed while waiting (_check_wanted).
        self.outbox = [f for f in self.outbox if not f.done()]
        self.outbox += [self.peers[w].deliver(m) for w, m in messages.items()]

    def receive(self) -> tuple:
        with self.cond:
            while True:  # not ``while not self.inbox:``: 3.13 leaves its back-edge out of the with
                if self.inbox:
                    return self.inbox.pop(0)
                self.cond.wait(POLL)
                if self.inbox:
                    continue
                self._check_wanted()

    def _check_wanted(self) -> None:
        if self.aborted:
            raise _Aborted("the search was abandoned")
        for f in self.outbox:
            if f.done():
                f.result()  # raises what the send met
        if not any(a is self for a in self.dask_worker.state.actors.values()):
            raise _Aborted("this actor was released")


class ActorPool:
    """One :class:`ShardActor` per dask worker, and the client-side barrier over them."""

    def __init__(self, client: Any, ref: ModelRef, config: Mapping[str, Any], reduce: str, store: str):
        self.client = client
        self.closed = False
        self.futures: list[Any] = []
        self.actors: list[Any] = []
        workers = _workers(client)
        self.addresses = workers
        self.nproc = len(workers)
        tag = uuid.uuid4().hex[:12]
        try:
            self.futures = [client.submit(ShardActor, ref, dict(config), reduce, store, w, self.nproc, actor=True,
                                          workers=[addr], allow_other_workers=False, pure=False,
                                          key=f"safeprefetch-shard-{tag}-{w}")
                            for w, addr in enumerate(workers)]
            self.actors = self._gather(self.futures, actor_futures=False)
            self._gather([a.connect(self.actors) for a in self.actors])
        except BaseException:
            self.close(graceful=False)
            raise

    def broadcast(self, command: str, *args: Any) -> list[Any]:
        """Run ``command`` on every shard; their replies, by worker."""
        return self._gather([a.run(command, *args) for a in self.actors])

    def call(self, w: int, command: str, *args: Any) -> Any:
        """Run ``command`` on shard ``w`` alone."""
        return self._gather([self.actors[w].run(command, *args)])[0]

    def memory(self) -> list[dict[str, int]]:
        return self._gather([a.memory() for a in self.actors])

    def _gather(self, futures: list[Any], actor_futures: bool = True) -> list[Any]:
        """Wait for every future; raise the first exception at once, or ClusterError if a worker vanished."""
        client, addresses = self.client, self.addresses

        async def wait_all() -> list[Any]:
            if actor_futures:
                tasks = [asyncio.ensure_future(_awaited(f)) for f in futures]
            else:
                tasks = [asyncio.ensure_future(f._result()) for f in futures]
            try:
                lost: list[str] = []  # the loop's head must not open the try (3.11, 3.12: backedges.py)
                while True:
                    done, pending = await asyncio.wait(tasks, timeout=POLL, return_when=asyncio.FIRST_EXCEPTION)
                    # No loop here ends in an ``if`` (lowlevel.escaping_back_edges: 3.13 leaves such
                    # back-edges out of the ``finally``).
                    for t in done:
                        error = t.exception()
                        if error is None:
                            continue
                        if isinstance(error, OSError):  # dask could not reach the actor's worker
                            raise ClusterError(f"cluster search: a dask worker died or cannot be reached "
                                               f"({type(error).__name__}: {error})") from error
                        raise error
                    if not pending:
                        return [t.result() for t in tasks]
                    alive = await client.scheduler.ncores()
                    lost = sorted(set(addresses).difference(alive))
                    if not lost:
                        continue
                    raise ClusterError(f"cluster search: the dask worker at {lost[0]} died "
                                       f"(workers alive: {len(alive)})")
            finally:
                _cancel_all(tasks)

        return client.sync(wait_all)

    def close(self, graceful: bool = True) -> None:
        """Abort any waiting actor, release every actor, and wait (bounded) until the workers dropped them."""
        if self.closed:
            return
        self.closed = True
        client = self.client
        if self.actors:
            with contextlib.suppress(Exception):
                self._gather([a.disconnect() if graceful else a.abort() for a in self.actors])
            if not graceful:
                with contextlib.suppress(Exception):
                    self._gather([a.disconnect() for a in self.actors])
        keys = [f.key for f in self.futures]
        if keys:
            # force: the actor handles hold the keys too (every call on a handle leaves a reference
            # cycle behind, so they go only when the cyclic GC runs); the keys must go now.
            with contextlib.suppress(Exception):
                client.cancel(self.futures, force=True)
        self.actors, self.futures = [], []
        if not keys:
            return
        deadline = time.monotonic() + CLOSE_TIMEOUT
        with contextlib.suppress(Exception):
            while True:
                if time.monotonic() >= deadline:
                    break
                held = client.run(_held_actors, keys, on_error="ignore")
                if not any(held.values()):
                    break
                time.sleep(0.01)  # polling the workers' observable state, not a synchronisation


def _cancel_all(tasks: list[Any]) -> None:
    for t in tasks:
        t.cancel()


def _workers(client: Any) -> list[str]:
    """The addresses of the cluster's workers, sorted; if there is none at this moment (a worker
    restarting, the client reconnecting under load), wait up to :data:`WORKER_WAIT` seconds for one.
    Any number of workers gives the same result, so the search takes whoever is there."""
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    if not workers:
        with contextlib.suppress(Exception):  # dask's TimeoutError: reported below, in our words
            client.wait_for_workers(1, timeout=WORKER_WAIT)
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    if not workers:
        raise ClusterError(f"the dask cluster has no workers (none joined within {WORKER_WAIT:g} s)")
    return workers


async def _awaited(future: Any) -> Any:
    return await future


def _held_actors(keys: list[str], dask_worker: Any = None) -> int:
    """Run on each worker: how many of ``keys`` it still holds as actors."""
    return sum(k in dask_worker.state.actors for k in keys)
