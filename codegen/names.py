"""Names and text from the YAML that end up in generated C++ and Python.

Every name is checked to be a plain ASCII identifier that means nothing else in
either language or in the generated code around it; every text (docs) is
checked to be printable, and escaped where it is placed (see emit.py's filters).
"""
from __future__ import annotations

import keyword
import re
import unicodedata

MAX_NAME = 64
MAX_DOC = 2000

# C++ keywords and alternative tokens: a name equal to one does not compile.
CPP_KEYWORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
    compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
    default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
    int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
    reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template
    this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t
    while xor xor_eq
""".split())
# Names the generated code uses next to the schema's arguments: namespaces, the
# derivative formulas' own words (grad, grads, result), the operator's name
# constant. Its local variables start with '_' instead, which no argument name
# does, so ATen's own argument names (dtype, device, target, ...) stay free.
GENERATED_NAMES = frozenset({
    "kOpName", "grad_fn", "grads", "grad", "result", "m", "py",
    "at", "c10", "std", "torch", "simhpu", "ops", "rules", "formulas", "kernels", "adapters", "python",
    "out", "_op", "_rules", "torch_simhpu", "Tensor", "None", "Sequence", "Number",
    "below_autograd",  # the autograd kernel's guard, declared where the arguments are in scope
})
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_RESERVED_NAMESPACES = frozenset({"aten", "prim", "prims", "quantized", "torch", "c10", "at", "std", "cuda"})


def printable_label(value, limit: int = 60, quote: bool = True) -> str:
    """`value` shown safely in a message: printable, short, quoted (or bare, for entry labels)."""
    text = value if isinstance(value, str) else repr(value)
    if not text.isprintable() or len(text) > limit or "'" in text:
        return repr(text[:limit]) + ("..." if len(text) > limit else "")
    return f"'{text}'" if quote and isinstance(value, str) else text


def check_identifier(name, what: str, allow_generated: bool = False) -> tuple[str, str] | None:
    """(problem, fix) if `name` cannot be used as a name in generated code, else None."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        return (f"{what} {printable_label(name)} is not a plain name (ASCII letters, digits and _, starting with "
                "a letter)", f"rename the {what}")
    if len(name) > MAX_NAME:
        return f"{what} '{name[:20]}...' is {len(name)} characters long; at most {MAX_NAME}", f"shorten the {what}"
    if name in CPP_KEYWORDS or keyword.iskeyword(name) or name in keyword.softkwlist:
        return f"{what} '{name}' is a C++ or Python keyword", f"rename the {what}, e.g. '{name}_value'"
    if not allow_generated and name in GENERATED_NAMES:
        return (f"{what} '{name}' collides with a name the generated code uses",
                f"rename the {what}, e.g. 'input_{name.strip('_')}'")
    if name.endswith("_") and not allow_generated:
        return (f"{what} '{name}' ends in '_', which the generated code uses for its own copies of arguments",
                f"rename the {what} without the trailing '_'")
    return None


def check_namespace(value) -> tuple[str, str] | None:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", value):
        return (f"the namespace {printable_label(value)} is not a lower-case name of at most 32 characters",
                "write e.g. 'namespace: npu'")
    if value in _RESERVED_NAMESPACES or value in CPP_KEYWORDS or keyword.iskeyword(value):
        return f"the namespace '{value}' belongs to PyTorch or to C++", "choose a name of your own, e.g. 'npu'"
    return None


def check_text(value, what: str, limit: int = MAX_DOC) -> tuple[str, str] | None:
    """(problem, fix) unless `value` is printable text (line breaks allowed) of at most `limit` characters."""
    if not isinstance(value, str):
        return f"{what} must be text, got {type(value).__name__} {printable_label(value)}", f"quote the {what}"
    if len(value) > limit:
        return f"{what} is {len(value)} characters long; at most {limit}", f"shorten the {what}"
    for position, char in enumerate(value):
        if char in "\n\t":
            continue
        if not char.isprintable() or unicodedata.category(char) in ("Cf", "Co", "Cs"):
            return (f"{what} holds the invisible or control character U+{ord(char):04X} at position {position + 1}",
                    "remove it (copying from a web page or a word processor often brings these along)")
    return None
