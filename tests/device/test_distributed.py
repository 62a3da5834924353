"""torch.distributed on simhpu: the simccl backend in 2-process groups on
loopback (rank_pool.py; each rank runs a check of distributed_checks.py), DDP
and FSDP2 under torchrun (the examples), and what happens when a peer fails."""
import os
import subprocess
import sys

import pytest
import torch.distributed as dist
from rank_pool import RankPool

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch without distributed or gloo")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Pools:
    """One pool per environment for the module, restarted after a failure (its ranks may be stuck)."""

    def __init__(self):
        self._pools = {}

    def get(self, **env):
        key = tuple(sorted(env.items()))
        pool = self._pools.get(key)
        if pool is None or pool.broken:
            if pool is not None:
                pool.kill()
            pool = self._pools[key] = RankPool(2, env=env)
        return pool

    def close(self):
        for pool in self._pools.values():
            pool.close()


@pytest.fixture(scope="module")
def pools():
    p = Pools()
    yield p
    p.close()


@pytest.fixture
def ranks(pools):
    """Two processes, two devices each, rank r on simhpu:r."""
    return pools.get(SIMHPU_DEVICE_COUNT="2")


def test_simccl_is_the_default_backend_for_simhpu(ranks):
    assert ranks.run("backend_in_use") == [("simccl", "simhpu:0", "simccl"), ("simccl", "simhpu:1", "simccl")]


@pytest.mark.parametrize("check", [
    "all_reduce_every_op", "broadcast_from_each_root", "all_gather_forms", "reduce_scatter_forms",
    "all_to_all_forms", "gather_scatter_reduce", "point_to_point", "future_of_work", "dtensor_redistribute",
])
def test_collective_matches_cpu(ranks, check):
    ranks.run(check)


@pytest.mark.parametrize("rotate_method", ["allgather", "alltoall"])
def test_context_parallel_ring_attention_matches_the_whole_sequence_on_cpu(ranks, rotate_method):
    ranks.run("context_parallel_attention_matches_cpu", rotate_method)


@pytest.mark.parametrize("backend", ["simccl", "cpu:gloo,simhpu:simccl"])
def test_backend_named_in_init_process_group(backend):
    pool = RankPool(2, env={"CHECK_BACKEND": backend}, init="init_group_by_name")
    try:
        assert pool.run("cpu_and_device_tensors") == [backend, backend]
    finally:
        pool.close()


def test_one_device_per_process(pools):
    """SIMHPU_DEVICE_COUNT=1: both processes on their own simhpu:0."""
    pool = pools.get(SIMHPU_DEVICE_COUNT="1")
    assert [r[1] for r in pool.run("backend_in_use")] == ["simhpu:0", "simhpu:0"]
    pool.run("all_reduce_every_op")
    pool.run("ddp_step_matches_cpu")


def test_collectives_on_two_devices_of_one_process(ranks):
    ranks.run("two_devices_in_one_group")


def test_collective_waits_for_the_stream_not_the_host(ranks):
    (launch0, wait0, done0), (launch1, wait1, _) = ranks.run("collective_orders_with_streams")
    # Rank 1's stream is busy for 0.4 s before its input is ready; neither host waits for that.
    assert launch0 < 0.2 and launch1 < 0.2 and wait0 < 0.2 and wait1 < 0.2, (launch0, wait0, launch1, wait1)
    assert not done0


def test_wait_with_a_timeout_raises_when_the_collective_is_late(ranks):
    message = ranks.run("wait_with_a_timeout_raises_then_waits")[0]
    assert "simccl all_reduce on rank 0 of 2: not complete after 100 ms" in message, message


def test_a_skipped_collective_gives_up_its_turn(ranks):
    message = ranks.run("skipped_collective_gives_up_its_turn")[0]
    assert "fail_on_device" in message, message
    assert "'simccl' launched by all_reduce" in message and "was not run" in message, message


def test_a_host_collective_waits_for_the_device_collectives_queued_before_it(ranks):
    assert ranks.run("host_collective_follows_queued_device_collectives") == [True, True]


def test_dtensor_random_init_draws_a_stream_per_shard(ranks):
    assert ranks.run("dtensor_random_init_draws_a_stream_per_shard") == [True, True]


def test_ddp_runtime_statistics_come_from_the_device(ranks):
    times = ranks.run("ddp_reports_device_times")[0]
    assert all(t > 0 for t in times.values()), times


def test_a_collectives_input_is_let_go_at_wait_as_nccls_stash_is(ranks):
    ranks.run("an_input_is_let_go_at_wait_and_judged_on_its_allocation_stream")


def test_an_fsdp2_step_makes_no_device_wide_wait(ranks):
    assert ranks.run("fsdp2_step_makes_no_device_wide_wait") == [0, 0]


def test_barrier_waits_for_every_rank(ranks):
    waited = ranks.run("barrier_waits_for_every_rank")
    assert waited[0] > 0.3, waited


def test_ddp_step_matches_cpu(ranks):
    ranks.run("ddp_step_matches_cpu")


