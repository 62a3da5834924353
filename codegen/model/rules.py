"""The small rule language of `out:` and `checks:` entries.

A rule is written as a Python call over argument names and literals, e.g.
`broadcast(x, y)` or `reduce(self, [-1], True)`; a bare argument name is short
for "the same as that argument". Each rule renders twice from one table: as C++
for the device adapter (csrc/aten/op_rules.h) and as Python for the fake kernel
(torch_simhpu/_rules.py).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ..errors import did_you_mean

# YAML dtype name -> (C++ ScalarType, torch attribute, C++ element type)
DTYPES = {
    "float32": ("at::kFloat", "float32", "float"),
    "float64": ("at::kDouble", "float64", "double"),
    "float16": ("at::kHalf", "float16", "at::Half"),
    "bfloat16": ("at::kBFloat16", "bfloat16", "at::BFloat16"),
    "int8": ("at::kChar", "int8", "int8_t"),
    "uint8": ("at::kByte", "uint8", "uint8_t"),
    "int16": ("at::kShort", "int16", "int16_t"),
    "int32": ("at::kInt", "int32", "int32_t"),
    "int64": ("at::kLong", "int64", "int64_t"),
    "bool": ("at::kBool", "bool", "bool"),
}


@dataclass(frozen=True)
class ArgRef:
    name: str


@dataclass(frozen=True)
class Literal:
    value: object


@dataclass(frozen=True)
class Rule:
    fn: str
    args: tuple

    def arg_names(self) -> list[str]:
        return [a.name for a in self.args if isinstance(a, ArgRef)]


@dataclass(frozen=True)
class RuleSpec:
    kind: str  # "size", "dtype" or "check"
    params: tuple  # parameter kinds: tensor, tensors (variadic), int_list, bool
    cpp: str
    py: str
    usage: str


SPECS = {
    "same": RuleSpec("size", ("tensor",), "rules::same_shape({0})", "list({0}.shape)", "ARG"),
    "shape": RuleSpec("size", ("int_list",), "rules::as_shape({0})", "list({0})", "an int[] argument or [n, ...]"),
    "broadcast": RuleSpec(
        "size", ("tensors",),
        "rules::broadcast_shapes(kOpName, {{{names}}}, {{{args}}})",
        "_rules.broadcast_shapes(_op, [{names}], [{args}])",
        "broadcast(A, B, ...)"),
    "index_shape": RuleSpec(
        "size", ("tensor", "int", "tensor"),
        'rules::index_shape(kOpName, "{0}", {0}, {1}, "{2}", {2})',
        '_rules.index_shape(_op, "{0}", {0}, {1}, "{2}", {2})',
        "index_shape(SELF, DIM, INDEX)"),
    "reduce": RuleSpec(
        "size", ("tensor", "int_list", "bool"),
        'rules::reduced_shape(kOpName, "{0}", {0}, {1}, {2})',
        '_rules.reduced_shape(_op, "{0}", {0}, {1}, {2})',
        "reduce(ARG, DIMS, KEEPDIM)"),
    "same_dtype": RuleSpec("dtype", ("tensor",), "{0}.scalar_type()", "{0}.dtype", "ARG"),
    "promote": RuleSpec("dtype", ("tensors",), "rules::promote_types({{{args}}})", "_rules.promote_types([{args}])",
                        "promote(A, B, ...)"),
    "dtype": RuleSpec("dtype", ("dtype",), "{0}", "{0}", "a dtype name"),
    "same_shape": RuleSpec(
        "check", ("tensor", "tensor_or_list"),
        'rules::check_same_shape(kOpName, "{0}", {0}, "{1}", {1})',
        '_rules.check_same_shape(_op, "{0}", {0}, "{1}", {1})',
        "same_shape(A, B)"),
    "broadcasts_to": RuleSpec(
        "check", ("tensor", "tensor"),
        'rules::check_broadcasts_to(kOpName, "{0}", {0}, "{1}", {1})',
        '_rules.check_broadcasts_to(_op, "{0}", {0}, "{1}", {1})',
        "broadcasts_to(A, B)"),
    "index_tensor": RuleSpec(
        "check", ("tensor",),
        'rules::check_index_tensor(kOpName, "{0}", {0})',
        '_rules.check_index_tensor(_op, "{0}", {0})',
        "index_tensor(INDEX)"),
    "trailing_shape": RuleSpec(
        "check", ("tensor", "tensor"),
        'rules::check_trailing_shape(kOpName, "{0}", {0}, "{1}", {1})',
        '_rules.check_trailing_shape(_op, "{0}", {0}, "{1}", {1})',
        "trailing_shape(OUTER, INNER)"),
    "gather_index": RuleSpec(
        "check", ("tensor", "int", "tensor"),
        'rules::check_gather_index(kOpName, "{0}", {0}, {1}, "{2}", {2})',
        '_rules.check_gather_index(_op, "{0}", {0}, {1}, "{2}", {2})',
        "gather_index(SELF, DIM, INDEX)"),
    "last_dim": RuleSpec(
        "check", ("tensor", "tensor"),
        'rules::check_last_dim(kOpName, "{0}", {0}, "{1}", {1})',
        '_rules.check_last_dim(_op, "{0}", {0}, "{1}", {1})',
        "last_dim(OUTER, INNER)"),
    "one_of": RuleSpec(
        "check", ("str", "str_list"),
        'rules::check_one_of(kOpName, "{0}", {0}, {1})',
        '_rules.check_one_of(_op, "{0}", {0}, {1})',
        'one_of(ARG, ["a", "b", ...])'),
    "row_stat": RuleSpec(
        "check", ("tensor", "tensor"),
        'rules::check_row_stat(kOpName, "{0}", {0}, "{1}", {1})',
        '_rules.check_row_stat(_op, "{0}", {0}, "{1}", {1})',
        "row_stat(STAT, X)"),
}

_BARE = {"size": "same", "dtype": "same_dtype"}


class RuleError(Exception):
    pass


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError as e:
        raise RuleError(f"'{ast.unparse(node)}' is neither an argument name nor a literal") from e


def parse_rule(text, kind: str, arg_types: dict[str, str]) -> Rule:
    """Parse and check one rule; `arg_types` maps argument names to schema types."""
    usage = ", ".join(s.usage for s in SPECS.values() if s.kind == kind)
    if not isinstance(text, str) or len(text) > 500:
        raise RuleError(f"expected a rule as text of at most 500 characters; expected one of: {usage}")
    text = text.strip()
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise RuleError(f"'{text}' does not parse as a rule ({e.msg}); expected one of: {usage}") from e
    except (RecursionError, MemoryError) as e:
        raise RuleError(f"the rule nests too deeply; expected one of: {usage}") from e

    if kind == "size" and isinstance(node, ast.List):
        return Rule("shape", (_check_param("int_list", node, arg_types, "shape"),))
    if isinstance(node, ast.Name):
        if kind == "dtype" and node.id in DTYPES and node.id not in arg_types:
            return Rule("dtype", (Literal(node.id),))
        if kind == "size" and _category(arg_types.get(node.id, "")) == "int_list":
            return Rule("shape", (ArgRef(node.id),))
        if kind not in _BARE:
            raise RuleError(f"'{text}' is not a check; expected one of: {usage}")
        node = ast.Call(func=ast.Name(_BARE[kind]), args=[node], keywords=[])
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)) or node.keywords:
        raise RuleError(f"'{text}' is not a rule; expected one of: {usage}")
    spec = SPECS.get(node.func.id)
    if spec is None or spec.kind != kind:
        raise RuleError(f"unknown {kind} rule '{node.func.id}'; expected one of: {usage}")

    args = []
    params = spec.params
    if params == ("tensors",):
        if len(node.args) < 2:
            raise RuleError(f"{node.func.id} needs at least two tensor arguments")
        params = ("tensor",) * len(node.args)
    if len(node.args) != len(params):
        raise RuleError(f"{node.func.id} takes {len(params)} argument(s), got {len(node.args)}: {spec.usage}")
    for param, arg in zip(params, node.args):
        args.append(_check_param(param, arg, arg_types, node.func.id))
    return Rule(node.func.id, tuple(args))


_PARAM_WORDS = {"tensor": "a Tensor", "int_list": "an int[]", "bool": "a bool", "int": "an int",
                "tensor_or_list": "a Tensor or Tensor[]", "str": "a str", "str_list": "a list of words"}

# Words a rule may compare a str argument with: they go into generated C++ and
# Python string literals as they are, so nothing that would need escaping.
_WORD = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def _category(schema_type: str) -> str:
    base = schema_type.rstrip("?")
    if base == "Tensor":
        return "tensor"
    if re.fullmatch(r"(int|SymInt)\[\d*\]", base):
        category = "int_list"
    elif base in ("int", "SymInt"):
        category = "int"
    else:
        category = base
    # An optional value may be None, which no rule that takes one computes with.
    return category if base == schema_type else f"optional {category}"


def _check_param(param: str, arg, arg_types: dict[str, str], fn: str):
    if isinstance(arg, ast.Name):
        name = arg.id
        if name not in arg_types:
            hint = did_you_mean(name, arg_types)
            raise RuleError(f"{fn}: '{name}' is not an argument of the schema" + (f"; {hint}" if hint else ""))
        category = _category(arg_types[name])
        if category != param and not (param == "tensor_or_list" and category in ("tensor", "Tensor[]")):
            raise RuleError(f"{fn}: argument '{name}' is {arg_types[name]}, expected {_PARAM_WORDS[param]}")
        return ArgRef(name)
    value = _literal(arg)
    def small_int(v):
        return isinstance(v, int) and not isinstance(v, bool) and -(2**62) < v < 2**62

    ok = {"int_list": lambda v: isinstance(v, list) and all(small_int(i) for i in v),
          "bool": lambda v: isinstance(v, bool),
          "int": small_int,
          "str_list": lambda v: isinstance(v, list) and 0 < len(v) <= 64 and all(
              isinstance(w, str) and _WORD.fullmatch(w) for w in v),
          "tensor": lambda v: False, "tensor_or_list": lambda v: False, "str": lambda v: False}[param]
    if not ok(value):
        if param == "str_list":
            raise RuleError(f"{fn}: '{ast.unparse(arg)[:80]}' is not a list of 1 to 64 words, each of 1 to 64 "
                            "letters, digits, '_', '.' or '-' (e.g. [\"sum\", \"mean\"])")
        raise RuleError(f"{fn}: '{ast.unparse(arg)}' is not a valid {param.replace('_', ' ')}")
    return Literal(value)


# The rules whose first argument is a tensor and second its dimension (or dimensions).
_DIMENSION_RULES = frozenset({"reduce", "index_shape", "gather_index"})


def dimension_out_of_range(rule: Rule, sample: dict) -> str | None:
    """What is wrong with the dimensions `rule` gives for a sample's inputs
    ({argument: shape or value}), when the sample tells the tensor's rank and
    the dimensions; None when they are in range, or not known."""
    if rule.fn not in _DIMENSION_RULES:
        return None
    tensor, dims = rule.args[0], rule.args[1]
    shape = sample.get(tensor.name) if isinstance(tensor, ArgRef) else None
    dims = sample.get(dims.name) if isinstance(dims, ArgRef) else dims.value
    if not isinstance(shape, list) or dims is None:
        return None
    rank = max(len(shape), 1)  # (a 0-dim tensor takes dimension 0 and -1, as in PyTorch)
    for dim in dims if isinstance(dims, list) else [dims]:
        if isinstance(dim, int) and not -rank <= dim < rank:
            return (f"dimension {dim} is out of range for {tensor.name} of shape {shape} (expected a dimension "
                    f"from {-rank} to {rank - 1})")
    return None


def _render(rule: Rule, lang: str) -> str:
    spec = SPECS[rule.fn]
    parts = []
    for a in rule.args:
        if isinstance(a, ArgRef):
            parts.append(a.name)
        elif rule.fn == "dtype":
            cpp, py, _ = DTYPES[a.value]
            parts.append(cpp if lang == "cpp" else f"torch.{py}")
        elif isinstance(a.value, bool):
            parts.append(("true" if a.value else "false") if lang == "cpp" else repr(a.value))
        elif isinstance(a.value, list):
            # (words are checked against _WORD: quoting them needs no escapes)
            inner = ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in a.value)
            parts.append(f"{{{inner}}}" if lang == "cpp" else f"[{inner}]")
        else:
            parts.append(repr(a.value))
    template = spec.cpp if lang == "cpp" else spec.py
    names = ", ".join(f'"{p}"' for p in parts)
    return template.format(*parts, names=names, args=", ".join(parts))


def to_cpp(rule: Rule) -> str:
    return _render(rule, "cpp")


def to_python(rule: Rule) -> str:
    return _render(rule, "py")
