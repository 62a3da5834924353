"""Process groups for tests: N spawned processes on loopback, each with the
default process group initialised once, that run named check functions on
request. Starting processes and connecting gloo costs seconds, so a pool
serves many tests; every request is bounded in time, and a pool that overruns
is killed, so a hung collective fails its test instead of the suite.

A check is a function of `distributed_checks` taking (rank, world, *args); what
it returns comes back per rank, what it raises fails the test with the rank's
traceback.
"""
from __future__ import annotations

import os
import queue
import socket
import traceback

import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(rank, world, port, init, tasks, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    import distributed_checks

    try:
        getattr(distributed_checks, init)(rank, world)
        results.put((rank, True, None))
    except BaseException:  # noqa: BLE001  (reported to the parent)
        results.put((rank, False, traceback.format_exc()))
        return
    while True:
        request = tasks.get()
        if request is None:
            break
        name, args = request
        try:
            results.put((rank, True, getattr(distributed_checks, name)(rank, world, *args)))
        except BaseException:  # noqa: BLE001
            results.put((rank, False, traceback.format_exc()))
    distributed_checks.shutdown(rank, world)


class RankFailure(AssertionError):
    pass


class RankPool:
    def __init__(self, world: int = 2, env: dict | None = None, init: str = "init_default_group",
                 timeout: float = 120.0):
        self.world = world
        self.broken = False  # a rank failed or overran: its peers may be stuck in a collective
        context = mp.get_context("spawn")
        self._tasks = [context.Queue() for _ in range(world)]
        self._results = context.Queue()
        port = free_port()
        self._processes = []
        saved = dict(os.environ)
        os.environ.update(env or {})  # in the children's environment from the start: importing torch reads it
        try:
            for rank in range(world):
                p = context.Process(target=_serve, args=(rank, world, port, init, self._tasks[rank], self._results),
                                    daemon=True)
                p.start()
                self._processes.append(p)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self._collect("start-up", timeout)

    def run(self, name: str, *args, timeout: float = 60.0) -> list:
        """Runs distributed_checks.<name>(rank, world, *args) on every rank; the results by rank."""
        for tasks in self._tasks:
            tasks.put((name, args))
        return self._collect(name, timeout)

    def _collect(self, what: str, timeout: float) -> list:
        results: dict[int, object] = {}
        failures = []
        try:
            for _ in range(self.world):
                rank, ok, value = self._results.get(timeout=timeout)
                if ok:
                    results[rank] = value
                else:
                    failures.append(f"rank {rank}:\n{value}")
        except queue.Empty:
            self.broken = True
            self.kill()
            raise RankFailure(f"{what}: not every rank finished within {timeout:.0f} s "
                              f"(finished: {sorted(results)}); the pool was killed") from None
        if failures:
            self.broken = True
            raise RankFailure(f"{what} failed on {len(failures)} rank(s):\n" + "\n".join(failures))
        return [results[r] for r in range(self.world)]

    def close(self, timeout: float = 30.0) -> None:
        for tasks in self._tasks:
            tasks.put(None)
        for p in self._processes:
            p.join(timeout)
        self.kill()

    def kill(self) -> None:
        for p in self._processes:
            if p.is_alive():
                p.kill()
                p.join()
