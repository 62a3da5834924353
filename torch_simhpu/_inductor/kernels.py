"""Compiling Inductor's C++ kernels for simhpu.

Inductor's CPU code generator writes each fused kernel as `extern "C" void
kernel(<pointers and sizes>)`. For simhpu the source gets one more function, an
entry taking an array of argument addresses, which the device's launch record
can call without knowing the signature; the result is a torch_simhpu._C
_CompiledKernel, which launches on the stream when called.
"""
from __future__ import annotations

import ctypes
import re

from torch._inductor.codecache import CppCodeCache, CppPythonBindingsCodeCache, LambdaFuture
from torch._inductor.async_compile import get_compile_threads

from torch_simhpu import _C

ENTRY = "simhpu_entry"

# Inductor's argument types: pointers (read: `const T*`, written: `T*`) and the
# scalars it passes by value (sizes as int64_t, floats as float).
_POINTER = re.compile(r"^(const )?[A-Za-z_][\w:]*\*$")
_SCALARS = {"const int64_t": "i", "const float": "f"}


def argument_kinds(kernel_name: str, arg_types: list[str]) -> str:
    """'r'/'w' for each read/written pointer, 'i'/'f' for each scalar."""
    kinds = []
    for arg_type in arg_types:
        if _POINTER.match(arg_type):
            kinds.append("r" if arg_type.startswith("const ") else "w")
        elif arg_type in _SCALARS:
            kinds.append(_SCALARS[arg_type])
        else:
            raise NotImplementedError(
                f"simhpu: Inductor kernel {kernel_name} takes an argument of C++ type {arg_type!r}, "
                f"which the simhpu launcher does not support (pointers, const int64_t and const float are)")
    return "".join(kinds)


def entry_source(arg_types: list[str]) -> str:
    """The entry that unpacks an array of addresses into the kernel's arguments."""
    unpacked = []
    for i, arg_type in enumerate(arg_types):
        if _POINTER.match(arg_type):
            unpacked.append(f"static_cast<{arg_type}>(addresses[{i}])")
        else:
            unpacked.append(f"*static_cast<{arg_type}*>(addresses[{i}])")
    arguments = ",\n        ".join(unpacked)
    return (f'\nextern "C" void {ENTRY}(void* const* addresses) {{\n'
            f"    kernel({arguments});\n}}\n")


class KernelCodeCache(CppCodeCache):
    """Inductor's C++ code cache, compiling as it does for its CPU kernels: no
    libtorch, and the kernels' common prefix (cpp_prefix.h) precompiled once and
    reused by every kernel (without it a kernel took about twice as long)."""

    cache: dict = {}
    cpp_compile_command_flags = {"include_pytorch": False, "shared": True}

    @classmethod
    def _get_uncompiled_header(cls, device: str) -> str | None:
        return CppPythonBindingsCodeCache._get_uncompiled_header(device)


def _launcher(kernel_name: str, kinds: str, library) -> _C._CompiledKernel:
    entry = ctypes.cast(getattr(library, ENTRY), ctypes.c_void_p).value
    return _C._CompiledKernel(kernel_name, entry, kinds)


def compile_kernel(async_compile, kernel_name: str, arg_types: list[str], source: str):
    """What the generated wrapper assigns to `kernel_name`: a launcher, or a future of one."""
    kinds = argument_kinds(kernel_name, arg_types)
    source = source + entry_source(arg_types)
    if get_compile_threads() <= 1:
        return _launcher(kernel_name, kinds, KernelCodeCache.load(source))
    get_library = KernelCodeCache.load_async(source, submit_fn=async_compile.submit)
    return LambdaFuture(lambda: _launcher(kernel_name, kinds, get_library()))
