"""Names used by C++ expressions in the YAML (derivative formulas, composite ops).

Every function a formula calls must be one of: a custom npu_* operator, a
helper declared in csrc/autograd/formulas.h, or an aten operator (whose
per-operator header is then included). Every plain name must be a value the
formula can see. Anything else is reported before the compiler runs.
"""
from __future__ import annotations

import os
import re

import torch.utils.cpp_extension

FORMULA_HELPERS_HEADER = os.path.join("csrc", "autograd", "formulas.h")
_ATEN_OPS_DIR = os.path.join(torch.utils.cpp_extension.include_paths()[0], "ATen", "ops")

# A name right before "(" that is not a member (.x) or qualified (::x).
_CALL = re.compile(r"(?<![\w.:>])([A-Za-z_]\w*)\s*\(")
_QUALIFIED_ATEN_CALL = re.compile(r"\bat::([A-Za-z_]\w*)\s*\(")
# A plain name that is not a call, a member, qualified, or a template/namespace head.
_NAME = re.compile(r"(?<![\w.:>'\"])([A-Za-z_]\w*)\b(?!\s*[(:<])")
_CPP_WORDS = {"true", "false", "nullptr", "auto", "const", "static_cast", "int64_t", "double", "bool",
              "std", "at", "c10", "sizeof", "return", "if", "else"}


def formula_helpers(root: str) -> set[str]:
    """Function names declared in csrc/autograd/formulas.h."""
    path = os.path.join(root, FORMULA_HELPERS_HEADER)
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        code = re.sub(r"//.*", "", f.read())
    # A declaration: the end of a return type, then the name and "(".
    return set(re.findall(r"[\w>&*]\s+(\w+)\s*\(", code))


def aten_op_exists(name: str) -> bool:
    return os.path.exists(os.path.join(_ATEN_OPS_DIR, f"{name}.h"))


def resolve(expression: str, values: set[str], npu_ops: set[str], helpers: set[str]):
    """(aten functions called, problems) for a C++ expression from the YAML."""
    aten, problems = set(), []
    text = re.sub(r'"[^"]*"', '""', expression)
    for name in _CALL.findall(text):
        if name in npu_ops or name in helpers or name in _CPP_WORDS:
            continue
        if aten_op_exists(name):
            aten.add(name)
        else:
            problems.append(f"calls '{name}', which is neither an npu_* operator, a helper in "
                            f"{FORMULA_HELPERS_HEADER}, nor an aten operator")
    for name in _QUALIFIED_ATEN_CALL.findall(text):
        if aten_op_exists(name):
            aten.add(name)
        else:
            problems.append(f"calls 'at::{name}', which is not an aten operator")
    for name in _NAME.findall(text):
        if name not in values and name not in _CPP_WORDS and not re.fullmatch(r"\d\w*", name):
            problems.append(f"uses '{name}', which is not defined here (known: {', '.join(sorted(values))})")
    return aten, problems
