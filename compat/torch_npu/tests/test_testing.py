"""torch_npu.testing as op-plugin's tests use it: each helper able to fail for the reason its name gives."""
import unittest

import numpy as np
import pytest
import torch
import torch_npu

from torch_npu.testing.common_distributed import skipIfUnsupportMultiNPU
from torch_npu.testing.common_utils import (SkipIfNotGteCANNVersion, SupportedDevices, check_operators_in_prof,
                                            create_common_tensor)
from torch_npu.testing.decorator import Dtypes, instantiate_tests
from torch_npu.testing.testcase import TestCase


def outcome(test_case_class, name):
    result = unittest.TestResult()
    test_case_class(name).run(result)
    return ("failed" if result.failures or result.errors else "skipped" if result.skipped else "passed",
            (result.failures or result.errors or result.skipped or [(None, "")])[0][1])


class Rtol(TestCase):
    __test__ = False  # run by the tests below, which say what each must give

    def test_within(self):
        x = np.linspace(1, 2, 1000, dtype=np.float32)
        self.assertRtolEqual(x, x * (1 + 5e-5))

    def test_beyond(self):
        x = np.linspace(1, 2, 1000, dtype=np.float32)
        self.assertRtolEqual(x, x * (1 + 5e-3))

    def test_a_few_outliers_pass(self):  # fewer than prec * size elements may miss
        x = np.ones(100000, dtype=np.float32)
        y = x.copy()
        y[:5] = 2
        self.assertRtolEqual(x, y)

    def test_half_uses_prec16(self):
        x = np.ones(100, dtype=np.float16)
        self.assertRtolEqual(x, x + np.float16(5e-4))

    def test_dtypes_must_agree(self):
        self.assertRtolEqual(np.ones(3, dtype=np.float16), np.ones(3, dtype=np.float32))

    def test_nan_places_must_agree(self):
        self.assertRtolEqual(np.array([1.0, np.nan], dtype=np.float32), np.array([np.nan, 1.0], dtype=np.float32))

    def test_tensors_on_the_device(self):
        x = torch.randn(5, 5)
        self.assertRtolEqual(x, x.npu())


@pytest.mark.parametrize("name,expected", [
    ("test_within", "passed"), ("test_beyond", "failed"), ("test_a_few_outliers_pass", "passed"),
    ("test_half_uses_prec16", "passed"), ("test_dtypes_must_agree", "failed"),
    ("test_nan_places_must_agree", "failed"), ("test_tensors_on_the_device", "passed")])
def test_assert_rtol_equal(name, expected):
    assert outcome(Rtol, name)[0] == expected


class Equal(TestCase):
    __test__ = False  # run by the tests below, which say what each must give

    def test_precision(self):
        self.assertEqual(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-6]))

    def test_off(self):
        self.assertEqual(torch.tensor([1.0, 2.0]), np.array([1.0, 2.1]), prec=1e-3)

    def test_containers(self):
        self.assertEqual({"a": [1, 2.0]}, {"a": [1, 2.0 + 1e-7]})

    def test_nan_mismatch(self):
        self.assertEqual(torch.tensor([float("nan")]), torch.tensor([1.0]))

    def test_tensors_differ(self):  # as op-plugin's dropout tests ask of two draws
        self.assertNotEqual(torch.tensor([1.0, 2.0]).npu(), torch.tensor([1.0, 0.0]).npu())

    def test_tensors_equal_are_not_unequal(self):
        self.assertNotEqual(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-6]))


@pytest.mark.parametrize("name,expected", [("test_precision", "passed"), ("test_off", "failed"),
                                           ("test_containers", "passed"), ("test_nan_mismatch", "failed"),
                                           ("test_tensors_differ", "passed"),
                                           ("test_tensors_equal_are_not_unequal", "failed")])
def test_assert_equal(name, expected):
    assert outcome(Equal, name)[0] == expected


def test_create_common_tensor_gives_equal_values_in_the_format():
    cpu, npu = create_common_tensor([np.float16, 29, (4, 6)], -2, 2)
    assert cpu.dtype == torch.float16 and npu.device.type == "npu"
    assert torch_npu.get_npu_format(npu) == 29 and torch.equal(cpu, npu.cpu())
    # (drawn in [-2, 2), then cast to float16, which may round a draw near 2 up to 2 itself)
    assert float(cpu.min()) >= -2 and float(cpu.max()) <= 2
    assert torch_npu.get_npu_format(create_common_tensor([np.float32, -1, (1, 2, 3, 4)], 0, 1)[1]) == 0


class Skips(TestCase):
    __test__ = False  # run by the tests below, which say what each must give

    @SupportedDevices(["Ascend910B"])
    def test_910b(self):
        pass

    @SupportedDevices(["Ascend950"])
    def test_950(self):
        pass

    @SkipIfNotGteCANNVersion("99.0.0")
    def test_future_cann(self):
        pass

    @skipIfUnsupportMultiNPU(1000)
    def test_many_devices(self):
        pass


@pytest.mark.parametrize("name,expected,why", [
    ("test_910b", "passed", ""), ("test_950", "skipped", "for Ascend950; this part is Ascend910B3"),
    ("test_future_cann", "skipped", "needs CANN >= 99.0.0"), ("test_many_devices", "skipped", "needs 1000 devices")])
def test_skips(name, expected, why):
    state, message = outcome(Skips, name)
    assert state == expected and why in message


@instantiate_tests
class PerDtype(TestCase):
    __test__ = False  # run by the tests below, which say what each must give

    @Dtypes(torch.float, torch.half)
    def test_ones(self, device, dtype):
        self.assertEqual(torch.ones(2, device=device, dtype=dtype).dtype, dtype)
        self.assertEqual(torch.ones(2, device=device, dtype=dtype).device.type, "npu")

    def test_device_only(self, device):
        self.assertEqual(torch.zeros(1, device=device).device.type, "npu")


def test_instantiate_tests_makes_one_test_per_dtype():
    names = sorted(n for n in vars(PerDtype) if n.startswith("test_"))
    assert names == ["test_device_only", "test_ones_float16", "test_ones_float32"]
    assert all(outcome(PerDtype, n)[0] == "passed" for n in names)


def test_check_operators_in_prof_reads_the_device_profiles_operators():
    x = torch.rand(2, 3).npu()
    with torch.autograd.profiler.profile(use_device="npu") as prof:
        x[:, 1:2].copy_(torch.ones(2, 1).npu())
    assert check_operators_in_prof(["aten::copy_"], prof)
    assert not check_operators_in_prof(["ViewCopy"], prof)  # (CANN's kernel: not simhpu's name for it)
    assert not check_operators_in_prof(["aten::copy_"], prof, unexpected=["aten::copy_"])
