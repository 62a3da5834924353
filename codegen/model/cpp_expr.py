"""C++ expressions from the YAML (derivative formulas, composite ops), parsed
and written back out.

The YAML is input, and input can be hostile: nothing of an expression reaches
generated code as written. It is parsed by the grammar below into a tree, every
name and call in the tree is checked, and the C++ is rendered from the tree, so
a `;`, a `}`, a comment, a preprocessor line or a string that closes early has
nowhere to go.

    expression := or ['?' expression ':' expression]
    or         := and {'||' and}              and := compare {'&&' compare}
    compare    := sum {('<'|'<='|'>'|'>='|'=='|'!=') sum}
    sum        := product {('+'|'-') product}  product := unary {('*'|'/') unary}
    unary      := ('-'|'+'|'!') unary | postfix
    postfix    := primary {'.' MEMBER '(' [arguments] ')' | '[' INTEGER ']'}
    primary    := NUMBER | STRING | NAME | NAME '(' [arguments] ')'
                | 'at' '::' NAME '(' [arguments] ')' | 'std' '::' 'get' '<' INTEGER '>' '(' expression ')'
                | '(' expression ')'

A NAME is a value the expression can see (the schema's arguments, and for a
formula grad, grads, result, ...), `true` or `false`. A called NAME is an npu_*
operator, a helper declared in csrc/autograd/formulas.h, or an aten operator
(whose per-operator header is then included). MEMBER is one of the tensor
methods in MEMBERS. Strings are short messages (not_implemented("...")).
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

import torch.utils.cpp_extension

FORMULA_HELPERS_HEADER = os.path.join("csrc", "autograd", "formulas.h")
_ATEN_OPS_DIR = os.path.join(torch.utils.cpp_extension.include_paths()[0], "ATen", "ops")

# Tensor methods an expression may call: shape queries and the reshaping a
# gradient needs. Anything else is a helper in formulas.h or an aten function.
MEMBERS = frozenset({
    "sizes", "sym_sizes", "size", "sym_size", "dim", "numel", "sym_numel", "strides", "sym_strides",
    "scalar_type", "options", "defined", "is_complex", "is_floating_point",
    "sum_to_size", "sum_to_size_symint", "expand", "expand_symint", "expand_as", "reshape", "reshape_symint",
    "view", "view_symint", "unsqueeze", "squeeze", "t", "mT", "transpose", "permute", "contiguous", "clone",
    "conj", "neg", "to", "type_as", "sum", "mean", "masked_fill", "sgn", "abs", "sign", "exp", "log",
    "reciprocal", "pow", "sqrt", "rsqrt", "mul", "div", "add", "sub",
})
_LITERALS = {"true", "false"}
MAX_LENGTH = 4000  # characters
MAX_DEPTH = 40  # nesting of parentheses, calls and unary operators

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<string>"[A-Za-z0-9_ .,:;!?()/+*=<>-]*")
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>::|<=|>=|==|!=|&&|\|\||[-+*/<>!?:.,()\[\]])
""", re.VERBOSE)
_BINARY_LEVELS = (("||",), ("&&",), ("<", "<=", ">", ">=", "==", "!="), ("+", "-"), ("*", "/"))


class ExpressionError(Exception):
    """What is wrong with an expression, in words for the YAML's author."""


@dataclass(frozen=True)
class Scope:
    values: frozenset  # names the expression can see
    npu_ops: frozenset  # npu_* operators it may call
    helpers: frozenset  # functions from csrc/autograd/formulas.h
    lengths: tuple = ()  # (name, length) of the fixed-size arrays it may index (grad_input_mask, grads)
    members: frozenset = MEMBERS  # the tensor methods it may call
    calls: bool = True  # whether it may call functions (operators, helpers) at all
    symint_values: frozenset = frozenset()  # values that are SymInt or SymInt[] (ATen calls then take X_symint)


