"""Codegen time for a synthetic 500-operator project (validation + rendering).

    python benchmarks/codegen_scale.py
"""
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_OPS = 500


def synthetic_project(n_ops: int) -> str:
    """A project folder with n_ops operators of every implementation kind, most differentiable."""
    root = tempfile.mkdtemp(prefix="simhpu-codegen-")
    for part in ("kernels", "autograd"):
        shutil.copytree(os.path.join(ROOT, "csrc", part), os.path.join(root, "csrc", part))
    ops, derivatives = ["backend: simhpu", "namespace: npu", "custom:"], []
    for i in range(n_ops):
        kind = i % 4
        if kind == 0:
            ops += [f"  - func: npu_ew{i}(Tensor self, Tensor other, float beta=1.0) -> Tensor",
                    f"    elementwise: self * sigmoid(beta * other) + {i}",
                    "    dtypes: [float32, float16, bfloat16]",
                    "    variants: [out, inplace]"]
            derivatives += [f"- name: npu_ew{i}(Tensor self, Tensor other, float beta=1.0) -> Tensor",
                            "  self: grad * sigmoid(beta * other)",
                            "  other: grad * self * beta * sigmoid(beta * other) * (1 - sigmoid(beta * other))"]
        elif kind == 1:
            ops += [f"  - func: npu_norm{i}(Tensor x, Tensor gamma, float eps=1e-06) -> (Tensor y, Tensor rstd)",
                    "    exec: rms_norm, x, gamma, eps, y, rstd",
                    "    out:",
                    "      y: {size: x, dtype: x}",
                    '      rstd: {size: "reduce(x, [-1], True)", dtype: x}',
                    '    checks: ["trailing_shape(x, gamma)"]',
                    "    contiguous: true",
                    "    dtypes: [float32, float64]"]
            derivatives += [f"- name: npu_norm{i}(Tensor x, Tensor gamma, float eps=1e-06) -> (Tensor y, Tensor rstd)",
                            "  output_differentiability: [True, False]",
                            "  x, gamma: npu_rms_norm_backward(grad, x, gamma, rstd)"]
        elif kind == 2:
            ops += [f"  - func: npu_sum{i}(Tensor self, int[1] dim, bool keepdim=False) -> Tensor",
                    "    exec: sum_dims, self, dim, keepdim, out",
                    '    out: {size: "reduce(self, dim, keepdim)", dtype: self}',
                    "    dtypes: [float32, float64]"]
            derivatives += [f"- name: npu_sum{i}(Tensor self, int[1] dim, bool keepdim=False) -> Tensor",
                            "  self: sum_dims_backward(grad, self.sym_sizes(), dim, keepdim)"]
        else:
            ops += [f"  - func: npu_comp{i}(Tensor x, Tensor y) -> Tensor",
                    "    composite: npu_rms_norm_backward(x, y, y, x)"]
    ops += ["  - func: npu_rms_norm_backward(Tensor grad_y, Tensor x, Tensor gamma, Tensor rstd) -> "
            "(Tensor grad_x, Tensor grad_gamma)",
            "    exec: rms_norm_backward, grad_y, x, gamma, rstd, grad_x, grad_gamma",
            "    out:", "      grad_x: {size: x, dtype: x}", "      grad_gamma: {size: gamma, dtype: gamma}",
            "    dtypes: [float32]"]
    with open(os.path.join(root, "op_plugin_functions.yaml"), "w") as f:
        f.write("\n".join(ops) + "\n")
    with open(os.path.join(root, "derivatives.yaml"), "w") as f:
        f.write("\n".join(derivatives) + "\n")
    return root


def measure(n_ops: int = N_OPS) -> float:
    """Seconds to validate and render n_ops operators (best of three)."""
    sys.path.insert(0, ROOT)
    from codegen.emit import render
    from codegen.project import load_project

    root = synthetic_project(n_ops)
    try:
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            files = render(load_project(root))
            best = min(best, time.perf_counter() - start)
        assert len([f for f in files if f.startswith("csrc/adapters/")]) == n_ops + 1
        return best
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    print(f"codegen for {N_OPS} operators: {measure():.2f} s (target <= 2 s)")
