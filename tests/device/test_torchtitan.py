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
