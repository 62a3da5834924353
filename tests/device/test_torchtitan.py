"""PyTorch's own training platform, unchanged, on the device: torchtitan's Llama-3 debug model
trained by `torchrun -m torchtitan.train` on simhpu, against the same run on the CPU from the same
seed checkpoint, bit for bit (titan_runs/harness.py). Three configurations run here; the
others (one process in float32 and under autocast, tensor parallelism, every activation
checkpoint mode, flex attention, the full debug configuration) in scripts/torchtitan_e2e.py.
"""
import re

import pytest

pytest.importorskip("torchtitan")

from titan_runs import harness  # noqa: E402


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = harness.make_workdir(tmp_path_factory.mktemp("torchtitan"))
    harness.seed_checkpoint(root)
    return root


def assert_same_training(device_run, cpu_run, step):
    assert device_run.losses == cpu_run.losses, (device_run.losses, cpu_run.losses)
    assert len(device_run.losses) == step
    differences = harness.weight_differences(device_run.weights(step), cpu_run.weights(step))
    assert not differences, f"weights not bit-identical to the CPU's: {differences}"


def test_two_processes_with_fsdp_train_as_on_the_cpu(workdir):
    # torchtitan's defaults: FSDP2 over both ranks, bfloat16 parameters, float32 reductions.
    device_run = harness.train(workdir, "simhpu", 2, "fsdp-simhpu", 3)
    assert "SIMHPU capacity: simhpu" in device_run.log  # torchtitan chose the device by itself
    assert_same_training(device_run, harness.train(workdir, "cpu", 2, "fsdp-cpu", 3), 3)


def test_compiled_model_and_loss_train_as_on_the_cpu(workdir):
    device_run = harness.train(workdir, "simhpu", 2, "compile-simhpu", 3, "--compile.enable")
    assert "Compiling each TransformerBlock with torch.compile" in device_run.log
    assert_same_training(device_run, harness.train(workdir, "cpu", 2, "compile-cpu", 3, "--compile.enable"), 3)


def test_a_checkpoint_saved_and_loaded_resumes_training_exactly(workdir):
    # Saved at step 2 (model, optimizer, data loader: DCP under FSDP), resumed in a new run.
    resumed = harness.train_resumed(workdir, "simhpu", 2, "resume-simhpu", 4, 2)
    assert "Loading the checkpoint from" in resumed.log and "step-2" in resumed.log
    straight = harness.train(workdir, "cpu", 2, "straight-cpu", 4)
    assert resumed.losses == {step: straight.losses[step] for step in (3, 4)}
    assert not harness.weight_differences(resumed.weights(4), straight.weights(4))


def test_a_dry_run_on_the_fake_process_group_plans_eight_ranks(workdir):
    # torchtitan's comm.mode="fake_backend": one process stands for 8 (FSDP 4 x TP 2).
    run = harness.torchtitan(workdir, "simhpu", 1, "fake", *harness.SHORT_RUN, "--training.steps", "2",
                             "--comm.mode", "fake_backend", "--parallelism.tensor_parallel_degree", "2",
                             env={"NGPU": "8"})
    assert sorted(run.losses) == [1, 2]


def test_llama_70b_at_its_published_layout_runs_in_phantom_on_256_simulated_ranks(tmp_path):
    """Llama-3.1 70B, FSDP 32 x TP 8 on 256 H100s, torchtitan unchanged: rank 0 builds the model on
    the meta device, initialises it and steps, with no kernel run and 80 GB "allocated" on this machine."""
    import subprocess
    import sys

    root = harness.make_workdir(tmp_path, reserved_to=128256)
    config = harness.DEBUG_MODEL_TOML.replace('flavor = "debugmodel"', 'flavor = "70B"').replace(
        "tensor_parallel_degree = 1", "tensor_parallel_degree = 8").replace('mode = "selective"', 'mode = "full"')
    (root / "llama3_70b.toml").write_text(config)
    done = subprocess.run([sys.executable, "-m", "torch_simhpu.simulation", "--profile", "h100-sxm", "--world", "256",
                           "--rank", "0", "-m", "torchtitan.train", "--job.config_file", "llama3_70b.toml",
                           "--training.steps", "1", "--training.seq_len", "8192", "--training.local_batch_size", "8"],
                          cwd=root, capture_output=True, text=True, timeout=600)
    log = harness.ANSI.sub("", done.stdout + done.stderr)
    assert done.returncode == 0, log[-4000:]
    assert "Model llama3 70B size: 70,553,706,496 total parameters" in log
    assert "dp_shard=32, cp=1, tp=8" in log
    assert "step:  1" in log and re.search(r"phantom: (none|\d+) ran", log)
    memory = float(harness.re.search(r"memory:\s+([0-9.]+)GiB", log).group(1))
    assert 20 < memory < 74.5, memory  # the part's memory, held by the step (not this machine's)
    # FSDP's collectives over the 32 ranks of the data-parallel dimension, one per node
    assert any(line.startswith("all_gather") and "(32)" in line for line in log.splitlines()), log[-3000:]


