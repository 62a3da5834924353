"""Sparse tensors on simhpu: COO and the compressed layouts (CSR, CSC, BSR, BSC).

PyTorch's op_db marks which OpInfos support each sparse layout and makes sparse
samples for them; each runs here on the CPU and on the device, from the same
tensors, and must give the CPU's layout and values. Then what users do with
sparse tensors: a sparse embedding trained by SparseAdam, torch.sparse.mm with
gradients, sampled_addmm, in-place updates and copies between devices.
"""
import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = "simhpu"


def assert_device_usable():
    torch.simhpu.synchronize()
    torch.testing.assert_close((torch.ones(2, device=DEVICE) + 1).cpu(), torch.full((2,), 2.0))

LAYOUTS = {
    torch.sparse_coo: ("supports_sparse", "sample_inputs_sparse_coo"),
    torch.sparse_csr: ("supports_sparse_csr", "sample_inputs_sparse_csr"),
    torch.sparse_csc: ("supports_sparse_csc", "sample_inputs_sparse_csc"),
    torch.sparse_bsr: ("supports_sparse_bsr", "sample_inputs_sparse_bsr"),
    torch.sparse_bsc: ("supports_sparse_bsc", "sample_inputs_sparse_bsc"),
}
DTYPES = (torch.float32, torch.float64, torch.complex64)

warnings.filterwarnings("ignore", message="Sparse (CSR|CSC|BSR|BSC) tensor support is in beta")


def _cases():
    for op in op_db:
        for layout, (flag, _) in LAYOUTS.items():
            if getattr(op, flag, False):
                name = f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}-{str(layout)[6:]}"
                yield pytest.param(op, layout, id=name)


def _to(device):
    return lambda v: v.to(device) if isinstance(v, torch.Tensor) else v


def _members(t):
    """What a tensor of any layout is made of: the device must give the CPU's
    representation itself (a sparse result the CPU makes invalid stays comparable)."""
    if t.layout == torch.strided:
        return (t,)
    if t.layout == torch.sparse_coo:
        return t._indices(), t._values()
    compressed, plain = ((t.crow_indices(), t.col_indices()) if t.layout in (torch.sparse_csr, torch.sparse_bsr)
                         else (t.ccol_indices(), t.row_indices()))
    return compressed, plain, t.values()


def _assert_rejected_alike(cpu_error, call):
    """The device raises what the CPU raised, at the call, or its kernel fails
    on the device (a dense operand's kernel runs asynchronously); either way
    the device stays usable."""
    try:
        call()
    except type(cpu_error):
        pass
    else:
        with pytest.raises(RuntimeError, match="failed"):
            torch.simhpu.synchronize()
    assert_device_usable()


def _is_random(op, sample):
    seen = []

    class Seeded(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(torch.Tag.nondeterministic_seeded in func.tags)
            return func(*args, **(kwargs or {}))

    with Seeded():
        op(sample.input, *sample.args, **sample.kwargs)
    return any(seen)


@pytest.mark.parametrize("op, layout", list(_cases()))
def test_op_db_sparse_samples_match_the_cpu(op, layout):
    compared = 0
    for dtype in DTYPES:
        if dtype not in op.supported_dtypes("cpu"):
            continue
        torch.manual_seed(0)
        try:
            samples = list(getattr(op, LAYOUTS[layout][1])("cpu", dtype))
        except NotImplementedError:  # the OpInfo has no sparse samples in this dtype
            continue
        for sample in samples:
            device_args = tree_map(_to(DEVICE), (sample.input, sample.args, sample.kwargs))
            try:
                expected = op(sample.input, *sample.args, **sample.kwargs)
            except Exception as cpu_error:  # noqa: BLE001 - the device must refuse it alike
                _assert_rejected_alike(cpu_error, lambda: op(device_args[0], *device_args[1], **device_args[2]))
                continue
            actual = op(device_args[0], *device_args[1], **device_args[2])
            random = _is_random(op, sample)
            exp_leaves, _ = tree_flatten(expected)
            act_leaves, _ = tree_flatten(actual)
            assert len(exp_leaves) == len(act_leaves)
            for e, a in zip(exp_leaves, act_leaves):
                if not isinstance(e, torch.Tensor):
                    assert e == a
                    continue
                # (like-ops' samples may ask for the CPU by device=)
                assert a.device == (e.device if "device" in sample.kwargs else torch.device(DEVICE, 0))
                assert a.layout == e.layout and a.dtype == e.dtype
                assert a.shape == e.shape
                if not random:
                    torch.testing.assert_close(_members(a.cpu()), _members(e), equal_nan=True)
            compared += 1
    if not compared:
        pytest.skip("op_db makes no sparse samples of this layout for this op")


def _sparse_input(layout, shape=(6, 8), blocksize=(2, 2)):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64)
    x[x.abs() < 0.8] = 0
    if layout == torch.sparse_coo:
        return x, x.to_sparse()
    return x, x.to_sparse(layout=layout, blocksize=blocksize if layout in (torch.sparse_bsr, torch.sparse_bsc) else None)


@pytest.mark.parametrize("layout", list(LAYOUTS), ids=lambda l: str(l)[6:])
def test_sparse_tensors_move_between_devices_with_their_structure(layout):
    dense, sparse = _sparse_input(layout)
    on_device = sparse.to(DEVICE)
    assert on_device.layout == layout and on_device.device.type == DEVICE
    assert on_device._nnz() == sparse._nnz()
    back = on_device.cpu()
    assert back.layout == layout
    torch.testing.assert_close(back.to_dense(), dense)
    # made on the device from a dense device tensor, and turned dense there
    made = dense.to(DEVICE).to_sparse(layout=layout, blocksize=(2, 2) if layout in (torch.sparse_bsr,
                                                                                   torch.sparse_bsc) else None)
    assert made.layout == layout and made.device.type == DEVICE
    torch.testing.assert_close(made.to_dense().cpu(), dense)


