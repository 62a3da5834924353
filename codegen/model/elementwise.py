"""`elementwise:` expressions, turned into device kernels.

The expression is Python syntax over the operator's argument names, e.g.
`self * sigmoid(beta * self)`. Tensor arguments stand for one element each
(broadcast against each other); number arguments are constants. It is checked
here and translated to a C++ expression evaluated in the element type's compute
type (float for half and bfloat16), using the functions in
csrc/kernels/elementwise_math.h.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass

from ..errors import did_you_mean

# expression function -> (C++ function, number of arguments)
FUNCTIONS = {
    "abs": ("ew::abs", 1), "exp": ("ew::exp", 1), "expm1": ("ew::expm1", 1), "log": ("ew::log", 1),
    "log1p": ("ew::log1p", 1), "sqrt": ("ew::sqrt", 1), "rsqrt": ("ew::rsqrt", 1), "sin": ("ew::sin", 1),
    "cos": ("ew::cos", 1), "tanh": ("ew::tanh", 1), "erf": ("ew::erf", 1), "sigmoid": ("ew::sigmoid", 1),
    "relu": ("ew::relu", 1), "pow": ("ew::pow", 2), "maximum": ("ew::maximum", 2), "minimum": ("ew::minimum", 2),
    "where": ("ew::where", 3), "clamp": ("ew::clamp", 3),
}
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
NUMBER_TYPES = {"float", "int", "SymInt", "Scalar", "bool"}


class ExpressionError(Exception):
    pass


@dataclass(frozen=True)
class ElementwiseKernel:
    expression: str  # as written in the YAML
    cpp: str  # the C++ expression; tensors by name, numbers as NAME_
    tensors: tuple  # tensor arguments, in schema order
    numbers: tuple  # (name, schema type) of number arguments used
    flops_per_element: int = 1  # its arithmetic, comparisons and calls: what simulated time prices it by


MAX_LENGTH = 2000


def translate(text, arg_types: dict[str, str], allow_nullary: bool = False) -> ElementwiseKernel:
    if not isinstance(text, str):
        raise ExpressionError(f"expected an expression as text, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"the expression is {len(text)} characters long; at most {MAX_LENGTH}")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
        used: set[str] = set()
        cpp = _to_cpp(tree, arg_types, used)
    except SyntaxError as e:
        raise ExpressionError(f"'{text[:80]}' does not parse ({e.msg})") from e
    except (RecursionError, MemoryError) as e:
        raise ExpressionError("the expression nests too deeply") from e
    tensors = tuple(n for n, t in arg_types.items() if t == "Tensor")
    if not tensors and not allow_nullary:
        raise ExpressionError("an elementwise op needs at least one Tensor argument")
    numbers = tuple((n, t) for n, t in arg_types.items() if t in NUMBER_TYPES and n in used)
    operations = sum(isinstance(n, (ast.BinOp, ast.UnaryOp, ast.Call, ast.Compare, ast.BoolOp, ast.IfExp))
                     for n in ast.walk(tree))
    return ElementwiseKernel(str(text).strip(), cpp, tensors, numbers, operations)


def _to_cpp(node, arg_types: dict[str, str], used: set[str]) -> str:
    def sub(n):
        return _to_cpp(n, arg_types, used)

    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            return f"ew::pow({sub(node.left)}, {sub(node.right)})"
        if type(node.op) not in _BINARY:
            raise ExpressionError(f"operator '{ast.unparse(node)}' is not supported; use + - * / **")
        return f"({sub(node.left)} {_BINARY[type(node.op)]} {sub(node.right)})"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return f"({'-' if isinstance(node.op, ast.USub) else '+'}{sub(node.operand)})"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return f"(!{sub(node.operand)})"
    if isinstance(node, ast.Compare):
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
            raise ExpressionError(f"'{ast.unparse(node)}': use one comparison (<, <=, >, >=, ==, !=) at a time")
        return f"({sub(node.left)} {_COMPARE[type(node.ops[0])]} {sub(node.comparators[0])})"
    if isinstance(node, ast.BoolOp):
        op = " && " if isinstance(node.op, ast.And) else " || "
        return "(" + op.join(sub(v) for v in node.values) + ")"
    if isinstance(node, ast.IfExp):
        return f"({sub(node.test)} ? {sub(node.body)} : {sub(node.orelse)})"
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.keywords:
            raise ExpressionError(f"'{ast.unparse(node)}': call functions by name with positional arguments")
        name = node.func.id
        if name not in FUNCTIONS:
            hint = did_you_mean(name, FUNCTIONS)
            raise ExpressionError(f"unknown function '{name}'" + (f"; {hint}" if hint else "") +
                                  f" (available: {', '.join(sorted(FUNCTIONS))})")
        cpp_name, arity = FUNCTIONS[name]
        if len(node.args) != arity:
            raise ExpressionError(f"{name} takes {arity} argument(s), got {len(node.args)}")
        return f"{cpp_name}(" + ", ".join(sub(a) for a in node.args) + ")"
    if isinstance(node, ast.Name):
        if node.id not in arg_types:
            hint = did_you_mean(node.id, arg_types)
            raise ExpressionError(f"'{node.id}' is not an argument of the schema" + (f"; {hint}" if hint else ""))
        schema_type = arg_types[node.id]
        if schema_type != "Tensor" and schema_type not in NUMBER_TYPES:
            raise ExpressionError(f"argument '{node.id}' is {schema_type}; an elementwise expression "
                                  "uses Tensors and numbers only")
        used.add(node.id)
        return node.id if schema_type == "Tensor" else f"{node.id}_"
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        if not math.isfinite(node.value) or abs(node.value) >= 2**53:
            raise ExpressionError(f"the constant {str(node.value)[:30]} is not a finite number below 2^53")
        return f"acc_t({float(node.value)!r})"
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return "true" if node.value else "false"
    raise ExpressionError(f"'{ast.unparse(node)}' is not supported in an elementwise expression")
