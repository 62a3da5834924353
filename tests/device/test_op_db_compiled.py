"""PyTorch's operator database under torch.compile on simhpu.

A quarter of op_db (every fourth OpInfo by name, so the selection is fixed and
covers every family), float32, forward: the op compiled with Inductor, no
arguments, on simhpu, against the CPU. Inductor may legitimately compute
otherwise than eager (other decompositions, float32 accumulation), so a result
that differs from CPU eager is checked against the same compile on the CPU.
Random ops and what the CPU rejects are not cases here (tests/device/test_op_db.py
covers them eagerly).
"""

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import opdb_harness as harness  # (loaded by conftest.py)

SAMPLES = 2
SELECTED = sorted(op_db, key=lambda op: (op.name, op.variant_test_name))[::4]
# Inductor refuses these graphs on the CPU too, or their outputs are not values.
NOT_COMPILABLE = {
    "item": "returns a Python number: a graph break, nothing to compile",
    "tolist": "returns Python lists: a graph break",
}


def _ids(op):
    return f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("op", SELECTED, ids=_ids)
def test_op_db_compiled(op):
    if torch.float32 not in op.supported_dtypes("cpu"):
        pytest.skip("no float32 on the CPU")
    if op.name in harness.NOT_COMPARABLE or op.name in NOT_COMPILABLE:
        pytest.skip(harness.NOT_COMPARABLE.get(op.name) or NOT_COMPILABLE[op.name])
    try:
        pairs = harness.paired_samples(op, torch.float32, requires_grad=False)[:SAMPLES]
    except Exception as e:  # noqa: BLE001 - the op database itself failed
        pytest.skip(f"sample_inputs failed: {type(e).__name__}")

    def run(sample):
        return op(sample.input, *sample.args, **sample.kwargs)

    compiled = torch.compile(run)
    checked = 0
    for cpu_sample, device_sample in pairs:
        try:
            expected = run(cpu_sample)
        except Exception:  # noqa: BLE001 - not a case: the CPU rejects it
            continue
        if harness.is_random(lambda: run(cpu_sample), cpu_sample):
            continue
        actual = compiled(device_sample)
        tolerance = harness.tolerance(op, torch.float32)
        try:
            harness.compare(expected, actual, **tolerance)
        except AssertionError:
            torch._dynamo.reset()
            compiled_on_cpu = torch.compile(run)(cpu_sample)
            harness.compare(compiled_on_cpu, actual, **tolerance)  # Inductor's own difference from eager
        torch.simhpu.synchronize()
        checked += 1
    if checked == 0:
        pytest.skip("no sample the CPU accepts deterministically")
