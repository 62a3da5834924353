"""The parameter lists of the kernels under csrc/kernels, read from their C++
definitions, so `exec:` arguments of the wrong number or kind are reported
with the YAML's file:line instead of failing when the kernel is first launched.

A kernel is `void NAME(PARAMETERS) {` followed, somewhere later in its file,
by SIMHPU_KERNEL(NAME). A parameter of a type no argument is ever passed as
(one ACCEPTS does not list) is reported too: it could never be launched.
"""
from __future__ import annotations

import os
import re
from functools import lru_cache

from .rules import DTYPES

# A kernel parameter's type (without const, & and spaces) -> the schema types
# an argument passed to it may have. The one statement of this relation: codegen
# checks entries with it, and renders it into generated/kernel_signatures/ for
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
    "std::optional<std::vector<int64_t>>": {"int[]?", "SymInt[]?", "int[]", "SymInt[]"},
    "std::optional<c10::ScalarType>": {"ScalarType?"},
    "std::optional<int64_t>": {"int?", "int", "SymInt?", "SymInt"},
    "std::optional<double>": {"float?", "float"},
    "std::optional<bool>": {"bool?", "bool"},
    "c10::string_view": {"str"},
    "std::string": {"str"},
}
# The same for an entry's outputs: the parameters a kernel writes say so by
# their type (Out<T>, kernels/kernel_api.h), and only outputs are passed there.
OUTPUT_ACCEPTS = {
    "Out<DeviceTensor>": {"Tensor"},
    "Out<std::vector<DeviceTensor>>": {"Tensor[]"},
}


def param_types_accepting(schema_type: str, output: bool = False) -> list[str]:
    """The kernel parameter types (as in ACCEPTS, or OUTPUT_ACCEPTS for an
    output) an argument of `schema_type` may be passed to."""
    given = re.sub(r"\[\d+\]", "[]", schema_type)
    return [ctype for ctype, accepted in (OUTPUT_ACCEPTS if output else ACCEPTS).items() if given in accepted]


def _plain(ctype: str) -> str:
    """A parameter type as ACCEPTS spells it: `const std::optional<X>&` -> `std::optional<X>`,
    `const simhpu::Out<DeviceTensor>&` -> `Out<DeviceTensor>`."""
    return re.sub(r"\s+", "", ctype).removeprefix("const").removesuffix("&").replace("simhpu::", "")


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


FLOATING = ("float32", "float64")
INTEGRAL = ("uint8", "int8", "int16", "int32", "int64")
# The dtypes each dtype-dispatch macro instantiates its body for; the _AND,
# _AND2, ... forms add the dtypes they name first.
DISPATCH_MACROS = {
    "SIMHPU_DISPATCH_FLOATING": (*FLOATING, "float16", "bfloat16"),
    "AT_DISPATCH_FLOATING_TYPES": FLOATING,
    "AT_DISPATCH_FLOATING_TYPES_AND_HALF": (*FLOATING, "float16"),
    "AT_DISPATCH_INTEGRAL_TYPES": INTEGRAL,
    "AT_DISPATCH_ALL_TYPES": (*FLOATING, *INTEGRAL),
}
# at::kHalf, c10::kHalf, kHalf and at::ScalarType::Half -> float16, ...
SCALAR_TYPE_NAMES = {enum.split("::k")[-1]: name for name, (enum, _, _) in DTYPES.items()}


def _body(code: str, start: int) -> str:
    """The braced block that opens at code[start]."""
    depth = 0
    for i in range(start, len(code)):
        depth += {"{": 1, "}": -1}.get(code[i], 0)
        if depth == 0:
            return code[start:i + 1]
    return code[start:]


def _scalar_type(token: str) -> str | None:
    name = token.strip().split("::")[-1]
    return SCALAR_TYPE_NAMES.get(name[1:] if name.startswith("k") else name)


