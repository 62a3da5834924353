"""TestCase and run_tests as torch_npu's tests use them: assertRtolEqual with its tolerances, and
an assertEqual that compares tensors, arrays, numbers and containers within a precision."""
from __future__ import annotations

import sys
import unittest
from collections.abc import Mapping, Sequence
from numbers import Number

import numpy as np
import torch

# assertRtolEqual's dtypes: what its comparison is defined for.
_RTOL_DTYPES = (np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16, np.float32,
                np.float64)


def run_tests() -> None:
    """Runs the calling file's tests (unittest's command line: -k, -v, a test's name)."""
    unittest.main(argv=sys.argv)


def _as_array(value):
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return (value.float() if value.dtype == torch.bfloat16 else value).numpy()
    return np.asarray(value)


class TestCase(unittest.TestCase):
    """unittest's TestCase with torch_npu's comparisons."""
    _precision = 1e-5
    maxDiff = None

    @property
    def precision(self) -> float:
        return self._precision

    @precision.setter
    def precision(self, value: float) -> None:
        self._precision = value

    def assertRtolEqual(self, x, y, prec=1.e-4, prec16=1.e-3, auto_trans_dtype=False, message=None):
        """Equal within `prec` (`prec16` for float16), relatively or absolutely.

        An element passes when its difference is within the tolerance absolutely, or relative to
        the larger magnitude of the two. The comparison fails only when more than a `prec`
        fraction of the elements pass neither way, NaNs must sit at the same places, shapes and
        dtypes must agree (float16 compared to float32 is a failure, as on the part)."""
        if isinstance(x, Sequence) and isinstance(y, Sequence) and not isinstance(x, str):
            self.assertEqual(len(x), len(y), message)
            for x_item, y_item in zip(x, y):
                self.assertRtolEqual(x_item, y_item, prec, prec16, auto_trans_dtype, message)
            return
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and auto_trans_dtype:
            x = x.to(y.dtype)
        x, y = _as_array(x), _as_array(y)
        if x.shape != y.shape:
            self.fail(message or f"shape error: {x.shape} against {y.shape}")
        if x.dtype != y.dtype:
            self.fail(message or f"dtype error: {x.dtype} against {y.dtype}")
        if x.dtype.type not in _RTOL_DTYPES:
            self.fail(message or f"assertRtolEqual compares {', '.join(t.__name__ for t in _RTOL_DTYPES)}; got {x.dtype}")
        if x.dtype == np.bool_:
            if not np.array_equal(x, y):
                self.fail(message or "result error: booleans differ")
            return
        tolerance, floor = (prec16, 6e-8) if x.dtype == np.float16 else (prec, 1e-9)
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        nan = np.isnan(x64)
        if not np.array_equal(nan, np.isnan(y64)):
            self.fail(message or "result error: NaNs at different places")
        difference = np.where(nan, 0.0, np.abs(y64 - x64))
        difference = np.where(np.isinf(x64) & (x64 == y64), 0.0, difference)
        absolute_miss = ~(difference <= tolerance)
        relative_miss = ~(difference / (np.maximum(np.abs(x64), np.abs(y64)) + floor) <= tolerance)
        allowed = x.size * tolerance
        if absolute_miss.sum() > allowed and relative_miss.sum() > allowed:
            worst = float(np.nanmax(difference)) if difference.size else 0.0
            self.fail(message or f"result error: {int(relative_miss.sum())} of {x.size} elements differ by more "
                                 f"than {tolerance} (largest difference {worst:.6g})")

    def assertEqual(self, x, y, prec=None, message="", allow_inf=False, exact_dtype=False):
        """Equal within `prec` (the test's precision unless given): tensors, arrays, numbers, containers."""
        if isinstance(prec, str) and not message:
            prec, message = None, prec
        prec = self.precision if prec is None else prec
        if isinstance(x, (torch.Tensor, np.ndarray)) or isinstance(y, (torch.Tensor, np.ndarray)):
            self._assert_arrays_equal(x, y, prec, message, allow_inf, exact_dtype)
        elif isinstance(x, Number) and isinstance(y, Number) and not isinstance(x, bool):
            if allow_inf and x == y:
                return
            if np.isnan(x) and np.isnan(y):
                return
            self.assertLessEqual(abs(x - y), prec, message or f"{x} != {y} within {prec}")
        elif isinstance(x, Mapping) and isinstance(y, Mapping):
            self.assertEqual(sorted(x.keys(), key=str), sorted(y.keys(), key=str), message=message)
            for key in x:
                self.assertEqual(x[key], y[key], prec, message, allow_inf, exact_dtype)
        elif (isinstance(x, (list, tuple, torch.Size)) and isinstance(y, (list, tuple, torch.Size))):
            super().assertEqual(len(x), len(y), message or f"lengths differ: {len(x)} against {len(y)}")
            for x_item, y_item in zip(x, y):
                self.assertEqual(x_item, y_item, prec, message, allow_inf, exact_dtype)
        else:
            super().assertEqual(x, y, message or None)

    def assertNotEqual(self, x, y, prec=None, message="", allow_inf=False, exact_dtype=False):
        """Not equal within `prec`, by assertEqual's rules (tensors and arrays compared as values)."""
        try:
            self.assertEqual(x, y, prec, message, allow_inf, exact_dtype)
        except AssertionError:
            return
        self.fail(message or f"{x!r} and {y!r} are equal within {self.precision if prec is None else prec}")

    def _assert_arrays_equal(self, x, y, prec, message, allow_inf, exact_dtype):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and exact_dtype:
            super().assertEqual(x.dtype, y.dtype, message or "dtypes differ")
        x, y = _as_array(x), _as_array(y)
        if x.shape != y.shape and x.size != 1 and y.size != 1:
            self.fail(message or f"shapes differ: {x.shape} against {y.shape}")
        if x.dtype == np.bool_ or y.dtype == np.bool_:
            if not np.array_equal(np.broadcast_to(x, np.broadcast_shapes(x.shape, y.shape)), y.astype(x.dtype)):
                self.fail(message or "booleans differ")
            return
        x64, y64 = np.broadcast_arrays(x.astype(np.float64), y.astype(np.float64))
        if not np.array_equal(np.isnan(x64), np.isnan(y64)):
            self.fail(message or "NaNs at different places")
        difference = np.where((x64 == y64) | np.isnan(x64), 0.0, np.abs(x64 - y64))
        if difference.size and not difference.max() <= prec:
            self.fail(message or f"tensors differ by {difference.max():.6g}, more than {prec}")
