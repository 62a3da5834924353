"""How schema types and defaults appear in each generated language.

C++ adapter signatures come from torchgen's DispatcherSignature; this module
covers what torchgen has no notion of: the pybind11 parameter types of the
bindings, and the types and defaults of the Python stubs.
"""
from __future__ import annotations

import ast
import math
import re

from torchgen import local
from torchgen.api import dispatcher
from torchgen.api.types import DispatcherSignature
from torchgen.model import Argument, FunctionSchema


def dispatcher_signature(schema: FunctionSchema):
    """(return type, [(C++ type, name)], C++ function type) as the dispatcher sees them."""
    with local.parametrize(use_const_ref_for_mutable_tensors=False, use_ilistref_for_tensor_lists=False):
        sig = DispatcherSignature.from_schema(schema)
        params = [(a.nctype.cpp_type(), a.name) for a in sig.arguments()]
        return dispatcher.returns_type(schema.returns).cpp_type(), params, sig.type()


# schema type of a number argument -> the parameter type a generated
# (elementwise) kernel declares for it
KERNEL_NUMBER_TYPES = {"float": "double", "int": "int64_t", "SymInt": "int64_t", "bool": "bool",
                       "Scalar": "const c10::Scalar&"}


def _is_list(t: str) -> bool:
    return bool(re.search(r"\[\d*\]\??$", t))


# schema type -> (pybind parameter type, conversion to the dispatcher type)
_BINDING = {
    "Tensor": ("const at::Tensor&", "{}"),
    "Tensor?": ("const std::optional<at::Tensor>&", "{}"),
    "Tensor[]": ("const std::vector<at::Tensor>&", "{}"),
    "int[]": ("const std::vector<int64_t>&", "{}"),
    "SymInt[]": ("const std::vector<int64_t>&", "c10::fromIntArrayRefSlow({})"),
    # None or a list: ATen's optional dimensions and sizes (sum's dim, upsampling's output_size)
    "int[]?": ("const std::optional<std::vector<int64_t>>&",
               "{0}.has_value() ? at::OptionalIntArrayRef(*{0}) : at::OptionalIntArrayRef()"),
    "SymInt[]?": ("const std::optional<std::vector<int64_t>>&",
                  "{0}.has_value() ? at::OptionalSymIntArrayRef(c10::fromIntArrayRefSlow(*{0})) "
                  ": at::OptionalSymIntArrayRef()"),
    "int": ("int64_t", "{}"),
    "SymInt": ("int64_t", "c10::SymInt({})"),
    "SymInt?": ("std::optional<int64_t>", "{0}.has_value() ? std::optional<c10::SymInt>(*{0}) : std::nullopt"),
    "float": ("double", "{}"),
    "bool": ("bool", "{}"),
    "str": ("const std::string&", "{}"),
    "str?": ("const std::optional<std::string>&",
             "{0}.has_value() ? std::optional<c10::string_view>(*{0}) : std::nullopt"),
    "float[]?": ("const std::optional<std::vector<double>>&",
                 "{0}.has_value() ? std::optional<at::ArrayRef<double>>(*{0}) : std::nullopt"),
    "Scalar": ("const pybind11::object&", 'python::to_scalar({}, "{op}", "{name}")'),
    "Scalar?": ("const pybind11::object&", 'python::to_optional_scalar({}, "{op}", "{name}")'),
    "ScalarType?": ("std::optional<at::ScalarType>", "{}"),
    "int?": ("std::optional<int64_t>", "{}"),
    "float?": ("std::optional<double>", "{}"),
    "bool?": ("std::optional<bool>", "{}"),
}

_STUB = {
    "Tensor": "Tensor",
    "Tensor?": "Tensor | None",
    "Tensor[]": "Sequence[Tensor]",
    "int[]": "int | Sequence[int]",
    "SymInt[]": "int | Sequence[int]",
    "int[]?": "int | Sequence[int] | None",
    "SymInt[]?": "int | Sequence[int] | None",
    "SymInt?": "int | None",
    "int": "int",
    "SymInt": "int",
    "float": "float",
    "bool": "bool",
    "str": "str",
    "str?": "str | None",
    "float[]?": "float | Sequence[float] | None",
    "Scalar": "Number",
    "Scalar?": "Number | None",
    "ScalarType?": "torch.dtype | None",
    "int?": "int | None",
    "float?": "float | None",
    "bool?": "bool | None",
}

SUPPORTED_ARG_TYPES = sorted(_BINDING)


