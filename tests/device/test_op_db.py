"""PyTorch's own operator database (op_db, shipped in the torch wheel) on simhpu.

Every OpInfo, in float32, int64 and bfloat16, four ways: forward, the in-place
variant on a strided view, the out= variant, and gradients. Each must give the
CPU's result (random ops: the CPU's shapes and dtypes), and what the CPU rejects
the device must reject too. See tests/device/opdb/harness.py for how a case runs.
"""

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import opdb_harness as harness  # (loaded by conftest.py)

def _cases():
    for op in op_db:
        for mode in harness.MODES:
            key = (op.name, op.variant_test_name, mode)
            marks = [pytest.mark.xfail(reason=harness.KNOWN_DIFFERENCES[key], strict=True)] if key in harness.KNOWN_DIFFERENCES else []
            name = f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}-{mode}"
            yield pytest.param(op, mode, id=name, marks=marks)


@pytest.mark.parametrize("op, mode", list(_cases()))
def test_op_db(op, mode):
    failures = []
    not_run = {}  # why nothing ran -> the dtypes it applies to
    ran = 0
    for dtype in harness.DTYPES:
        outcomes = harness.run_case(op, dtype, mode) or [harness.Outcome("skip", "op_db makes no samples")]
        for outcome in outcomes:
            if outcome.status == "fail":
                failures.append(f"{dtype}: {outcome.detail}")
            elif outcome.status == "skip":
                not_run.setdefault(outcome.detail, []).append(str(dtype).removeprefix("torch."))
            else:
                ran += 1
    assert not failures, f"{op.name} ({mode}) differs from the CPU:\n" + "\n".join(failures)
    torch.simhpu.synchronize()
    if not ran:  # a case that ran nothing is not a pass
        pytest.skip("; ".join(f"{why} ({', '.join(dtypes)})" for why, dtypes in not_run.items()))
