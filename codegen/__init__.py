"""Turns op_plugin_functions.yaml and derivatives.yaml into the device's C++
adapters and registrations, Python bindings, fake kernels, stubs and docs.

load (YAML with line numbers) -> model (validated dataclasses, schemas parsed by
torchgen) -> emit (jinja2 templates, files rewritten only when they change).
"""
import os
import sys

if "torch" not in sys.modules:
    # Code generation needs torch's headers and torchgen, never the device: in
    # the source tree, `import torch` would otherwise load the unbuilt
    # torch_simhpu folder through its torch.backends entry point. The variable
    # is set only around that import, so processes started later see the
    # caller's environment.
    _set_here = "TORCH_DEVICE_BACKEND_AUTOLOAD" not in os.environ
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import torch  # noqa: F401,E402
    if _set_here:
        del os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"]
