"""python -m codegen new-op NAME: the three pieces of a new operator, ready to fill in."""
from __future__ import annotations

import os
import re

from .project import DERIVATIVES_YAML, KERNEL_DIR, OPS_YAML

KERNEL_TEMPLATE = """// The device kernel of npu_{name}. Replace the expression below with the real
// computation; see csrc/kernels/kernel_api.h for what a kernel receives.
#include "kernels/elementwise.h"
#include "kernels/kernel_api.h"

namespace simhpu::kernels {{

void {name}(const DeviceTensor& self, const DeviceTensor& out) {{
  SIMHPU_DISPATCH_FLOATING(out.dtype, "{name}", [&] {{
    elementwise<scalar_t>(out, [](scalar_t v) {{ return v; }}, self);
  }});
}}
SIMHPU_KERNEL({name});

}} // namespace simhpu::kernels
"""

ENTRY_TEMPLATE = """
  - func: npu_{name}(Tensor self) -> Tensor
    exec: {name}, self, out
    out: {{size: self, dtype: self}}
    dtypes: [float32, float64, float16, bfloat16]
    doc: TODO describe npu_{name}.
"""

DERIVATIVE_TEMPLATE = """
- name: npu_{name}(Tensor self) -> Tensor
  self: not_implemented("npu_{name}")  # TODO the derivative, e.g. grad * ...
"""


def new_op(root: str, name: str) -> list[str]:
    """Write the kernel file and append the YAML entries; returns what was written."""
    name = name.removeprefix("npu_")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"'{name}' is not a valid operator name: use lower_case letters, digits and _")
    kernel_path = os.path.join(root, KERNEL_DIR, f"{name}.cpp")
    ops_path = os.path.join(root, OPS_YAML)
    with open(ops_path) as f:
        if re.search(rf"func:\s*npu_{name}\(", f.read()):
            raise ValueError(f"npu_{name} is already declared in {OPS_YAML}")
    if os.path.exists(kernel_path):
        raise ValueError(f"{os.path.relpath(kernel_path, root)} already exists")
    with open(kernel_path, "w") as f:
        f.write(KERNEL_TEMPLATE.format(name=name))
    with open(ops_path, "a") as f:
        f.write(ENTRY_TEMPLATE.format(name=name))
    with open(os.path.join(root, DERIVATIVES_YAML), "a") as f:
        f.write(DERIVATIVE_TEMPLATE.format(name=name))
    return [os.path.relpath(kernel_path, root), OPS_YAML, DERIVATIVES_YAML]
