"""`stub:` entries: aten operators served through one of ATen's dispatch stubs.

An `official:` entry with `stub: abs_stub` gives the stub a simhpu kernel and
registers the aten operator's own kernels (ATen's, from native_functions.yaml)
for PrivateUse1, so a call reaches the stub: ATen's kernel builds the
TensorIterator on the host (broadcasting, type promotion, output allocation
and resizing) and the stub's simhpu function launches the iterator's operands
as one record (csrc/aten/stub_launch.h).

What this module knows it reads from the installed torch: the stubs from the
DECLARE_DISPATCH lines of its ATen/native headers, the operators and their CPU
kernels from torchgen's copy of native_functions.yaml. The wrappers that give
a structured kernel its outputs are torchgen's own (written for the CPU key,
whose wrappers allocate through the helpers this module's template defines).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache

from ..model.elementwise import ElementwiseKernel, ExpressionError, translate
from ..errors import Problems, did_you_mean
from ..names import printable_label
from ..model.rules import DTYPES
from ..yaml_loader import LineDict

STUB_KEYS = {"func", "stub", "elementwise", "exec", "dtypes", "doc"}
# A stub kernel in csrc/kernels: void NAME(stubs::IteratorOperands& operands), registered so.
STUB_KERNEL_REGISTRATION = re.compile(r"SIMHPU_STUB_KERNEL\(\s*(\w+)\s*\)")
_ITERATOR_PARAM = re.compile(r"^(?:at::)?(TensorIteratorBase|TensorIterator)\s*&$")
_SCALAR_PARAM = re.compile(r"^const\s+(?:c10::|at::)?Scalar\s*&$")


@dataclass(frozen=True)
class StubDecl:
    """A dispatch stub as torch's headers declare it."""
    name: str
    header: str  # to include, e.g. "ATen/native/UnaryOps.h"
    function_type: str  # as written, typedefs resolved: "void(*)(TensorIteratorBase&)"
    iterator_type: str  # "at::TensorIteratorBase" or "at::TensorIterator"
    params: tuple[str, ...]  # the parameters after the iterator, as written


@dataclass(frozen=True)
class Registration:
    """One aten operator of the entry's group, registered for PrivateUse1."""
    name: str  # "lt.Tensor_out"
    ops_header: str  # "lt" -> <ATen/ops/lt_ops.h>
    declaration: str  # our gate's C++ declaration
    arg_names: tuple[str, ...]
    inputs: tuple[str, ...]  # tensor arguments read (checked against `dtypes`)
    outputs: tuple[str, ...]  # tensor arguments written (their dtype: `dtypes` or bool)
    aten_kernel: str  # torchgen's wrapper it calls
    ops_struct: str  # at::_ops::<this>, for the reference path


@dataclass(frozen=True)
class StubEntry:
    name: str  # the operator the entry names, "abs.out"
    cpp_name: str  # "abs_out"
    stub: StubDecl
    dtypes: tuple[str, ...]
    outputs: tuple[str, ...]  # the iterator's outputs, then
    inputs: tuple[str, ...]  # its inputs, as the kernel names them
    scalars: tuple[str, ...]  # the stub's Scalar parameters, named after the schema's Scalar arguments
    elementwise: ElementwiseKernel | None
    exec_kernel: str | None
    native_headers: tuple[str, ...]  # <ATen/ops/X_native.h> the wrappers need
    aten_kernels: str  # torchgen's wrapper definitions
    registrations: tuple[Registration, ...]
    file: str
    line: int
    doc: str = ""

    @property
    def operands(self) -> int:
        return len(self.outputs) + len(self.inputs)

    @property
    def dtype_cases(self) -> list[tuple[str, str]]:
        return [(DTYPES[d][0], DTYPES[d][2]) for d in self.dtypes]


def torch_include_dir() -> str:
    import torch.utils.cpp_extension
    return torch.utils.cpp_extension.include_paths()[0]