@dataclass
class Parsed:
    cpp: str  # the canonical C++ text, rendered from the tree
    aten_calls: set  # aten operators it calls (their headers are included)
    npu_calls: set  # npu_* operators it calls


def formula_helpers(path: str) -> set[str]:
    """Function names declared in the formula helpers header (csrc/autograd/formulas.h)."""
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        code = re.sub(r"//.*", "", f.read())
    # A declaration: the end of a return type, then the name and "(".
    return set(re.findall(r"[\w>&*]\s+(\w+)\s*\(", code))


# Tensor methods whose results are SymInts (a call they are passed to takes its X_symint form).
SYMINT_MEMBERS = frozenset({"sym_sizes", "sym_size", "sym_numel", "sym_strides"})
# Tensor methods that take ints (sizes or dimensions): a SymInt passed to one needs its X_symint form.
INT_TAKING_MEMBERS = frozenset({"size", "sym_size", "sum_to_size", "expand", "reshape", "view", "unsqueeze",
                                "squeeze", "transpose", "permute", "sum", "mean"})


@functools.lru_cache(maxsize=None)
def _declared_functions(header: str) -> frozenset:
    """The at:: functions an ATen/ops header declares (a method-only operator's declares none)."""
    try:
        with open(os.path.join(_ATEN_OPS_DIR, f"{header}.h")) as f:
            return frozenset(re.findall(r"^inline [^(]*?\b(\w+)\(", f.read(), re.M))
    except OSError:
        return frozenset()


def aten_header(name: str) -> str | None:
    """The ATen/ops header (without .h) declaring the function at::NAME, or None: ATen names an
    operator's header without its underscores (__and__ is in and.h) and a _symint form in its
    operator's; a header that exists but declares no such function (a method-only operator, or
    C++'s `and`) is not one."""
    if re.fullmatch(r"[a-z_][a-z0-9_]*", name) is None:
        return None
    base = name.removesuffix("_symint")
    for header in dict.fromkeys((base, base.strip("_"))):
        if name in _declared_functions(header):
            return header
    return None


def symint_arguments(schema) -> frozenset:
    """The names of a schema's SymInt and SymInt[] arguments."""
    return frozenset(a.name for a in schema.arguments.flat_all if str(a.type).startswith("SymInt"))


def _declared_instead(name: str) -> str:
    """What ATen's header of that name declares instead (ATen/ops/and.h: __and__), or that it is a method."""
    for header in dict.fromkeys((name, name.strip("_"))):
        if re.fullmatch(r"[a-z_][a-z0-9_]*", header) and os.path.exists(os.path.join(_ATEN_OPS_DIR, f"{header}.h")):
            functions = sorted(f for f in _declared_functions(header) if not f.endswith(("_out", "_outf")))
            return (f" (ATen/ops/{header}.h declares {', '.join(functions)})" if functions
                    else " (ATen has it as a Tensor method only: call it as a method, or use another operator)")
    return ""


def aten_op_exists(name: str) -> bool:
    return aten_header(name) is not None


