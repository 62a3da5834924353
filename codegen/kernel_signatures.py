"""The parameter lists of the kernels under csrc/kernels, read from their C++
definitions, so `exec:` arguments of the wrong number or kind are reported
with the YAML's file:line instead of failing when the kernel is first launched.

A kernel is `void NAME(PARAMETERS) {` followed, somewhere later in its file,
by SIMHPU_KERNEL(NAME). A parameter type this module does not know is not
checked (the launch still checks it at run time).
"""
from __future__ import annotations

import os
import re
from functools import lru_cache

# A kernel parameter's type (without const, & and spaces) -> the schema types
# an argument passed to it may have. The one statement of this relation: codegen
# checks entries with it, and renders it into generated/kernel_signatures.h for
# the compiler's check of the same entries.
ACCEPTS = {
    "DeviceTensor": {"Tensor"},
    "std::optional<DeviceTensor>": {"Tensor?", "Tensor"},
    "std::vector<DeviceTensor>": {"Tensor[]"},
    "int64_t": {"int", "SymInt"},
    "double": {"float"},
    "bool": {"bool"},
    "c10::Scalar": {"Scalar"},
    "std::optional<c10::Scalar>": {"Scalar?", "Scalar"},
    "c10::IntArrayRef": {"int[]", "SymInt[]"},
    "std::vector<int64_t>": {"int[]", "SymInt[]"},
    "std::optional<c10::ScalarType>": {"ScalarType?"},
    "std::optional<int64_t>": {"int?", "int"},
    "std::optional<double>": {"float?", "float"},
    "std::optional<bool>": {"bool?", "bool"},
    "c10::string_view": {"str"},
    "std::string": {"str"},
}


def param_types_accepting(schema_type: str) -> list[str]:
    """The kernel parameter types (as in ACCEPTS) an argument of `schema_type` may be passed to."""
    given = re.sub(r"\[\d+\]", "[]", schema_type)
    return [ctype for ctype, accepted in ACCEPTS.items() if given in accepted]


def _plain(ctype: str) -> str:
    """A parameter type as ACCEPTS spells it: `const std::optional<X>&` -> `std::optional<X>`."""
    return re.sub(r"\s+", "", ctype).removeprefix("const").removesuffix("&")


@lru_cache(maxsize=64)
def _definitions(path: str, mtime_ns: int) -> dict[str, list[tuple[str, str]]]:
    with open(path) as f:
        code = re.sub(r"//[^\n]*", "", f.read())
    found = {}
    for match in re.finditer(r"\bvoid\s+(\w+)\s*\(([^)]*)\)\s*\{", code):
        params = []
        for param in filter(None, (p.split("=")[0].strip() for p in match.group(2).split(","))):
            name_match = re.search(r"(\w+)\s*$", param)  # (a default argument is cut off above)
            if name_match is None:  # not a parameter list this reader understands: not a kernel
                params = None
                break
            params.append((_plain(param[:name_match.start()]), name_match.group(1)))
        if params is None:
            continue
        found[match.group(1)] = params
    return found


def kernel_parameters(kernel: str, path: str) -> list[tuple[str, str]] | None:
    """[(C++ type as ACCEPTS spells it, name)] of the kernel's definition in `path`, or None if not found."""
    try:
        return _definitions(path, os.stat(path).st_mtime_ns).get(kernel)
    except (OSError, UnicodeDecodeError):
        return None


def mismatches(kernel: str, path: str, exec_args: list[str], arg_types: dict[str, str]) -> list[str]:
    """What is wrong with passing `exec_args` (schema types in `arg_types`;
    outputs are Tensors) to the kernel, one sentence each."""
    params = kernel_parameters(kernel, path)
    if params is None:
        return []
    if len(params) != len(exec_args):
        signature = ", ".join(f"{name}" for _, name in params)
        return [f"kernel '{kernel}' takes {len(params)} argument(s) ({signature}), the entry passes "
                f"{len(exec_args)}"]
    problems = []
    for (ctype, pname), arg in zip(params, exec_args):
        accepted = ACCEPTS.get(ctype)
        given = re.sub(r"\[\d+\]", "[]", arg_types.get(arg, "Tensor"))
        if accepted is not None and given not in accepted:
            problems.append(f"'{arg}' ({given}) is passed to the kernel's parameter '{pname}', which takes "
                            f"{' or '.join(sorted(accepted))}")
    return problems