@lru_cache(maxsize=64)
def _dispatches(path: str, mtime_ns: int) -> dict[str, frozenset[str] | None]:
    with open(path) as f:
        code = re.sub(r"//[^\n]*", "", f.read())
    found = {}
    for match in re.finditer(r"\bvoid\s+(\w+)\s*\([^)]*\)\s*\{", code):
        dtypes: set[str] = set()
        for call in re.finditer(r"\b((?:AT|SIMHPU)_DISPATCH_\w+)\s*\(([^()]*)", _body(code, match.end() - 1)):
            macro, args = call.group(1), call.group(2).split(",")
            base = re.sub(r"_AND\d?$", "", macro)
            count = int(macro[-1]) if re.search(r"_AND\d$", macro) else 1 if macro.endswith("_AND") else 0
            added = [_scalar_type(a) for a in args[:count]]
            if base not in DISPATCH_MACROS or None in added or len(added) < count:
                dtypes = None  # a macro (or a dtype) this reader does not know
                break
            dtypes |= {*DISPATCH_MACROS[base], *added}
        found[match.group(1)] = frozenset(dtypes) if dtypes else None
    return found


def dispatched_dtypes(kernel: str, path: str) -> frozenset[str] | None:
    """The dtypes the kernel's dispatch macros instantiate it for (their union);
    None when it dispatches with no macro, or one this reader does not know."""
    try:
        return _dispatches(path, os.stat(path).st_mtime_ns).get(kernel)
    except (OSError, UnicodeDecodeError):
        return None


def kernel_parameters(kernel: str, path: str) -> list[tuple[str, str]] | None:
    """[(C++ type as ACCEPTS spells it, name)] of the kernel's definition in `path`, or None if not found."""
    try:
        return _definitions(path, os.stat(path).st_mtime_ns).get(kernel)
    except (OSError, UnicodeDecodeError):
        return None


def mismatches(kernel: str, path: str, exec_args: list[str], arg_types: dict[str, str],
               outputs: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with passing `exec_args` (schema types in `arg_types`;
    `outputs` are the entry's outputs, Tensors) to the kernel, one sentence each."""
    params = kernel_parameters(kernel, path)
    if params is None:
        return []
    if len(params) != len(exec_args):
        signature = ", ".join(f"{name}" for _, name in params)
        return [f"kernel '{kernel}' takes {len(params)} argument(s) ({signature}), the entry passes "
                f"{len(exec_args)}"]
    problems = []
    for (ctype, pname), arg in zip(params, exec_args):
        given = re.sub(r"\[\d+\]", "[]", arg_types.get(arg, "Tensor"))
        if arg in outputs and ctype not in OUTPUT_ACCEPTS:
            problems.append(f"output '{arg}' is passed to the kernel's parameter '{pname}' ({ctype}), which the "
                            f"kernel only reads, so the output would never be written; a parameter the kernel "
                            f"writes is declared const Out<DeviceTensor>& {pname}")
            continue
        if arg not in outputs and ctype in OUTPUT_ACCEPTS:
            problems.append(f"'{arg}' ({given}), an input, is passed to the kernel's parameter '{pname}' "
                            f"({ctype}), which the kernel writes; only the entry's outputs "
                            f"({', '.join(outputs)}) are passed to the parameters a kernel writes")
            continue
        accepted = (OUTPUT_ACCEPTS if arg in outputs else ACCEPTS).get(ctype)
        if accepted is None:
            # A launch record holds only the types ACCEPTS lists: any other
            # parameter type cannot receive an argument (float for a schema
            # float, whose value is a C++ double, is the usual slip).
            problems.append(f"the kernel's parameter '{pname}' has type {ctype}, which no argument is "
                            f"passed as; '{arg}' ({given}) needs {' or '.join(param_types_accepting(given, output=arg in outputs))}")
        elif given not in accepted:
            problems.append(f"'{arg}' ({given}) is passed to the kernel's parameter '{pname}', which takes "
                            f"{' or '.join(sorted(accepted))}")
    return problems


def signature_header(kernel: str) -> str:
    """The generated header that lets the compiler check `kernel` against its exec: entries."""
    return f"generated/kernel_signatures/{kernel}.h"


def includes_signature_header(kernel: str, path: str) -> bool:
    try:
        with open(path) as f:
            code = f.read()
    except (OSError, UnicodeDecodeError):
        return True  # nothing to read: nothing to ask of it
    return re.search(r'^\s*#\s*include\s*"' + re.escape(signature_header(kernel)) + '"', code, re.M) is not None
