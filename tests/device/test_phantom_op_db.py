"""PyTorch's operator database under phantom execution (issue 55): every operator whose results'
shapes do not depend on its inputs' values runs and is priced; only the data-dependent ones below
are refused, each for its reason."""
import collections
import os
import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import torch_simhpu  # noqa: F401
from torch_simhpu import _C
from torch_simhpu.simulation import part_fit
from torch_simhpu.simulation import simulate

# What phantom execution may refuse: the operator's results (or their shapes) are its inputs' values.
DATA_DEPENDENT = {
    "aten::nonzero": "as many rows as nonzero elements",
    "aten::masked_select": "as many elements as the mask selects",
    "aten::_unique2": "as many elements as distinct values",
    "aten::unique_consecutive": "as many elements as runs of equal values",
    "aten::equal": "returns whether the values are equal: a value, not a tensor",
    "aten::_to_sparse": "as many stored elements as nonzero ones",
    "aten::_to_sparse.sparse_dim": "as many stored elements as nonzero ones",
    "aten::_ctc_loss.Tensor": "the alignment's length is the largest target length, a device tensor's value",
    "aten::_ctc_loss": "the alignment's length is the largest target length, a device tensor's value",
    "aten::linalg_lstsq.out": "the residuals are empty unless the solution's rank, a value, is full",
}
SAMPLES = 3  # (each operator's first samples of each dtype: its shapes, broadcasts and options vary there)


def _refusals(dtypes, known_bytes: str) -> dict[str, set[str]]:
    """What phantom execution refuses of op_db's samples, made on the device in the block: known to
    the host with a known-values limit (torch_simhpu/simulation/phantom.py), unknown with none ("0")."""
    profile = dict(part_fit._raw("h100-sxm"), memory_capacity=float(_C._memory_limit()))
    refused = collections.defaultdict(set)
    before = os.environ.get("SIMHPU_PHANTOM_KNOWN_BYTES")
    os.environ["SIMHPU_PHANTOM_KNOWN_BYTES"] = known_bytes
    try:
        with warnings.catch_warnings(), simulate(profile, execute=False):
            _sweep(dtypes, refused)
    finally:
        if before is None:
            del os.environ["SIMHPU_PHANTOM_KNOWN_BYTES"]
        else:
            os.environ["SIMHPU_PHANTOM_KNOWN_BYTES"] = before
    return refused


def _sweep(dtypes, refused) -> None:
    warnings.simplefilter("ignore")
    for op in op_db:
        for dtype in dtypes:
            if dtype not in op.supported_dtypes("cpu"):
                continue
            try:
                samples = list(op.sample_inputs("simhpu", dtype, requires_grad=False))[:SAMPLES]
            except Exception:  # noqa: BLE001 - a sample generator that reads values: not the operator's refusal
                continue
            for sample in samples:
                try:
                    op(sample.input, *sample.args, **sample.kwargs)
                except Exception as error:  # noqa: BLE001 - only a phantom refusal counts here
                    message = str(error)
                    if "needs its inputs' values on the host" in message:
                        refused[message.split(" needs its")[0].strip()].add(f"{op.name} ({dtype})")
    torch.simhpu.synchronize()


def test_phantom_execution_refuses_only_data_dependent_operators_of_op_db():
    refused = _refusals((torch.float32, torch.bfloat16), known_bytes="0")
    unexpected = {op: sorted(cases)[:4] for op, cases in refused.items() if op not in DATA_DEPENDENT}
    assert not unexpected, f"refused under phantom execution though their shapes do not depend on values: {unexpected}"
    assert "aten::nonzero" in refused  # (the sweep reaches the refusals it allows)


def test_with_values_the_host_knows_phantom_execution_refuses_nothing_of_op_db():
    # (op_db's samples are made from host data: known, so even nonzero's rows are the truth)
    refused = _refusals((torch.float32,), known_bytes=str(1 << 20))
    assert not refused, f"refused over values the host knows: { {op: sorted(c)[:3] for op, c in refused.items()} }"


def test_a_data_dependent_operator_over_known_values_gives_the_executed_result():
    profile = dict(part_fit._raw("h100-sxm"), memory_capacity=float(_C._memory_limit()))
    host = torch.tensor([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0]])
    with simulate(profile, execute=False) as sim:
        x = host.to("simhpu")
        got = (x.nonzero().cpu(), torch.unique(x).cpu(), x[x > 1].cpu())
    torch.testing.assert_close(got, (host.nonzero(), torch.unique(host), host[host > 1]))
    assert sim.kernels() and not sim.host_reads


@pytest.mark.parametrize("make", [
    lambda x: torch.cummax(x, 0),
    lambda x: torch.logcumsumexp(x, 1),
    lambda x: torch.geqrf(x),
    lambda x: torch.histogram(x, bins=7),
])
def test_an_operator_without_a_meta_kernel_runs_for_its_shapes_and_is_priced(make):
    expected = make(torch.randn(64, 48))
    profile = dict(part_fit._raw("h100-sxm"), memory_capacity=float(_C._memory_limit()))
    with simulate(profile, execute=False) as sim:
        x = torch.empty(64, 48, device="simhpu")
        got = make(x)
        torch.simhpu.synchronize()
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    assert [g.shape for g in got] == [e.shape for e in expected]
    assert [g.dtype for g in got] == [e.dtype for e in expected]
    assert all(g.device.type == "simhpu" for g in got)
    assert sim.kernels(), "the call was not launched (not priced)"


def test_an_operator_too_large_to_stand_in_for_is_refused_by_name():
    # (its placeholder inputs would take over 256 MiB of the host: refused as before, naming it)
    profile = dict(part_fit._raw("h100-sxm"), memory_capacity=float(_C._memory_limit()))
    with simulate(profile, execute=False):
        x = torch.empty(1 << 16, 1 << 11, device="simhpu")  # 512 MiB "on the part"
        with pytest.raises(RuntimeError, match=r"aten::_cummax_helper needs its inputs' values on the host"):
            torch.cummax(x, 0)
        y = torch.empty(8, 8, device="simhpu")
        assert torch.cummax(y, 0).values.shape == (8, 8)  # (the device still works)
