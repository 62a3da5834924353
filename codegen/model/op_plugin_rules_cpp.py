"""op-plugin's output rules as C++: a parsed rule (codegen/model/op_plugin_rules.py) rendered as an
expression over simhpu::op_plugin::RuleValue (csrc/op_plugin_dialect/rule_value.h).

Nothing of the rule's text reaches the C++: each node of its parse is rendered from what this
module knows — an argument of the schema becomes `a("name")` (a validated identifier inside a
string literal), a constant its C++ value from a fixed table, a helper or method call one of the
functions rule_value.h declares. Anything else makes the rule unreadable (RuleUnreadable), and the
entry is generated without it, as the Python evaluator would leave it.
"""
from __future__ import annotations

import math

import torch

from .op_plugin_rules import HELPERS, RuleUnreadable, _constant, _unqualified

# Methods RuleValue's method() answers (the Python evaluator's _method).
METHODS = frozenset({"sizes", "sym_sizes", "size", "sym_size", "scalar_type", "dtype", "dim", "numel",
                     "value_or", "has_value", "value"})
# How many arguments each helper's C++ (csrc/op_plugin_dialect/rule_value.h) takes: a call with
# another count would not compile, so it makes the rule unreadable. None: any number (result_type
# takes them as one list; ArrayRef and SmallVector read as an empty size list).
ARITY = {
    "broadcast_ops_npu_output_size": 2, "reduce_ops_npu_output_size": 3, "input_same_output_size": 1,
    "get_dimlist_for_tensor": 1, "glu_npu_output_size": 2, "stack_output_size": 2, "clamp_npu_output_size": 3,
    "addr_npu_output_size": 3, "repeat_npu_output_size": 2, "isIntegralType": 2, "isFloatingType": 1,
    "abs_out_dtype": 1, "angle_out_dtype": 1, "polar_out_dtype": 2, "result_type": None,
    "typeMetaToScalarType": 1, "ArrayRef": None, "SmallVector": None, "promoteTypes": 2, "clamp_out_dtype": 3,
    "clamp_scalar_out_dtype": 3, "max_pool2d_out_size": 2, "max_pool3d_output_size": 2,
    "adaptive_avg_pool3d_npu_output_size": 2, "cdist_npu_output_size": 2, "im2col_backward_npu_output_size": 3,
    "isclose_output_size": 5, "is_gte_cann_version_820rc1": 0,
    **{f"{kind}_pad{n}d_npu_out_size": 2 for kind in ("reflection", "replication") for n in (1, 2, 3)},
}
_VARIADIC = {"result_type"}
_EMPTY_SIZES = {"ArrayRef", "SmallVector"}
_CPP_DTYPES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
               torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
               torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}
_BINARY = {"+", "-", "*", "/", "==", "!=", "<", "<=", ">", ">="}
INT64_MAX = 2 ** 63 - 1


def render(tree, arguments: frozenset[str]) -> str:
    """The C++ expression of a parsed rule over a call's arguments `a` (a RuleArgs)."""
    kind = tree[0]
    if kind == "num":
        value = tree[1]
        if isinstance(value, float):
            if not math.isfinite(value):
                raise RuleUnreadable("a number C++ cannot write")
            return f"RuleValue::number({value!r})"
        if value > INT64_MAX:
            raise RuleUnreadable(f"the number {value} does not fit in 64 bits")
        return f"RuleValue::number(int64_t{{{value}}})"
    if kind == "name":
        if tree[1] in arguments:
            return f'a("{tree[1]}")'
        return _constant_cpp(_constant(tree[1]))
    if kind == "list":
        return "RuleValue::list({" + ", ".join(render(t, arguments) for t in tree[1]) + "})"
    if kind == "if":
        return f"(truthy({render(tree[1], arguments)}) ? {render(tree[2], arguments)} : {render(tree[3], arguments)})"
    if kind == "unary":
        return f"{tree[1]}({render(tree[2], arguments)})"
    if kind == "binary":
        op, left, right = tree[1], render(tree[2], arguments), render(tree[3], arguments)
        if op == "&&":
            return f"RuleValue::boolean(truthy({left}) && truthy({right}))"
        if op == "||":
            return f"RuleValue::boolean(truthy({left}) || truthy({right}))"
        if op not in _BINARY:
            raise RuleUnreadable(f"the operator {op!r}")
        return f"({left} {op} {right})"
    if kind == "index":
        return f"index({render(tree[1], arguments)}, {render(tree[2], arguments)})"
    if kind == "method":
        if tree[2] not in METHODS:
            raise RuleUnreadable(f"'.{tree[2]}()' is not known here")
        args = ", ".join(render(t, arguments) for t in tree[3])
        return f'method({render(tree[1], arguments)}, "{tree[2]}", {{{args}}})'
    if kind == "call":
        name = _unqualified(tree[1])
        if name not in HELPERS:
            raise RuleUnreadable(f"'{tree[1]}' is not an output-size helper simhpu knows")
        args = [render(t, arguments) for t in tree[2]]
        if ARITY[name] is not None and len(args) != ARITY[name]:
            raise RuleUnreadable(f"'{name}' takes {ARITY[name]} arguments here, not {len(args)}")
        if name in _EMPTY_SIZES:
            return "helpers::empty_sizes()"
        if name in _VARIADIC:
            return f"helpers::{name}({{{', '.join(args)}}})"
        return f"helpers::{name}({', '.join(args)})"
    raise RuleUnreadable(f"cannot render {kind}")


def _constant_cpp(value) -> str:
    if isinstance(value, bool):
        return f"RuleValue::boolean({'true' if value else 'false'})"
    if isinstance(value, int):
        return f"RuleValue::number(int64_t{{{value}}})"
    if isinstance(value, torch.dtype) and value in _CPP_DTYPES:
        return f"RuleValue::of(c10::ScalarType::{_CPP_DTYPES[value]})"
    raise RuleUnreadable(f"the constant {value!r}")
