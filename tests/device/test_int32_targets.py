"""Class targets as Ascend's loss kernels take them (csrc/aten/int32_targets.h): the setting torch_npu's
face turns on, under which nll_loss, nll_loss2d and multilabel_margin_loss (forward and backward) take an
int32 target, widened to int64 before their meta and CPU kernels see it. Off, the device refuses int32 as
the CPU does."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from torch_simhpu import _C


@pytest.fixture
def int32_targets():
    assert not _C._int32_targets(), "the setting is off unless a front end turns it on"
    _C._set_int32_targets(True)
    try:
        yield
    finally:
        torch.simhpu.synchronize()
        _C._set_int32_targets(False)


def _losses():
    torch.manual_seed(0)
    logits = torch.randn(6, 5)
    image = torch.randn(2, 5, 3, 4)
    targets = torch.tensor([0, 4, 1, -100, 2, 3])
    pixels = torch.randint(0, 5, (2, 3, 4))
    multilabel = torch.tensor([[3, 0, -1, 1, 1], [1, 2, 4, -1, 0]])
    return [
        (lambda x, t: F.nll_loss(F.log_softmax(x, -1), t, ignore_index=-100), logits, targets),
        (lambda x, t: F.nll_loss(F.log_softmax(x, -1), t, reduction="none"), logits, targets.clamp(min=0)),
        (lambda x, t: F.nll_loss(F.log_softmax(x, 1), t, weight=torch.arange(1.0, 6.0, device=x.device)), image, pixels),
        (lambda x, t: F.cross_entropy(x, t), logits, targets.clamp(min=0)),
        (lambda x, t: F.multilabel_margin_loss(x, t), logits[:2], multilabel),
    ]


@pytest.mark.parametrize("index", range(5))
def test_an_int32_target_gives_the_int64_targets_loss_and_gradient(int32_targets, index):
    loss, x, target = _losses()[index]
    expected_x = x.clone().requires_grad_()
    expected = loss(expected_x, target)
    expected.sum().backward()
    device_x = x.to("simhpu").requires_grad_()
    got = loss(device_x, target.to(torch.int32).to("simhpu"))
    got.sum().backward()
    assert_close(got.cpu(), expected)
    assert_close(device_x.grad.cpu(), expected_x.grad)


def test_without_the_setting_int32_is_refused_as_on_the_cpu_and_the_device_stays_usable():
    x = torch.randn(4, 3).log_softmax(-1)
    target = torch.tensor([0, 2, 1, 1], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="expected target dtype to be Long or Byte, but got Int") as on_cpu:
        F.nll_loss(x, target)
    with pytest.raises(RuntimeError, match=str(on_cpu.value)):
        F.nll_loss(x.to("simhpu"), target.to("simhpu"))
    assert torch.ones(3, device="simhpu").sum().item() == 3


def test_the_setting_widens_class_targets_only(int32_targets):
    # an int32 index elsewhere is the CPU's business still: take wants int64 on the CPU and here
    x = torch.randn(3, 4, device="simhpu")
    with pytest.raises(RuntimeError, match="take\\(\\): Expected a long tensor for index, but got Int"):
        torch.take(x, torch.zeros(3, dtype=torch.int32, device="simhpu"))
    assert torch.ones(3, device="simhpu").sum().item() == 3
