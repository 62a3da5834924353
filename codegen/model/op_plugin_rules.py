"""op-plugin's output rules (a gen_opapi block's `size:` and `dtype:`), read and evaluated.

The rules are C++ expressions over the schema's arguments, calling op-plugin's output-size helpers
(`broadcast_ops_npu_output_size`, `reduce_ops_npu_output_size`, ...). Here they are parsed by the
grammar below and evaluated in Python for given arguments, the helpers implemented by their
documented behaviour, so a rule can be held against what ATen computes for the same call
(codegen/op_plugin/check.py). Nothing of a rule is ever run as code: a name the evaluator does not
know makes the rule unreadable, which is said, not guessed.

    rule     := or ['?' rule ':' rule]
    or       := and {'||' and}            and := compare {'&&' compare}
    compare  := sum {('=='|'!='|'<'|'<='|'>'|'>=') sum}
    sum      := product {('+'|'-') product}   product := unary {('*'|'/') unary}
    unary    := ('-'|'!') unary | postfix
    postfix  := primary {'.' NAME '(' [arguments] ')' | '[' rule ']'}
    primary  := NUMBER | NAME ['<' ... '>'] ['(' [arguments] ')' | '{' [arguments] '}']
              | '{' [arguments] '}' | '(' rule ')'         (NAME: a::b::c, qualified)
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

MAX_LENGTH = 2000
_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>\d+(?:\.\d+)?)
  | (?P<name>[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)
  | (?P<op>==|!=|<=|>=|&&|\|\||[-+*/<>!?:.,()\[\]{}])
""", re.VERBOSE)


class RuleUnreadable(Exception):
    """A rule the evaluator cannot read or evaluate: what, in words."""


@dataclass(frozen=True)
class Tensor:
    """What a rule can ask of a tensor argument: its sizes and its dtype."""
    sizes: tuple[int, ...]
    dtype: torch.dtype


def tokens(text: str) -> list[tuple[str, str]]:
    if len(text) > MAX_LENGTH:
        raise RuleUnreadable(f"longer than {MAX_LENGTH} characters")
    out, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise RuleUnreadable(f"cannot read {text[pos:pos + 10]!r}")
        pos = match.end()
        if match.lastgroup != "space":
            out.append((match.lastgroup, match.group()))
    return out