@lru_cache(maxsize=1)
def declared_stubs(include_dir: str | None = None) -> dict[str, StubDecl]:
    """Every DECLARE_DISPATCH(TYPE, NAME) under ATen/native/ of the installed torch."""
    include_dir = include_dir or torch_include_dir()
    native = os.path.join(include_dir, "ATen", "native")
    texts = {}
    for folder, _, names in os.walk(native):
        for n in sorted(names):
            if n.endswith(".h"):
                path = os.path.join(folder, n)
                with open(path, encoding="utf-8", errors="replace") as f:
                    texts[os.path.relpath(path, include_dir)] = re.sub(r"//[^\n]*", "", f.read())
    aliases = {}
    for text in texts.values():
        for m in re.finditer(r"\busing\s+(\w+)\s*=\s*(void\s*\(\s*\*\s*\)\s*\((?:[^()]|\([^()]*\))*\))\s*;", text):
            aliases[m.group(1)] = m.group(2)
    found = {}
    for header, text in texts.items():
        for m in re.finditer(r"\bDECLARE_DISPATCH\(\s*((?:[^()]|\((?:[^()]|\([^()]*\))*\))+?)\s*,\s*(\w+)\s*\)", text):
            written, name = " ".join(m.group(1).split()), m.group(2)
            resolved = aliases.get(written, written)
            params = _params_of(resolved)
            if params is None:
                continue
            iterator = _ITERATOR_PARAM.match(params[0]) if params else None
            found[name] = StubDecl(name, header, resolved, f"at::{iterator.group(1)}" if iterator else "",
                                   tuple(params[1:] if iterator else params))
    return found


def _params_of(function_type: str) -> list[str] | None:
    """The parameter types of `void(*)(A, B)`, or None for another shape."""
    m = re.fullmatch(r"void\s*\(\s*\*\s*\)\s*\((.*)\)", function_type.strip())
    if m is None:
        return None
    params, depth, current = [], 0, ""
    for char in m.group(1):
        if char == "," and depth == 0:
            params.append(" ".join(current.split()))
            current = ""
            continue
        depth += char in "(<"
        depth -= char in ")>"
        current += char
    if current.strip():
        params.append(" ".join(current.split()))
    # Without parameter names: "const Scalar& alpha" -> "const Scalar&".
    return [re.sub(r"([&*])\s*\w+$", r"\1", p) for p in params]


@lru_cache(maxsize=1)
def _native_functions():
    """torchgen's parse of the native_functions.yaml torch was built from: operator -> (group, CPU index)."""
    import torchgen
    from torchgen.gen import get_grouped_native_functions, parse_native_yaml
    from torchgen.model import DispatchKey, NativeFunctionsGroup

    base = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native")
    parsed = parse_native_yaml(os.path.join(base, "native_functions.yaml"), os.path.join(base, "tags.yaml"))
    by_name = {}
    for g in get_grouped_native_functions(parsed.native_functions):
        for f in (g.functions() if isinstance(g, NativeFunctionsGroup) else [g]):
            by_name[str(f.func.name)] = (g, f)
    return by_name, parsed.backend_indices[DispatchKey.CPU]


def load_stub_entry(entry: LineDict, file: str, problems: Problems, stub_kernels: dict[str, str],
                    registered_elsewhere: set[str]) -> StubEntry | None:
    """One `official:` entry with `stub:`, validated; `registered_elsewhere`:
    aten operators other entries register (their kernels are kept)."""
    label = printable_label(str(entry.get("func", "(entry without func)")).split("(")[0].strip(), quote=False)
    before = len(problems.items)

    def bad(key: str, message: str, fix: str) -> None:
        problems.add(file, entry.line_of(key) if key in entry else entry.line, label, key, message, fix)

    for key in entry:
        if key not in STUB_KEYS:
            bad(key, "not a field of a stub entry",
                did_you_mean(key, STUB_KEYS) or f"a stub entry has {', '.join(sorted(STUB_KEYS))}")
    stub = _stub_decl(entry, bad)
    dtypes = _dtypes(entry, bad)
    group = _aten_operator(entry, bad)
    if stub is None or group is None or len(problems.items) != before:
        return None
    g, f = group
    outputs = tuple(a.name for a in f.func.arguments.flat_all if a.type.is_tensor_like() and a.annotation
                    and a.annotation.is_write)
    inputs = tuple(a.name for a in f.func.arguments.flat_all if a.type.is_tensor_like() and a.name not in outputs)
    scalar_args = tuple(a.name for a in f.func.arguments.flat_all if str(a.type) == "Scalar")
    for param in stub.params:
        if not _SCALAR_PARAM.match(param):
            bad("stub", f"{stub.name} is {stub.function_type}: its '{param}' is not something a YAML kernel "
                "receives (the iterator's operands and Scalar values)", "serve the op with an 'adapter:' instead")
            return None
    if len(stub.params) != len(scalar_args):
        bad("stub", f"{stub.name} passes {len(stub.params)} Scalar value(s) to its kernel, but {f.func.name} has "
            f"{len(scalar_args)} Scalar argument(s) to name them after ({', '.join(scalar_args) or 'none'})",
            "name the operator whose kernel calls this stub")
        return None
    scalars = scalar_args
    elementwise, exec_kernel = _kernel(entry, bad, inputs, scalars, stub_kernels)
    if len(problems.items) != before:
        return None
    registrations, aten_kernels, headers = _registrations(g, f, registered_elsewhere, inputs, outputs)
    if not registrations:
        bad("func", f"every operator of {f.func.name}'s group is registered by another entry already",
            "remove this entry or the other")
        return None
    doc = entry.get("doc", "")
    return StubEntry(str(f.func.name), str(f.func.name).replace(".", "_"), stub, dtypes, outputs, inputs, scalars,
                     elementwise, exec_kernel, headers, aten_kernels, registrations, file, entry.line,
                     doc if isinstance(doc, str) else "")


