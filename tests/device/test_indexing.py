"""index_select, gather and embedding run on the device; an index out of range
is found by the kernel and reported asynchronously, like a device-side assert."""
import pytest
import torch
import torch.nn.functional as F

import torch_simhpu  # noqa: F401
from helpers import has_device_kernel



def test_indexing_ops_are_native():
    assert has_device_kernel("aten::index_select") and has_device_kernel("aten::gather")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select_matches_cpu(dtype, dim):
    x = (torch.randn(4, 5, 3) * 10).to(dtype)
    index = torch.tensor([2, 0, 2, 1])
    torch.testing.assert_close(x.simhpu().index_select(dim, index.simhpu()).cpu(), x.index_select(dim, index))


@pytest.mark.parametrize("dim", [0, 1])
def test_gather_matches_cpu(dim):
    x = torch.randn(4, 5)
    index = torch.randint(0, x.shape[dim], (3, 4) if dim == 0 else (4, 2))
    torch.testing.assert_close(torch.gather(x.simhpu(), dim, index.simhpu()).cpu(), torch.gather(x, dim, index))


@pytest.mark.parametrize("self_shape,index_shape", [((3,), ()), ((), (1,)), ((), ()), ((1,), (1,))])
def test_gather_takes_a_0d_tensor_as_1d_of_one_element_as_aten_does(self_shape, index_shape):
    """op-plugin's test_gather backward found simhpu stricter than ATen here (ATen's shape check treats a
    0-d tensor as 1-d of one element)."""
    x = torch.randn(self_shape, requires_grad=True)
    index = torch.zeros(index_shape, dtype=torch.int64)
    expected = torch.gather(x, -1, index)
    leaf = x.detach().simhpu().requires_grad_()
    got = torch.gather(leaf, -1, index.simhpu())
    torch.testing.assert_close(got.cpu(), expected)
    got.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(leaf.grad.cpu(), x.grad)


def test_embedding_forward_and_backward():
    weight = torch.randn(10, 4, dtype=torch.float64, requires_grad=True)
    indices = torch.tensor([[1, 2], [9, 1]])
    dw = weight.detach().simhpu().requires_grad_()
    out = F.embedding(indices.simhpu(), dw)
    torch.testing.assert_close(out.cpu(), F.embedding(indices, weight))
    out.sum().backward()
    F.embedding(indices, weight).sum().backward()
    torch.testing.assert_close(dw.grad.cpu(), weight.grad)


@pytest.mark.parametrize("call,message", [
    (lambda x: x.index_select(0, torch.tensor([0, 7]).simhpu()), "index 7 is out of bounds for dimension 0 with size 5"),
    (lambda x: torch.gather(x, 1, torch.tensor([[0], [3], [1], [0], [0]]).simhpu()),
     "index 3 is out of bounds for dimension 1 with size 3"),
    (lambda x: F.embedding(torch.tensor([4, 5]).simhpu(), x), "index 5 is out of bounds for dimension 0 with size 5"),
])
def test_index_out_of_range_fails_asynchronously(call, message):
    x = torch.randn(5, 3).simhpu()
    result = call(x)  # returns: the kernel has not run yet, or its failure is not reported yet
    with pytest.raises(RuntimeError, match=rf"simhpu kernel '(index_select|gather)' launched by .* at "
                                           rf"{__file__}:\d+ failed: (index out of range in self: )?{message}"):
        torch.simhpu.synchronize()
    del result
    torch.testing.assert_close(x.index_select(0, torch.tensor([1]).simhpu()).cpu(), x.cpu()[1:2])


def test_bad_index_tensor_is_refused_at_the_call():
    """The adapter's check refuses it; the synchronised reference route then raises what the CPU raises, at once."""
    x = torch.randn(5, 3)
    with pytest.raises(RuntimeError) as cpu:
        x.index_select(0, torch.tensor([0.0]))
    with pytest.raises(RuntimeError) as device:
        x.simhpu().index_select(0, torch.tensor([0.0]).simhpu())
    assert type(device.value) is type(cpu.value) and str(cpu.value) in str(device.value)
