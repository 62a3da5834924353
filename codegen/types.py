"""How schema types and defaults appear in each generated language.

C++ adapter signatures come from torchgen's DispatcherSignature; this module
covers what torchgen has no notion of: the pybind11 parameter types of the
bindings, and the types and defaults of the Python stubs.
"""
from __future__ import annotations

import ast
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


def _is_list(t: str) -> bool:
    return bool(re.search(r"\[\d*\]\??$", t))


# schema type -> (pybind parameter type, conversion to the dispatcher type)
_BINDING = {
    "Tensor": ("const at::Tensor&", "{}"),
    "Tensor?": ("const std::optional<at::Tensor>&", "{}"),
    "Tensor[]": ("const std::vector<at::Tensor>&", "{}"),
    "int[]": ("const std::vector<int64_t>&", "{}"),
    "SymInt[]": ("const std::vector<int64_t>&", "c10::fromIntArrayRefSlow({})"),
    "int": ("int64_t", "{}"),
    "SymInt": ("int64_t", "c10::SymInt({})"),
    "float": ("double", "{}"),
    "bool": ("bool", "{}"),
    "str": ("const std::string&", "{}"),
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
    "int": "int",
    "SymInt": "int",
    "float": "float",
    "bool": "bool",
    "str": "str",
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


def cpp_default(arg: Argument) -> str:
    """The default as a C++ expression for pybind11's py::arg(...) = ..."""
    text = arg.default
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
    if _is_list(str(arg.type)) and not text.startswith("["):
        return f"[{text}]"
    return text
