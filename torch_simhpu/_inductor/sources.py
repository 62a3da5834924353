"""Which line of the user's program each launch of a compiled graph stands for.

The generated wrapper marks each launching line with the source line of the
operators it runs (from Inductor's stack traces of the FX nodes). When the
module loads, it tells the runtime: a kernel launched from that wrapper line is
then reported, in failure messages and traces, at the user's line instead.
"""
from __future__ import annotations

import ast
import os
import re

import torch

from torch_simhpu import _C

MARKER = "# simhpu source: "
_FRAME = re.compile(r'File "([^"\n]+)", line (\d+)')
_LIBRARY_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch,))


def source_of(ir_nodes) -> tuple[str, int] | None:
    """The innermost frame outside torch of the first stack trace among `ir_nodes`."""
    for node in ir_nodes:
        if node is None:
            continue
        for trace in node.get_stack_traces():
            frames = [(file, int(line)) for file, line in _FRAME.findall(trace)]
            user = [f for f in frames if not f[0].startswith(_LIBRARY_DIRS)]
            if user or frames:
                return (user or frames)[-1]
    return None


def marker(source: tuple[str, int]) -> str:
    """A comment line naming `source`; repr keeps any file name on one line."""
    return MARKER + repr(source)


def register(wrapper_path: str) -> None:
    """Called by a generated wrapper module as it loads: map its marked lines."""
    lines: dict[int, tuple[str, int]] = {}
    pending = None
    with open(wrapper_path) as f:
        for number, text in enumerate(f, 1):
            stripped = text.strip()
            if stripped.startswith(MARKER):
                pending = ast.literal_eval(stripped[len(MARKER):])
            elif pending is not None and stripped and not stripped.startswith("#"):
                lines[number] = pending
                pending = None
    if lines:
        _C._map_compiled_sources(wrapper_path, lines)
