"""Turns op_plugin_functions.yaml and derivatives.yaml into the device's C++
adapters and registrations, Python bindings, fake kernels, stubs and docs.

load (YAML with line numbers) -> model (validated dataclasses, schemas parsed by
torchgen) -> emit (jinja2 templates, files rewritten only when they change).
"""
