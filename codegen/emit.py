"""Renders the validated model through the jinja2 templates in templates/.

Files are rewritten only when their content changes, so ninja recompiles just
the translation units an edit touched; files of operators that no longer exist
are removed.
"""
from __future__ import annotations

import os
import tempfile

import jinja2

from .dest.api import op_view
from .model.cpp_expr import aten_header
from .dest.cpp_lines import wrap_cpp
from .dest import adapters, autograd, kernels, op_plugin, python, registrations, stubs
from .model.operators import DIALECT_IMPLEMENTATIONS, Project

TEMPLATES = os.path.join(os.path.dirname(__file__), "templates")
TEMP_PREFIX = ".codegen-"  # write_file's temporary files


def cpp_string(text: str, indent: str = "      ", width: int = 72) -> str:
    """`text` as C++ string literals, one per line (adjacent literals join), a
    long line split at spaces into pieces of about `width`: quotes,
    backslashes and everything outside printable ASCII escaped, so no text
    from the YAML can end the literal."""
    def escape(char: str) -> str:
        if char in '"\\':
            return "\\" + char
        if " " <= char <= "~":
            return char
        return "".join(f"\\{byte:03o}" for byte in char.encode("utf-8"))  # octal: always 3 digits
    pieces = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        chunks = _split_at_spaces(line, width)
        for j, chunk in enumerate(chunks):
            newline = "\\n" if i < len(lines) - 1 and j == len(chunks) - 1 else ""
            pieces.append('"' + "".join(escape(c) for c in chunk) + newline + '"')
    return ("\n" + indent).join(pieces)


def _split_at_spaces(line: str, width: int) -> list[str]:
    """`line` in pieces of at most about `width` characters, each ending at a space."""
    pieces = []
    while len(line) > width:
        cut = line.rfind(" ", 0, width)
        if cut <= 0:
            break
        pieces.append(line[:cut + 1])
        line = line[cut + 1:]
    return pieces + [line]


def py_docstring(text: str) -> str:
    """`text` safe inside a triple-quoted Python string."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n" or char.isprintable():
            out.append(char)
        else:
            out.append(f"\\u{ord(char):04x}" if ord(char) < 0x10000 else f"\\U{ord(char):08x}")
    return "".join(out)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["cpp_string"] = cpp_string
    env.filters["py_docstring"] = py_docstring
    env.filters["aten_header"] = aten_header
    return env


def render(project: Project) -> dict[str, str]:
    """Every generated file of a loaded project (project.load_project), relative path -> content."""
    env = _environment()
    env.globals["package"] = project.target.package
    env.globals["namespace"] = project.namespace
    dialect = op_plugin.dialect_ops(project.ops)
    views = [op_view(op, project.namespace) for op in project.ops if op.implementation not in DIALECT_IMPLEMENTATIONS]
    env.globals["op_plugin"] = op_plugin.python_view(dialect)
    files = op_plugin.render(env, dialect, project.namespace)
    files.update(kernels.render(env, views, project.kernel_names))
    files.update(adapters.render(env, views, project.adapter_names))
    files.update(autograd.render(env, views))
    files.update(registrations.render(env, views))
    files.update(python.render(env, project, views))
    files.update(stubs.render(env, project.stubs))
    return {path: wrap_cpp(text) if path.endswith((".cpp", ".h")) else text for path, text in files.items()}


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def write_file(path: str, content: str) -> bool:
    """Write `path` atomically if its content differs; True if it changed. A
    temporary file of its own per call, so concurrent runs never share one."""
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == content:
                return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=TEMP_PREFIX, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
        # mkstemp creates 0600; a generated file is as readable as any file written here.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return True


def write_tree(out_dir: str, files: dict[str, str]) -> list[str]:
    """Write `files` under out_dir, touching only changed ones; returns what changed."""
    changed = []
    for rel, content in files.items():
        if write_file(os.path.join(out_dir, rel), content):
            changed.append(rel)
    # Sources of operators that no longer exist (or moved) must not be compiled.
    for top in ("csrc", "include"):
        for folder, _, names in os.walk(os.path.join(out_dir, top)):
            for name in names:
                rel = os.path.relpath(os.path.join(folder, name), out_dir).replace(os.sep, "/")
                # .codegen-*.tmp: a concurrent run's file on its way in (see write_file).
                if rel not in files and not name.startswith(TEMP_PREFIX):
                    try:
                        os.remove(os.path.join(folder, name))
                    except FileNotFoundError:
                        continue  # a concurrent run removed it first
                    changed.append(f"{rel} (removed)")
    return changed