def base_type(schema_type) -> str:
    """A schema type without list sizes, e.g. int[1] -> int[]."""
    return re.sub(r"\[\d+\]", "[]", str(schema_type))


def binding_param(arg: Argument, op_name: str) -> tuple[str, str]:
    """(pybind11 parameter type, expression converting it for the C++ API)."""
    ptype, convert = _BINDING[base_type(arg.type)]
    return ptype, convert.replace("{op}", op_name).replace("{name}", arg.name).format(arg.name)


def stub_type(arg: Argument) -> str:
    return _STUB[base_type(arg.type)]


# Named int defaults of ATen's schemas (at::Reduction), by value.
_INT_CONSTANTS = {"Mean": 1, "Sum": 2}


def cpp_default(arg: Argument) -> str:
    """The default as a C++ expression for pybind11's py::arg(...) = ..."""
    text = arg.default
    if text in _INT_CONSTANTS:
        return str(_INT_CONSTANTS[text])
    if text == "None":
        return "pybind11::none()"
    if text in ("True", "False"):
        return text.lower()
    value = ast.literal_eval(text)
    if _is_list(str(arg.type)):
        items = value if isinstance(value, list) else [value]
        return "std::vector<int64_t>{" + ", ".join(str(v) for v in items) + "}"
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    return text


def python_default(arg: Argument) -> str:
    text = arg.default
    if text in _INT_CONSTANTS:
        return str(_INT_CONSTANTS[text])
    if _is_list(str(arg.type)) and not text.startswith("[") and text != "None":
        return f"[{text}]"
    return text


_SAFE_STRING = re.compile(r"[A-Za-z0-9_ .,:+-]{0,64}")
_INT64 = (-(2**63), 2**63 - 1)


def check_default(arg: Argument) -> tuple[str, str] | None:
    """(problem, fix) if the argument's default cannot be written in C++ and
    Python as the value the schema means, else None."""
    text, schema_type = arg.default, base_type(arg.type)
    if text is None:
        return None
    where = f"argument '{arg.name}' ({arg.type})"
    if text == "None":
        if schema_type.endswith("?"):
            return None
        return f"{where} defaults to None but is not optional", f"write the type as {arg.type}? or give a value"
    base = schema_type.rstrip("?")
    if base in ("Tensor", "Tensor[]", "ScalarType"):
        return f"{where} can only default to None", "write =None, and make the type optional"
    if base == "int" and text in _INT_CONSTANTS:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return f"{where} has the default '{text[:40]}', which is not a literal value", _default_fix(base)
    if base in ("int", "SymInt"):
        ok = isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value <= _INT64[1]
    elif base in ("float", "Scalar"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
            and abs(value) < 2**63
    elif base == "bool":
        ok = isinstance(value, bool)
    elif base == "str":
        ok = isinstance(value, str) and _SAFE_STRING.fullmatch(value) is not None
    elif base in ("int[]", "SymInt[]"):
        items = value if isinstance(value, list) else [value]
        ok = all(isinstance(v, int) and not isinstance(v, bool) and _INT64[0] <= v <= _INT64[1] for v in items)
        size = re.search(r"\[(\d+)\]", str(arg.type))
        # int[1] is ATen's "one int or a list" (the matrix norms' dim=[-2,-1]); a larger size
        # is a fixed count, which a single value fills; [] is "none given" (amax's dim=[],
        # a pooling's stride=[]: the kernel size).
        fixed = size is not None and int(size.group(1)) > 1
        if ok and fixed and isinstance(value, list) and value and len(value) != int(size.group(1)):
            # int[2] x=[1, 2, 3]: PyTorch's parser would take it, and C++ would get three values for two.
            return (f"{where} has the default {text[:40]}, of {len(value)} value(s) where the type holds "
                    f"{size.group(1)}", f"write {size.group(1)} values, or one value for all (e.g. =1)")
    else:
        ok = False
    return None if ok else (f"{where} has the default '{text[:40]}', which is not a valid {base}", _default_fix(base))


def _default_fix(base: str) -> str:
    return {
        "int": "write a whole number in int64's range, e.g. =1",
        "SymInt": "write a whole number in int64's range, e.g. =1",
        "float": "write a finite number, e.g. =1.0 (inf and nan cannot be defaults)",
        "Scalar": "write a finite number, e.g. =1",
        "bool": "write =True or =False",
        "str": 'write a short quoted word, e.g. ="sum" (letters, digits, space and _ . , : + -)',
        "int[]": "write a list of whole numbers, e.g. =[0, 1]",
        "SymInt[]": "write a list of whole numbers, e.g. =[0, 1]",
    }.get(base, "remove the default")