class _Parser:
    """Parses a rule into nested tuples: ('num', v), ('name', n), ('call', n, args), ('list', items),
    ('method', obj, n, args), ('index', obj, i), ('unary', op, x), ('binary', op, a, b), ('if', c, a, b)."""

    def __init__(self, text: str):
        self.toks, self.i = tokens(text), 0

    def peek(self, value=None):
        if self.i < len(self.toks):
            return self.toks[self.i][1] if value is None else self.toks[self.i][1] == value
        return None if value is None else False

    def take(self, value=None):
        if self.i >= len(self.toks) or (value is not None and self.toks[self.i][1] != value):
            raise RuleUnreadable(f"expected {value or 'more'} at token {self.i}")
        self.i += 1
        return self.toks[self.i - 1]

    def parse(self):
        tree = self.rule()
        if self.i != len(self.toks):
            raise RuleUnreadable(f"unexpected {self.peek()!r}")
        return tree

    def rule(self):
        cond = self.binary(0)
        if self.peek("?"):
            self.take("?")
            then = self.rule()
            self.take(":")
            return ("if", cond, then, self.rule())
        return cond

    LEVELS = (("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">="), ("+", "-"), ("*", "/"))

    def binary(self, level):
        if level == len(self.LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self.LEVELS[level]:
            op = self.take()[1]
            left = ("binary", op, left, self.binary(level + 1))
        return left

    def unary(self):
        if self.peek() in ("-", "!"):
            return ("unary", self.take()[1], self.unary())
        return self.postfix()

    def postfix(self):
        node = self.primary()
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                name = self.take()[1]
                node = ("method", node, name, self.arguments("(", ")"))
            else:
                node = ("index", node, self.rule())
                self.take("]")
        return node

    def arguments(self, open_, close):
        self.take(open_)
        items = []
        while not self.peek(close):
            items.append(self.rule())
            if not self.peek(close):
                self.take(",")
        self.take(close)
        return tuple(items)

    def primary(self):
        kind, text = self.take()
        if kind == "number":
            return ("num", float(text) if "." in text else int(text))
        if text == "(":
            node = self.rule()
            self.take(")")
            return node
        if text == "{":
            self.i -= 1
            return ("list", self.arguments("{", "}"))
        if kind != "name":
            raise RuleUnreadable(f"unexpected {text!r}")
        if self.peek("<") and self._template_follows():
            depth = 0
            while True:  # template arguments (SmallVector<int64_t, N>, ArrayRef<int64_t>) say nothing a rule needs
                tok = self.take()[1]
                depth += {"<": 1, ">": -1}.get(tok, 0)
                if depth == 0:
                    break
        if self.peek("("):
            return ("call", text, self.arguments("(", ")"))
        if self.peek("{"):
            return ("list", self.arguments("{", "}"))
        return ("name", text)

    def _template_follows(self) -> bool:
        """A '<' after a name opens template arguments when a matching '>' is followed by '(' or '{'."""
        depth, j = 0, self.i
        while j < len(self.toks):
            tok = self.toks[j][1]
            depth += {"<": 1, ">": -1}.get(tok, 0)
            if depth == 0:
                return j + 1 < len(self.toks) and self.toks[j + 1][1] in ("(", "{")
            if tok in ("?", ":", "&&", "||", ";"):
                return False
            j += 1
        return False


def parse(text: str):
    """The rule's tree; RuleUnreadable when it does not parse or calls a helper not implemented here."""
    tree = _Parser(str(text)).parse()
    _check_calls(tree)
    return tree


def _check_calls(tree) -> None:
    if tree[0] == "call" and _unqualified(tree[1]) not in HELPERS:
        raise RuleUnreadable(f"'{tree[1]}' is not an output-size helper simhpu knows")
    for child in tree[1:]:
        if isinstance(child, tuple) and child and isinstance(child[0], str) and child[0] in _NODES:
            _check_calls(child)
        elif isinstance(child, tuple):
            for item in child:
                if isinstance(item, tuple) and item and item[0] in _NODES:
                    _check_calls(item)


_NODES = {"num", "name", "call", "list", "method", "index", "unary", "binary", "if"}


# -- evaluation ---------------------------------------------------------------------------

_DTYPES = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16, "BFloat16": torch.bfloat16,
           "Long": torch.int64, "Int": torch.int32, "Short": torch.int16, "Char": torch.int8, "Byte": torch.uint8,
           "Bool": torch.bool, "ComplexFloat": torch.complex64, "ComplexDouble": torch.complex128}
_REDUCTIONS = {"None": 0, "Mean": 1, "Sum": 2}


def _unqualified(name: str) -> str:
    return name.split("::")[-1]


def _constant(name: str):
    short = _unqualified(name)
    if short in ("true", "false"):
        return short == "true"
    if short.startswith("k") and short[1:] in _DTYPES:
        return _DTYPES[short[1:]]
    if "ScalarType::" in name and short in _DTYPES:
        return _DTYPES[short]
    if "Reduction::" in name and short in _REDUCTIONS:
        return _REDUCTIONS[short]
    raise RuleUnreadable(f"unknown name '{name}'")


def _sizes(value) -> tuple[int, ...]:
    if isinstance(value, Tensor):
        return value.sizes
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    if isinstance(value, int):
        return (value,)
    raise RuleUnreadable(f"expected sizes, got {type(value).__name__}")


def _broadcast(a, b):
    return tuple(torch.broadcast_shapes(_sizes(a), _sizes(b)))


def _dims(value, rank: int) -> list[int]:
    if value is None or value == ():
        return list(range(rank))
    dims = [value] if isinstance(value, int) else list(value)
    return sorted({d % rank if rank else 0 for d in dims})


def _reduce(tensor, dims, keepdim):
    sizes = _sizes(tensor)
    dims = _dims(dims, len(sizes))
    return tuple(1 if i in dims else s for i, s in enumerate(sizes) if keepdim or i not in dims)


def _result_type(*args):
    items = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
    values = [torch.empty((), dtype=v.dtype) if isinstance(v, Tensor) and not v.sizes
              else torch.empty((1,) * len(v.sizes), dtype=v.dtype) if isinstance(v, Tensor) else v for v in items]
    return torch.result_type(*values) if len(values) == 2 else _fold_result_type(values)


def _fold_result_type(values):
    dtype = values[0].dtype if isinstance(values[0], torch.Tensor) else torch.tensor(values[0]).dtype
    for v in values[1:]:
        dtype = torch.promote_types(dtype, v.dtype if isinstance(v, torch.Tensor) else torch.tensor(v).dtype)
    return dtype


def _is_integral(dtype, include_bool):
    return (not dtype.is_floating_point and not dtype.is_complex) and (include_bool or dtype != torch.bool)


_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}
_COMPLEX_OF = {v: k for k, v in _REAL_OF.items()}


def _angle_dtype(t):
    dtype = t.dtype if isinstance(t, Tensor) else t
    return _REAL_OF.get(dtype, dtype if dtype.is_floating_point else torch.float32)


def _repeat(t, repeats):
    sizes, repeats = _sizes(t), tuple(repeats)
    padded = (1,) * (len(repeats) - len(sizes)) + sizes
    return tuple(s * r for s, r in zip(padded, repeats))


def _meta(value):
    """A tensor argument as a meta tensor (its sizes and dtype, no data); anything else as it is."""
    return torch.empty(value.sizes, dtype=value.dtype, device="meta") if isinstance(value, Tensor) else value


def _spatial(t, output_size, dims: int):
    """Pooling and unpooling: the leading (batch, channel) sizes, then the given spatial sizes."""
    return _sizes(t)[:-dims] + tuple(int(v) for v in output_size)


def _padded(t, padding):
    """reflection/replication padding: (left, right) of the last dimension, then of the one before, ..."""
    sizes, padding = list(_sizes(t)), list(padding)
    for i in range(len(padding) // 2):
        sizes[-1 - i] += padding[2 * i] + padding[2 * i + 1]
    return tuple(sizes)


def _cdist(x1, x2):
    a, b = _sizes(x1), _sizes(x2)
    return tuple(torch.broadcast_shapes(a[:-2], b[:-2])) + (a[-2], b[-2])


def _col2im(t, output_size, kernel_size):
    sizes, blocks = _sizes(t), 1
    for k in kernel_size:
        blocks *= k
    return sizes[:-2] + (sizes[-2] // blocks,) + tuple(output_size)


# op-plugin's output-size and dtype helpers, by the behaviour of the ATen operators they serve.
HELPERS = {
    "broadcast_ops_npu_output_size": _broadcast,
    "reduce_ops_npu_output_size": lambda t, dims, keepdim: _reduce(t, dims, keepdim),
    "input_same_output_size": lambda t: _sizes(t),
    "get_dimlist_for_tensor": lambda t: tuple(range(len(_sizes(t)))),
    "glu_npu_output_size": lambda t, dim: tuple(s // 2 if i == dim % len(_sizes(t)) else s
                                                 for i, s in enumerate(_sizes(t))),
    "stack_output_size": lambda ts, dim: (lambda s: s[:dim % (len(s) + 1)] + (len(ts),) + s[dim % (len(s) + 1):])(
        _sizes(ts[0])),
    "clamp_npu_output_size": lambda t, lo, hi: _broadcast(_broadcast(t, lo if lo is not None else ()),
                                                          hi if hi is not None else ()),
    "addr_npu_output_size": lambda t, v1, v2: _broadcast(t, (_sizes(v1)[0], _sizes(v2)[0])),
    "repeat_npu_output_size": _repeat,
    "isIntegralType": _is_integral,
    "isFloatingType": lambda dtype: dtype.is_floating_point,
    "abs_out_dtype": lambda t: _REAL_OF.get(t.dtype, t.dtype),
    "angle_out_dtype": _angle_dtype,
    "polar_out_dtype": lambda magnitude, angle: _COMPLEX_OF.get(magnitude.dtype, magnitude.dtype),
    "result_type": _result_type,
    "typeMetaToScalarType": lambda d: d,
    "ArrayRef": lambda *a: (),
    "SmallVector": lambda *a: (),
    "promoteTypes": torch.promote_types,
    "clamp_out_dtype": lambda t, lo, hi: torch.clamp(_meta(t), _meta(lo), _meta(hi)).dtype,
    "clamp_scalar_out_dtype": lambda t, lo, hi: torch.clamp(_meta(t), lo, hi).dtype,
    "max_pool2d_out_size": lambda t, output_size: _spatial(t, output_size, 2),
    "max_pool3d_output_size": lambda t, output_size: _spatial(t, output_size, 3),
    "adaptive_avg_pool3d_npu_output_size": lambda t, output_size: _spatial(t, output_size, 3),
    "cdist_npu_output_size": _cdist,
    "im2col_backward_npu_output_size": _col2im,
    "isclose_output_size": lambda a, b, *rest: _broadcast(a, b),
    **{f"{kind}_pad{n}d_npu_out_size": _padded for kind in ("reflection", "replication") for n in (1, 2, 3)},
    # The CANN toolkit's version: simhpu stands for the newest, so a rule's newer branch is taken.
    "is_gte_cann_version_820rc1": lambda: True,
}


def call_values(names, args, kwargs, defaults: dict | None = None) -> dict:
    """A call as the rules see it: each argument by its schema name (the positional ones in `names`'
    order, then the keywords, then `defaults`), a tensor as its sizes and dtype (Tensor), a list as
    a tuple of such values. What binds op_db's calls (check.py) and the device's (torch_simhpu)."""
    values = dict(defaults or {})
    values.update(zip(names, args))
    values.update(kwargs)
    return {name: _rule_value(value) for name, value in values.items()}


def _rule_value(value):
    if isinstance(value, torch.Tensor):
        return Tensor(tuple(value.shape), value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(_rule_value(v) for v in value)
    return value


def evaluate(tree, values: dict):
    kind = tree[0]
    if kind == "num":
        return tree[1]
    if kind == "name":
        return values[tree[1]] if tree[1] in values else _constant(tree[1])
    if kind == "list":
        return tuple(evaluate(t, values) for t in tree[1])
    if kind == "if":
        return evaluate(tree[2] if evaluate(tree[1], values) else tree[3], values)
    if kind == "unary":
        x = evaluate(tree[2], values)
        return -x if tree[1] == "-" else not x
    if kind == "binary":
        op, a = tree[1], evaluate(tree[2], values)
        if op == "&&":
            return bool(a) and bool(evaluate(tree[3], values))
        if op == "||":
            return bool(a) or bool(evaluate(tree[3], values))
        b = evaluate(tree[3], values)
        return {"==": lambda: a == b, "!=": lambda: a != b, "<": lambda: a < b, "<=": lambda: a <= b,
                ">": lambda: a > b, ">=": lambda: a >= b, "+": lambda: a + b, "-": lambda: a - b,
                "*": lambda: a * b, "/": lambda: a // b}[op]()
    if kind == "index":
        return evaluate(tree[1], values)[evaluate(tree[2], values)]
    if kind == "method":
        obj, name, args = evaluate(tree[1], values), tree[2], [evaluate(a, values) for a in tree[3]]
        return _method(obj, name, args)
    if kind == "call":
        name = _unqualified(tree[1])
        if name not in HELPERS:
            raise RuleUnreadable(f"'{tree[1]}' is not an output-size helper simhpu knows")
        return HELPERS[name](*(evaluate(a, values) for a in tree[2]))
    raise RuleUnreadable(f"cannot evaluate {kind}")


def _method(obj, name, args):
    if isinstance(obj, Tensor):
        if name in ("sizes", "sym_sizes"):
            return obj.sizes
        if name in ("size", "sym_size"):
            return obj.sizes[args[0]]
        if name in ("scalar_type", "dtype"):
            return obj.dtype
        if name == "dim":
            return len(obj.sizes)
        if name == "numel":
            n = 1
            for s in obj.sizes:
                n *= s
            return n
    if name == "value_or":
        return args[0] if obj is None else obj
    if name == "value" and obj is not None:
        return obj
    if name == "has_value":
        return obj is not None
    if name == "size" and isinstance(obj, (list, tuple)):
        return len(obj)
    raise RuleUnreadable(f"'.{name}()' of a {type(obj).__name__} is not known here")
