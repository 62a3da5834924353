"""`reference:` and `samples:` of custom entries: what an operator's generated
tests compare it with, and inputs they should try.

The reference is a Python expression over the operator's arguments in terms of
torch, e.g. `self * torch.sigmoid(beta * self)` (a tuple for several outputs).
It is written into generated Python, so it is checked here to be nothing but
that: names are the arguments and `torch`, no attribute starts with `_`, and no
lambda, comprehension, assignment or string of code hides in it.
"""
from __future__ import annotations

import ast

MAX_LENGTH = 2000
_ALLOWED_NODES = (
    ast.Expression, ast.Expr, ast.Name, ast.Load, ast.Attribute, ast.Call, ast.keyword, ast.Constant, ast.Tuple,
    ast.List, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.Subscript, ast.Slice,
    ast.operator, ast.unaryop, ast.cmpop, ast.boolop,
)


def check_reference(text, arg_names) -> tuple[str, str] | None:
    """None if `text` is a reference expression over `arg_names`, else (problem, fix)."""
    fix = "write one Python expression over the arguments and torch, e.g. self * torch.sigmoid(beta * self)"
    if not isinstance(text, str):
        return f"expected an expression as text, got {type(text).__name__}", fix
    if len(text) > MAX_LENGTH:
        return f"the expression is {len(text)} characters long; at most {MAX_LENGTH}", fix
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        return f"'{text[:80]}' does not parse ({e.msg})", fix
    except (RecursionError, MemoryError):
        return "the expression nests too deeply", fix
    allowed = set(arg_names) | {"torch"}
    nodes = list(ast.walk(tree))
    for node in nodes:  # the shape of the expression first, then what it names, then its constants
        if not isinstance(node, _ALLOWED_NODES):
            return f"'{type(node).__name__}' is not allowed in a reference ({ast.unparse(node)[:60]})", fix
    for node in nodes:
        if isinstance(node, ast.Name) and node.id not in allowed:
            return (f"the expression names '{node.id}', which is neither an argument nor torch",
                    f"use the arguments ({', '.join(arg_names)}) and torch")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            return f"the attribute '{node.attr}' starts with '_'", "use torch's public functions"
    for node in nodes:
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, bool, type(None))):
            return f"the constant {node.value!r} is not a number", "write numbers only"
    return None


def check_samples(samples, arg_types: dict[str, str]) -> tuple[str, str] | None:
    """None if `samples` is a list of {argument: shape or value}, else (problem, fix)."""
    fix = "e.g. samples: [{x: [2, 8], gamma: [8], eps: 0.001}]"
    if not isinstance(samples, list) or not samples:
        return "expected a list of samples, each a mapping from argument to shape (a Tensor) or value", fix
    for sample in samples:
        if not isinstance(sample, dict):
            return f"expected a mapping, got {type(sample).__name__}", fix
        for name, value in sample.items():
            if name not in arg_types:
                return f"'{name}' is not an argument of the operator", f"use {', '.join(arg_types)}"
            kind = arg_types[name]
            if kind.startswith("Tensor") and kind != "Tensor[]":
                if not (isinstance(value, list) and len(value) <= 8 and
                        all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 64 for n in value)):
                    return f"'{name}' is a Tensor: give its shape, a list of at most 8 sizes from 0 to 64", fix
            elif not isinstance(value, (int, float, bool, str, list, type(None))) or (
                    isinstance(value, list) and not all(isinstance(v, int) for v in value)) or (
                    isinstance(value, str) and not value.replace("_", "").isalnum()):
                return f"'{name}' has a value samples cannot give ({type(value).__name__})", fix
    return None