def _stub_decl(entry: LineDict, bad) -> StubDecl | None:
    name = entry.get("stub")
    if not isinstance(name, str) or not re.fullmatch(r"\w{1,80}", name):
        bad("stub", f"expected the name of one of ATen's dispatch stubs, got {printable_label(name)}",
            "e.g. stub: abs_stub")
        return None
    stubs = declared_stubs()
    if name not in stubs:
        bad("stub", f"torch's headers declare no dispatch stub '{name}' (DECLARE_DISPATCH under ATen/native/)",
            did_you_mean(name, stubs) or "see the DECLARE_DISPATCH lines of torch/include/ATen/native/*.h")
        return None
    decl = stubs[name]
    if not decl.iterator_type:
        bad("stub", f"{name} is {decl.function_type}: its kernel does not take a TensorIterator, which is what "
            "a stub entry launches", "serve the op with an 'adapter:' instead")
        return None
    return decl


def _dtypes(entry: LineDict, bad) -> tuple[str, ...]:
    dtypes = entry.get("dtypes")
    if not isinstance(dtypes, list) or not dtypes:
        bad("dtypes", "missing or empty: the dtypes the stub's kernel runs", "e.g. dtypes: [float32, float16]")
        return ()
    seen = []
    for d in dtypes:
        if not isinstance(d, str) or d not in DTYPES:
            bad("dtypes", f"unknown dtype {printable_label(d)}", did_you_mean(str(d), DTYPES) or
                f"use {', '.join(DTYPES)}")
        elif d in seen:  # each dtype is a case of the kernel's switch: twice would not compile
            bad("dtypes", f"dtype '{d}' is listed twice", "list each dtype once")
        else:
            seen.append(d)
    return tuple(seen)


def _aten_operator(entry: LineDict, bad):
    """The entry's aten operator in native_functions.yaml, with its group."""
    text = entry.get("func")
    if not isinstance(text, str):
        bad("func", "missing: the aten operator whose kernel calls the stub", "copy its schema from "
            "native_functions.yaml, e.g. func: abs.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)")
        return None
    by_name, cpu = _native_functions()
    name = text.split("(")[0].strip()
    if name not in by_name:
        bad("func", f"'{printable_label(name, quote=False)}' is not an aten operator",
            did_you_mean(name, by_name) or "copy the schema from native_functions.yaml")
        return None
    g, f = by_name[name]
    if " ".join(text.split()) != str(f.func):
        bad("func", f"the schema differs from aten's: {f.func}", "copy aten's schema exactly")
        return None
    return g, f