@pytest.mark.parametrize("check", ["compiled_functional_all_reduce", "compiled_ddp_matches_cpu"])
def test_compiled_collectives_match(ranks, check):
    ranks.run(check, timeout=300)


def test_bad_input_names_the_collective_and_the_group_stays_usable(ranks):
    messages = ranks.run("bad_inputs_raise_and_leave_the_group_usable")[0]
    assert all(m.startswith("simccl ") for m in messages), messages


def test_calls_the_ranks_disagree_on_fail_on_every_rank_naming_what_differs(ranks):
    # Gloo given these aborts the process or returns partly written outputs.
    for messages in ranks.run("mismatched_calls_fail_on_every_rank"):
        assert len(messages) == 6


def test_the_sanitizer_finds_a_collective_output_used_before_wait(ranks):
    for message in ranks.run("sanitizer_finds_a_collective_output_used_before_wait"):
        assert "simhpu sanitizer: aten::add.out" in message and "distributed_checks.py" in message


def test_the_sanitizer_finds_a_gradient_bucket_read_before_its_all_reduce(ranks):
    for message in ranks.run("sanitizer_finds_a_gradient_bucket_read_before_its_all_reduce"):
        assert "reads" in message and "all_reduce on simhpu" in message, message


def test_graph_capture_refuses_a_collective(ranks):
    message = ranks.run("capture_refuses_collectives")[0]
    assert "captur" in message, message


def run_fault(check, group_timeout_seconds):
    """A fault leaves its group broken: each runs in a pool of its own, killed after."""
    pool = RankPool(2, env={"CHECK_GROUP_TIMEOUT": str(group_timeout_seconds)})
    try:
        return pool.run(check, timeout=60)[0]
    finally:
        pool.kill()


def test_a_peer_that_exits_fails_the_collective_with_a_clear_error():
    message, seconds = run_fault("peer_exits", 30)
    assert "simccl all_reduce on rank 0 of 2 failed" in message, message
    assert "distributed_checks.py" in message  # the line that launched it
    assert seconds < 20, f"noticed after {seconds:.1f} s"


def test_a_peer_that_never_arrives_fails_the_collective_after_the_timeout():
    message, seconds = run_fault("peer_never_arrives", 3)
    assert "simccl all_reduce on rank 0 of 2 failed" in message and "imed out" in message, message
    assert 2.5 < seconds < 30, seconds


def torchrun(script, *args, **env):
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         os.path.join(ROOT, "examples", script), *args],
        capture_output=True, text=True, timeout=600, env={**os.environ, **env}, cwd=os.path.dirname(ROOT))


def test_simulated_time_is_the_same_whether_kernels_run_async_blocking_or_not_at_all(pools):
    """With the part's modelled host (the default), simulated time is the program's, not this
    machine's: the asynchronous queue, SIMHPU_LAUNCH_BLOCKING=1 and phantom execution give the
    same FSDP2 timeline, launch by launch. (It differed while simhpu's own bookkeeping launches,
    made only when the CPU workers were behind, counted as the host's, and while gloo's worker
    thread, which moves simccl's bytes, counted as the program's host.)
    Each way in processes of its own, started alike: the program's Python lines are priced, and a process that
    earlier checks ran in runs 14 more of them in an optimizer step (a state they leave, not a hook)."""
    queued = pools.get(SIMHPU_DEVICE_COUNT="2", TIMELINE="queued").run("fsdp2_steps_simulated_timeline", True)
    blocking = pools.get(SIMHPU_DEVICE_COUNT="2", TIMELINE="blocking", SIMHPU_LAUNCH_BLOCKING="1").run(
        "fsdp2_steps_simulated_timeline", True)
    phantom = pools.get(SIMHPU_DEVICE_COUNT="2", TIMELINE="phantom").run("fsdp2_steps_simulated_timeline", False)
    assert len(queued[0]) > 300 and any(op.startswith("all_gather") for op, *_ in queued[0])
    for rank in range(2):
        for other in (blocking[rank], phantom[rank]):
            first = next((i for i, (a, b) in enumerate(zip(queued[rank], other)) if a != b), None)
            assert first is None and len(other) == len(queued[rank]), (
                rank, first, *((queued[rank][max(0, first - 1):first + 2], other[max(0, first - 1):first + 2])
                               if first is not None else ()))


@pytest.mark.parametrize("device_count", ["1", "2"])
def test_torchrun_ddp_example_matches_cpu(device_count):
    result = torchrun("ddp.py", "--steps", "3", SIMHPU_DEVICE_COUNT=device_count)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert "match one CPU process" in result.stdout


def test_torchrun_fsdp2_example_matches_cpu_and_restores_a_checkpoint(tmp_path):
    result = torchrun("fsdp2.py", "--steps", "3", "--checkpoint", str(tmp_path / "ckpt"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert "match one CPU process" in result.stdout and "restores model and optimizer" in result.stdout


def test_simulated_time_orders_a_collective_between_its_producer_and_consumer(ranks):
    durations = ranks.run("simulated_all_reduce_orders_the_streams")
    assert durations[0] == durations[1] > 0