def parse(text, scope: Scope) -> Parsed:
    """Parse and check an expression; raises ExpressionError saying what and where."""
    if not isinstance(text, str):
        raise ExpressionError(f"expected a C++ expression as text, got {type(text).__name__} {text!r}")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"the expression is {len(text)} characters long; at most {MAX_LENGTH} are allowed "
                              "(move the computation into a helper in " + FORMULA_HELPERS_HEADER + ")")
    parser = _Parser(_tokenize(text), scope)
    cpp = parser.expression()
    if parser.peek() is not None:
        raise ExpressionError(f"unexpected '{parser.peek()}' after a complete expression "
                              "(an expression is one value: no ';', no statements)")
    return Parsed(cpp, parser.aten_calls, parser.npu_calls)


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            bad = text[position]
            what = "a string with characters other than letters, digits and simple punctuation" if bad == '"' \
                else f"the character {bad!r}"
            raise ExpressionError(f"{what} at position {position + 1} is not allowed in an expression")
        if match.lastgroup != "space":
            tokens.append((match.lastgroup, match.group()))
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], scope: Scope):
        self.tokens, self.position, self.scope, self.depth = tokens, 0, scope, 0
        self.aten_calls: set[str] = set()
        self.npu_calls: set[str] = set()
        self.symint = False  # whether the value just parsed involves a SymInt
    def peek(self, ahead: int = 0) -> str | None:
        index = self.position + ahead
        return self.tokens[index][1] if index < len(self.tokens) else None

    def kind(self) -> str | None:
        return self.tokens[self.position][0] if self.position < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None:
            raise ExpressionError("the expression ends early" + (f"; expected '{expected}'" if expected else ""))
        if expected is not None and token != expected:
            raise ExpressionError(f"expected '{expected}', found '{token}'")
        self.position += 1
        return token

    def nested(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionError(f"the expression nests more than {MAX_DEPTH} levels deep "
                                  "(move the computation into a helper in " + FORMULA_HELPERS_HEADER + ")")

    def expression(self) -> str:
        self.nested()
        condition = self.binary(0)
        if self.peek() == "?":
            self.take()
            then = self.expression()
            self.take(":")
            otherwise = self.expression()
            condition = f"{condition} ? {then} : {otherwise}"
        self.depth -= 1
        return condition

    def binary(self, level: int) -> str:
        # Iterative within a level, so a long chain of terms does not recurse.
        if level == len(_BINARY_LEVELS):
            return self.unary()
        text = self.binary(level + 1)
        while self.peek() in _BINARY_LEVELS[level] and self.kind() == "op":
            operator = self.take()
            right = self.binary(level + 1)
            for operand in (text, right):
                if operand.startswith('"'):
                    raise ExpressionError(f"the string {operand} is an operand of '{operator}'; a string can "
                                          "only be passed to a function")
            text = f"{text} {operator} {right}"
        return text

    def unary(self) -> str:
        if self.peek() in ("-", "+", "!") and self.kind() == "op":
            operator = self.take()
            self.nested()
            operand = self.unary()
            self.depth -= 1
            return operator + operand
        return self.postfix()

    def postfix(self) -> str:
        text = self.primary()
        while self.peek() in (".", "["):
            if self.take() == ".":
                member = self.take()
                if member not in self.scope.members:
                    raise ExpressionError(f"'.{member}' is not a tensor method an expression may call "
                                          f"(allowed: {', '.join(sorted(self.scope.members))})")
                receiver_symint, self.symint = self.symint, False
                arguments = self.arguments()
                if self.symint:
                    member = self._symint_member(member)
                self.symint = receiver_symint or member in SYMINT_MEMBERS
                text = f"{text}.{member}({arguments})"
            else:
                index = self.integer("an index")
                self.take("]")
                length = dict(self.scope.lengths).get(text)
                if length is not None and int(index) >= length:
                    raise ExpressionError(f"'{text}[{index}]' is out of range: here '{text}' has {length} "
                                          f"element(s), indexed from 0")
                text = f"{text}[{index}]"
        return text

    def _symint_member(self, member: str) -> str:
        """The method to call when a SymInt is passed to `member`: its X_symint form, as for
        at:: functions (Tensor::expand takes ints; expand_symint SymInts)."""
        if member.endswith("_symint") or member not in INT_TAKING_MEMBERS:
            return member  # (the others take Scalars or tensors, which a SymInt converts to)
        if f"{member}_symint" in self.scope.members:
            return f"{member}_symint"
        raise ExpressionError(f"a SymInt is passed to '.{member}()', which takes ints (there is no "
                              f".{member}_symint): declare the argument int, not SymInt")

    def integer(self, what: str) -> str:
        kind, token = self.kind(), self.peek()
        if kind != "number" or not token.isdigit() or len(token) > 3:
            raise ExpressionError(f"expected {what} (a small whole number), found '{token}'")
        self.take()
        return token

    def arguments(self) -> str:
        """The arguments of a call, after its name: '(' [expression {',' expression}] ')'."""
        self.take("(")
        self.nested()
        items = []
        if self.peek() != ")":
            items.append(self.expression())
            while self.peek() == ",":
                self.take()
                items.append(self.expression())
        self.take(")")
        self.depth -= 1
        return ", ".join(items)

    def primary(self) -> str:
        kind, token = self.kind(), self.peek()
        if token is None:
            raise ExpressionError("the expression ends early; expected a value")
        if kind == "number":
            self.take()
            if not re.fullmatch(r"\d{1,18}(\.\d*)?([eE][+-]?\d{1,3})?|\.\d+([eE][+-]?\d{1,3})?", token):
                raise ExpressionError(f"the number '{token}' is too long")
            return token
        if kind == "string" and self.scope.calls:
            self.take()
            return token
        if token == "(":
            self.take()
            inner = self.expression()
            self.take(")")
            return f"({inner})"
        if kind != "name":
            raise ExpressionError(f"expected a value, found '{token}'")
        self.take()
        if not self.scope.calls and self.peek() in ("::", "("):
            raise ExpressionError(f"calls '{token}', but this expression may not call functions: it may only "
                                  f"combine numbers and sizes ({', '.join(sorted(self.scope.members))})")
        if self.peek() == "::":
            return self.qualified(token)
        if self.peek() == "(":
            callee = self.callee(token)
            if callee is None:
                return self.aten_call(token, qualified=False)
            outer = self.symint  # what an npu_* operator or a helper is passed stays inside its call
            arguments = self.arguments()
            self.symint = outer
            return f"{callee}({arguments})"
        if token in self.scope.values or token in _LITERALS:
            self.symint = self.symint or token in self.scope.symint_values
            return token
        known = ", ".join(sorted(self.scope.values))
        raise ExpressionError(f"uses '{token}', which is not defined here (known: {known})")

    def qualified(self, head: str) -> str:
        self.take("::")
        name = self.take()
        if head == "at" and self.peek() == "(":
            if not aten_op_exists(name):
                raise ExpressionError(f"calls 'at::{name}', which is not an aten operator function" + _declared_instead(name))
            return self.aten_call(name, qualified=True)
        if head == "std" and name == "get":
            self.take("<")
            index = self.integer("a tuple index")
            self.take(">")
            return f"std::get<{index}>({self.arguments()})"
        raise ExpressionError(f"'{head}::{name}' is not allowed; qualified names are limited to "
                              "at::OPERATOR(...) and std::get<N>(...)")

    def aten_call(self, name: str, qualified: bool) -> str:
        """at::NAME(arguments), or at::NAME_symint(...) when a SymInt is passed: ATen's plain form takes
        int64_t where the schema says SymInt."""
        outer, self.symint = self.symint, False
        arguments = self.arguments()
        if self.symint:
            if f"{name}_symint" not in _declared_functions(aten_header(name)):
                raise ExpressionError(f"passes a SymInt to 'at::{name}', which takes plain integers (there is no "
                                      f"at::{name}_symint): declare the argument int, not SymInt")
            name = f"{name}_symint"
        self.symint = outer
        self.aten_calls.add(name)
        return f"{'at::' if qualified else ''}{name}({arguments})"

    def callee(self, name: str) -> str | None:
        if name in self.scope.npu_ops:
            self.npu_calls.add(name)
            return name
        if name in self.scope.helpers:
            return name
        if aten_op_exists(name):
            return None  # an aten operator: primary renders the call (aten_call)
        raise ExpressionError(f"calls '{name}', which is neither an npu_* operator, a helper in "
                              f"{FORMULA_HELPERS_HEADER}, nor an aten operator")