def _kernel(entry: LineDict, bad, inputs, scalars, stub_kernels):
    given = [k for k in ("elementwise", "exec") if k in entry]
    if len(given) != 1:
        bad(given[1] if given else "elementwise",
            "a stub entry has one kernel: 'elementwise:' or 'exec:'" if given else "missing the stub's kernel",
            "write 'elementwise: EXPRESSION' over the inputs "
            f"({', '.join(inputs) or 'none'}) and Scalars ({', '.join(scalars) or 'none'}), or 'exec: KERNEL'")
        return None, None
    if given[0] == "elementwise":
        types = {**{n: "Tensor" for n in inputs}, **{n: "Scalar" for n in scalars}}
        try:
            return translate(entry["elementwise"], types, allow_nullary=True), None
        except ExpressionError as e:
            bad("elementwise", f"the expression {e}", "write a Python expression over the inputs "
                f"({', '.join(inputs) or 'none'}) and Scalars ({', '.join(scalars) or 'none'})")
            return None, None
    name = entry["exec"]
    if not isinstance(name, str) or name not in stub_kernels:
        bad("exec", f"no stub kernel {printable_label(name)} is registered under csrc/kernels "
            "(SIMHPU_STUB_KERNEL(NAME) after void NAME(stubs::IteratorOperands& operands))",
            did_you_mean(str(name), stub_kernels) or "write the kernel and register it")
        return None, None
    return None, name


def _registrations(g, f, registered_elsewhere: set[str], inputs, outputs):
    """PrivateUse1 registrations of the operator's group (ATen's kernels for the
    CPU key, which reach the stub through the iterator's device), skipping
    operators another entry registers; with torchgen's wrapper definitions."""
    from torchgen.api.types import DispatcherSignature
    from torchgen.context import native_function_manager
    from torchgen.dest.register_dispatch_key import RegisterDispatchKey
    from torchgen.model import BackendIndex, DispatchKey, NativeFunctionsGroup
    from torchgen.selective_build.selector import SelectiveBuilder
    from torchgen.utils import Target

    _, cpu = _native_functions()
    functions = list(g.functions()) if isinstance(g, NativeFunctionsGroup) else [f]
    kernels = {fn.func.name: cpu.get_kernel(fn) for fn in functions if cpu.get_kernel(fn) is not None}
    index = BackendIndex(dispatch_key=DispatchKey.CPU, use_out_as_primary=True, external=False,
                         device_guard=False, index=kernels)

    def generate(target):
        return RegisterDispatchKey(index, target, SelectiveBuilder.get_nop_selector(), rocm=False, symint=True,
                                   class_method_name=None, skip_dispatcher_op_registration=False)(g if isinstance(
                                       g, NativeFunctionsGroup) else f)

    # Named for what they are here; torchgen's one line over 100 columns (a
    # ternary in maybe_get_output) broken where a reviewer would break it.
    definitions = ("\n".join(generate(Target.ANONYMOUS_DEFINITION)).replace("wrapper_CPU_", "aten_kernel_")
                   .replace(" ? *proxy_outputs_[output_idx] : ", "\n          ? *proxy_outputs_[output_idx]\n          : "))
    registered = {}
    for line in "".join(generate(Target.REGISTRATION)).split(";"):
        m = re.search(r'm\.impl\("([^"]+)",\s*TORCH_FN\((\w+)\)\)', line)
        if m:
            registered[m.group(1)] = m.group(2).replace("wrapper_CPU_", "aten_kernel_")
    registrations = []
    for fn in functions:
        name = str(fn.func.name)
        if name not in registered or f"aten::{name}" in registered_elsewhere:
            continue
        gate = f"simhpu_{name.replace('.', '_')}"
        with native_function_manager(fn):  # torchgen's per-function settings (const refs of mutable tensors)
            sig = DispatcherSignature.from_schema(fn.func)
            declaration = sig.decl(name=gate)
            args = tuple(a.name for a in sig.arguments())
        written = tuple(a.name for a in fn.func.arguments.flat_all if a.type.is_tensor_like() and a.annotation
                        and a.annotation.is_write)
        read = tuple(a.name for a in fn.func.arguments.flat_all if a.type.is_tensor_like() and a.name not in written)
        registrations.append(Registration(name, fn.func.name.name.base, declaration, args, read, written,
                                          registered[name], fn.func.name.unambiguous_name()))
    base = str(f.func.name.name.base)
    headers = tuple(sorted({f"ATen/ops/{base}_native.h", *(f"ATen/ops/{r.ops_header}_ops.h" for r in registrations)}))
    return tuple(registrations), definitions, headers
