"""Turns op_plugin_functions.yaml and derivatives.yaml into the device's C++
adapters and registrations, Python bindings, fake kernels, stubs and docs.

load (YAML with line numbers) -> model (validated dataclasses, schemas parsed by
torchgen) -> emit (jinja2 templates, files rewritten only when they change).
"""
import os

# Code generation needs torch's headers and torchgen, never the device: in the
# source tree, `import torch` would otherwise load the unbuilt torch_simhpu
# folder through its torch.backends entry point.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