def test_coo_structure_is_read_on_the_host_and_values_stay_on_the_device():
    _, sparse = _sparse_input(torch.sparse_coo)
    s = sparse.to(DEVICE).coalesce()
    assert s.is_coalesced() and s.sparse_dim() == 2 and s.dense_dim() == 0
    assert s.indices().device.type == DEVICE and s.values().device.type == DEVICE
    torch.testing.assert_close(s.indices().cpu(), sparse.coalesce().indices())
    assert torch.zeros(3, 4, layout=torch.sparse_coo, device=DEVICE)._nnz() == 0


def test_in_place_updates_write_into_the_callers_sparse_tensor():
    dense, sparse = _sparse_input(torch.sparse_coo)
    s = sparse.to(DEVICE)
    s.mul_(3)
    torch.testing.assert_close(s.to_dense().cpu(), dense * 3)
    s.add_(sparse.to(DEVICE))
    torch.testing.assert_close(s.to_dense().cpu(), dense * 4)
    other = torch.eye(6, 8, dtype=torch.float64).to_sparse()
    s.copy_(other.to(DEVICE))
    torch.testing.assert_close(s.to_dense().cpu(), other.to_dense())
    s.zero_()
    assert s._nnz() == 0 and s.device.type == DEVICE
    torch.testing.assert_close(s.to_dense().cpu(), torch.zeros(6, 8, dtype=torch.float64))


def test_sparse_mm_forward_and_gradients_match_the_cpu():
    _, sparse = _sparse_input(torch.sparse_coo)
    torch.manual_seed(1)
    weight = torch.randn(8, 5, dtype=torch.float64, requires_grad=True)
    weight_device = weight.detach().to(DEVICE).requires_grad_()
    sparse_cpu = sparse.requires_grad_()
    sparse_device = sparse.detach().to(DEVICE).requires_grad_()
    expected = torch.sparse.mm(sparse_cpu, weight)
    actual = torch.sparse.mm(sparse_device, weight_device)
    torch.testing.assert_close(actual.cpu(), expected)
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(weight_device.grad.cpu(), weight.grad)
    assert sparse_device.grad.layout == torch.sparse_coo and sparse_device.grad.device.type == DEVICE
    torch.testing.assert_close(sparse_device.grad.to_dense().cpu(), sparse_cpu.grad.to_dense())
    s = sparse.detach().to(DEVICE)
    assert torch.autograd.gradcheck(lambda w: torch.sparse.mm(s, w),
                                    (torch.randn(8, 3, dtype=torch.float64, device=DEVICE, requires_grad=True),))


def test_sampled_addmm_on_csr_matches_the_cpu():
    _, mask = _sparse_input(torch.sparse_csr)
    torch.manual_seed(2)
    a, b = torch.randn(6, 4, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64)
    expected = torch.sparse.sampled_addmm(mask, a, b, beta=0.5, alpha=2.0)
    actual = torch.sparse.sampled_addmm(mask.to(DEVICE), a.to(DEVICE), b.to(DEVICE), beta=0.5, alpha=2.0)
    assert actual.layout == torch.sparse_csr and actual.device.type == DEVICE
    torch.testing.assert_close(actual.to_dense().cpu(), expected.to_dense())


def test_sparse_embedding_trained_by_sparse_adam_matches_the_cpu():
    torch.manual_seed(3)
    cpu = torch.nn.Embedding(20, 4, sparse=True)
    device = torch.nn.Embedding(20, 4, sparse=True).to(DEVICE)
    device.load_state_dict(cpu.state_dict())
    optimizers = [torch.optim.SparseAdam(cpu.parameters(), lr=0.1),
                  torch.optim.SparseAdam(device.parameters(), lr=0.1)]
    for step in range(4):
        indices = torch.randint(0, 20, (3, 5))
        for model, optimizer in zip((cpu, device), optimizers):
            optimizer.zero_grad()
            (model(indices.to(model.weight.device)) ** 2).sum().backward()
            assert model.weight.grad.layout == torch.sparse_coo
            optimizer.step()
    torch.testing.assert_close(device.weight.detach().cpu(), cpu.weight.detach())
    for key, value in optimizers[0].state_dict()["state"][0].items():
        on_device = optimizers[1].state_dict()["state"][0][key]
        torch.testing.assert_close(torch.as_tensor(on_device).cpu(), torch.as_tensor(value))


def test_a_bad_sparse_call_names_the_operator_and_leaves_the_device_usable():
    _, sparse = _sparse_input(torch.sparse_coo)
    s = sparse.to(DEVICE)
    with pytest.raises(RuntimeError, match=r"mm|mat1 and mat2|size"):
        torch.sparse.mm(s, torch.randn(7, 2, dtype=torch.float64, device=DEVICE))
    with pytest.raises(RuntimeError, match=r"aten::.*on the reference path \(sparse operands\)"):
        torch.sparse.mm(s, torch.randn(7, 2, dtype=torch.float64, device=DEVICE))
    assert_device_usable()


def test_sparse_tensors_stay_on_their_device_index():
    if torch.simhpu.device_count() < 2:
        pytest.skip("one device")
    _, sparse = _sparse_input(torch.sparse_coo)
    s = sparse.to("simhpu:1")
    result = (s * 2).coalesce()
    assert result.device == torch.device("simhpu:1") and result.values().device == torch.device("simhpu:1")