def _simulated_titan(root, config_text, world, rank, *args, **env):
    import os
    import subprocess
    import sys

    (root / "job.toml").write_text(config_text)
    done = subprocess.run([sys.executable, "-m", "torch_simhpu.simulation", "--profile", "h100-sxm", "--world",
                           str(world), "--rank", str(rank), "-m", "torchtitan.train", "--job.config_file", "job.toml",
                           "--training.steps", "2", *args],
                          cwd=root, capture_output=True, text=True, timeout=600, env=dict(os.environ, **env))
    log = harness.ANSI.sub("", done.stdout + done.stderr)
    assert done.returncode == 0, log[-4000:]
    assert "step:  2" in log, log[-3000:]
    return log


def test_context_parallelism_runs_its_ring_attention_on_simulated_ranks(tmp_path):
    """torchtitan's context parallelism (ring attention over the cp dimension, head-and-tail load
    balancing of 2 sequences) and tensor parallelism on rank 0 of 8 simulated ranks: the device's
    fused attention is taken by PyTorch's ring (cuDNN's operators under torchtitan's backend order),
    and the keys and values are all-gathered over the 2 ranks of the cp group."""
    root = harness.make_workdir(tmp_path)
    config = harness.DEBUG_MODEL_TOML.replace(
        "tensor_parallel_degree = 1", "tensor_parallel_degree = 2\ncontext_parallel_degree = 2").replace(
        "local_batch_size = 8", "local_batch_size = 2")
    log = _simulated_titan(root, config, 8, 0)
    assert "cp=2, tp=2" in log and "Applied Context Parallel to the model" in log
    assert "aten::_scaled_dot_product_flash_attention_fo" in log  # the fused kernels, not the math path
    assert any(line.startswith("all_gather") and "(2)" in line for line in log.splitlines()), log[-3000:]


def _largest_all_to_all(log):
    sizes = [int(line.split()[1]) for line in log.splitlines() if line.startswith("all_to_all ")]
    assert sizes, log[-3000:]
    return max(sizes)


def test_expert_parallelism_moves_the_tokens_the_stated_routing_sends(tmp_path):
    """torchtitan's DeepSeek-V3 debug model (8 experts, 3 a token) at expert parallelism 8, rank 0
    of 8 simulated ranks: the router's counts are the stated routing's and are exchanged among the
    simulated peers, so under a Zipf skew rank 0 (expert 0, the hottest) receives more tokens than
    balanced, and its token dispatch moves more bytes."""
    root = harness.make_workdir(tmp_path)
    config = harness.DEBUG_MODEL_TOML.replace('name = "llama3"', 'name = "deepseek_v3"').replace(
        "tensor_parallel_degree = 1", "tensor_parallel_degree = 1\nexpert_parallel_degree = 8")
    balanced = _simulated_titan(root, config, 8, 0, SIMHPU_PHANTOM_ROUTING="balanced")
    skewed = _simulated_titan(root, config, 8, 0, SIMHPU_PHANTOM_ROUTING="zipf:1.0")
    for log in (balanced, skewed):
        assert "ep=8" in log and re.search(r"collectives answered as if every simulated peer sent", log), log[-3000:]
    assert "routing (SIMHPU_PHANTOM_ROUTING): zipf:1.0" in skewed
    # expert 0's share under Zipf 1.0 over 8 experts: 1 / (1 + 1/2 + ... + 1/8) = 37 %, 2.9 x balanced
    assert _largest_all_to_all(skewed) > 2.5 * _largest_all_to_all(balanced)
