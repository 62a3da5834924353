"""python -m codegen new-op NAME: the three pieces of a new operator, ready to fill in."""
from __future__ import annotations

import os
import re
import shutil
import tempfile

from .model.cpp_expr import FORMULA_HELPERS_HEADER
from .errors import CodegenError
from .names import check_identifier
from .project import DERIVATIVES_YAML, KERNEL_DIR, OP_PLUGIN_DIR, OPS_YAML, load_project

KERNEL_TEMPLATE = """// The device kernel of npu_{name}. Replace the expression below with the real
// computation; see csrc/kernels/kernel_api.h for what a kernel receives.
#include "generated/kernel_signatures/{name}.h"  // checks the kernel against its YAML entries
#include "kernels/elementwise.h"
#include "kernels/kernel_api.h"

namespace simhpu::kernels {{

void {name}(const DeviceTensor& self, const Out<DeviceTensor>& out) {{
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
    reference: self  # TODO what the kernel computes, in torch; `python -m codegen test` compares with it
    doc: TODO describe npu_{name}.
"""

DERIVATIVE_TEMPLATE = """
- name: npu_{name}(Tensor self) -> Tensor
  self: not_implemented("npu_{name}")  # TODO the derivative, e.g. grad * ...
"""


def new_op(root: str, name: str) -> list[str]:
    """Write the kernel file and append the YAML entries; returns what was written.

    Nothing is written unless the project, with the three pieces added, still
    validates (checked on a copy first)."""
    name = name.removeprefix("npu_")
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,40}", name):
        raise ValueError(f"'{name}' is not a valid operator name: use lower_case letters, digits and _ "
                         "(at most 40), starting with a letter")
    for candidate, what in ((name, "kernel name"), (f"npu_{name}", "operator name")):
        problem = check_identifier(candidate, what, allow_generated=True)
        if problem:
            raise ValueError(f"{problem[0]}; {problem[1]}")
    with open(os.path.join(root, OPS_YAML), encoding="utf-8", errors="replace") as f:
        if re.search(rf"func:\s*npu_{name}\(", f.read()):
            raise ValueError(f"npu_{name} is already declared in {OPS_YAML}")
    kernel_rel = os.path.join(KERNEL_DIR, f"{name}.cpp")
    if os.path.exists(os.path.join(root, kernel_rel)):
        raise ValueError(f"{kernel_rel} already exists")
    additions = {kernel_rel: KERNEL_TEMPLATE.format(name=name), OPS_YAML: ENTRY_TEMPLATE.format(name=name),
                 DERIVATIVES_YAML: DERIVATIVE_TEMPLATE.format(name=name)}
    with tempfile.TemporaryDirectory() as staging:
        for rel in (OPS_YAML, DERIVATIVES_YAML):
            shutil.copy(os.path.join(root, rel), os.path.join(staging, rel))
        for folder in (KERNEL_DIR, OP_PLUGIN_DIR, os.path.dirname(FORMULA_HELPERS_HEADER)):
            if os.path.isdir(os.path.join(root, folder)):
                shutil.copytree(os.path.join(root, folder), os.path.join(staging, folder))
        _apply(staging, additions)
        try:
            load_project(staging)
        except CodegenError as e:
            raise ValueError(f"npu_{name} cannot be added as scaffolded:\n{e}") from None
    _apply(root, additions)
    return list(additions)


def _apply(root: str, additions: dict[str, str]) -> None:
    """Create the kernel file; append the YAML entries."""
    for rel, text in additions.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "a" if rel.endswith(".yaml") else "x") as f:
            f.write(text)
