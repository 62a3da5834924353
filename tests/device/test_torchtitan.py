"""PyTorch's own training platform, unchanged, on the device: torchtitan's Llama-3 debug model
trained by `torchrun -m torchtitan.train` on simhpu, against the same run on the CPU from the same
seed checkpoint, bit for bit (titan_runs/harness.py). Three configurations run here; the
others (one process in float32 and under autocast, tensor parallelism, every activation
checkpoint mode, flex attention, the full debug configuration) in scripts/torchtitan_e2e.py.
"""

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
