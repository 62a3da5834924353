"""What a run of codegen builds: the backend itself, or an operator package
outside it that links against the installed torch_simhpu."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

_SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Target:
    package: str  # the Python package the operators are exposed from
    in_tree: bool  # the backend: official ops allowed, its own module init and stub
    include_dir: str  # where csrc/autograd/formulas.h and the other SDK headers are
    module: str = "_C"  # the extension module inside the package that holds the bindings

    @property
    def formula_helpers_header(self) -> str:
        return os.path.join(self.include_dir, "autograd", "formulas.h")


def backend(root: str) -> Target:
    return Target(package="torch_simhpu", in_tree=True, include_dir=os.path.join(root, "csrc"))


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def package(extension: str) -> Target:
    """The operator package whose extension module is `extension` (e.g.
    'my_ops._C': the package my_ops), built against torch_simhpu's installed
    headers (or this source tree's)."""
    if not _DOTTED.fullmatch(extension or "") or "." not in extension:
        raise ValueError(f"expected the extension module's full name inside its package, such as 'my_ops._C', "
                         f"got {extension!r}")
    name, module = extension.rsplit(".", 1)
    installed = os.path.join(_SOURCE_ROOT, "include")  # torch_simhpu/codegen -> torch_simhpu/include
    source = os.path.join(_SOURCE_ROOT, "csrc")  # codegen/ in the source tree -> csrc/
    return Target(package=name, in_tree=False, include_dir=installed if os.path.isdir(installed) else source,
                  module=module)
