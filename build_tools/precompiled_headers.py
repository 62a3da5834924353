"""Precompiled torch headers, in tiers, for setup.py's build.

Loading a GCC precompiled header costs time in proportion to its size: the
full set of torch headers the project uses (450 MB) takes about 1.2 s to load,
more than parsing <ATen/core/Tensor.h> alone. So each translation unit gets the
smallest tier that covers the torch headers it includes (followed through the
project's own headers):

    none   no torch header at all (the runtime's plain C++): no -include;
    core   csrc/pch/torch_core.h covers them: tensors, IValues, dispatch macros;
    full   anything else: csrc/pch/torch_full.h (autograd, TensorIterator, ...).

Each tier's header is built once per set of flags, beside a stamp of what it
was built from, and only if some translation unit uses it. The two headers
build in the background while the translation units that need neither compile.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from . import ninja_output

TIERS = ("core", "full")
PCH_FOLDER = os.path.join("csrc", "pch")

# The prefixes of headers a tier can cover; system and standard headers are
# parsed quickly and never decide a tier.
TORCH_HEADER_PREFIXES = ("ATen/", "c10/", "torch/", "caffe2/", "pybind11/", "Python.h")
INCLUDE_LINE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)


def torch_includes(source: str, project_include_dirs: Sequence[str]) -> frozenset[str]:
    """The torch headers `source` includes, itself or through the project's headers
    (found beside the includer or in `project_include_dirs`; torch's are not followed)."""
    found: set[str] = set()
    seen: set[str] = set()
    pending = [os.path.abspath(source)]
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for quote, name in INCLUDE_LINE.findall(text):
            candidates = [os.path.join(d, name) for d in project_include_dirs]
            if quote == '"':
                candidates.insert(0, os.path.join(os.path.dirname(path), name))
            local = next((c for c in candidates if os.path.isfile(c)), None)
            if local is not None:
                pending.append(os.path.abspath(local))
            elif name.startswith(TORCH_HEADER_PREFIXES):
                found.add(name)
    return frozenset(found)


@dataclass
class HeaderTier:
    """One tier's header, precompiled with one set of flags into its own folder."""

    name: str
    command_prefix: list[str]  # the compiler and the flags before the source
    command_suffix: list[str]  # the flags after it
    folder: str
    text: str
    stamp: str
    _build: subprocess.Popen | None = field(default=None, repr=False)
    _failed: bool = False

    @property
    def header(self) -> str:
        return os.path.join(self.folder, f"torch_{self.name}.h")

    def _command(self, *extra: str) -> list[str]:
        return [*self.command_prefix, "-x", "c++-header", self.header, *extra, *self.command_suffix]

    def _is_current(self) -> bool:
        stamp_file = self.header + ".stamp"
        return (os.path.exists(self.header + ".gch") and os.path.exists(stamp_file)
                and open(stamp_file).read() == self.stamp)

    def _write_header(self) -> None:
        os.makedirs(self.folder, exist_ok=True)
        if not os.path.exists(self.header) or open(self.header).read() != self.text:
            with open(self.header, "w") as f:
                f.write(self.text)

    def covered(self) -> frozenset[str]:
        """The torch headers this tier's header includes, as translation units name them."""
        deps_file = self.header + ".deps"
        if not (os.path.exists(deps_file) and open(deps_file).readline().strip() == self.stamp):
            self._write_header()
            out = subprocess.run(self._command("-M", "-MT", "pch"), capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(f"{self.header}: listing its includes failed:\n{out.stderr[-2000:]}")
            paths = out.stdout.replace("\\\n", " ").split()[1:]
            names = sorted({p.rsplit("/include/", 1)[-1] for p in paths} | {os.path.basename(p) for p in paths})
            with open(deps_file, "w") as f:
                f.write("\n".join([self.stamp, *names]) + "\n")
        with open(deps_file) as f:
            return frozenset(line.strip() for line in f.readlines()[1:])

    def start(self) -> None:
        """Starts building the precompiled header unless it is current."""
        if self._build is not None or self._is_current():
            return
        self._write_header()
        command = self._command("-o", self.header + ".gch")
        shown = f": {' '.join(command)}" if ninja_output.verbose_build() else f" (csrc/pch/torch_{self.name}.h)"
        print(f"precompiling torch headers{shown}", flush=True)
        self._build = subprocess.Popen(command)

    def finish(self) -> str | None:
        """The header to -include once it is built; None if it could not be."""
        self.start()
        if self._build is not None:
            failed = self._build.wait() != 0
            self._build = None
            if failed:
                self._failed = True
            else:
                with open(self.header + ".stamp", "w") as f:
                    f.write(self.stamp)
        if self._failed:
            print(f"warning: precompiled header {self.name} failed; compiling without it", flush=True)
            return None
        return self.header


def make_tiers(root: str, output_dir: str, compiler: str, cflags: list[str], post_cflags: list[str],
               torch_version: str) -> dict[str, HeaderTier]:
    tiers = {}
    for name in TIERS:
        # A tier's header is its own file after those of the tiers below it.
        text = "".join(open(os.path.join(root, PCH_FOLDER, f"torch_{tier}.h")).read()
                       for tier in TIERS[:TIERS.index(name) + 1])
        key = [text, torch_version, compiler, *cflags, *post_cflags]
        stamp = hashlib.sha256("\n".join(key).encode()).hexdigest()
        # One folder per set of flags: the library and the module differ (Kineto's
        # include folder, visibility), and sharing one would rebuild both every build.
        folder = os.path.join(os.path.abspath(output_dir), "pch", stamp[:16])
        tiers[name] = HeaderTier(name, [compiler, *cflags], post_cflags, folder, text, stamp)
    return tiers


def assign_tiers(sources: list[str], project_include_dirs: Sequence[str],
                 tiers: dict[str, HeaderTier]) -> dict[str, list[str]]:
    """{"none"|"core"|"full": sources}: the smallest tier covering each source's torch headers."""
    core = tiers["core"].covered()
    assigned: dict[str, list[str]] = {"none": [], "core": [], "full": []}
    for source in sources:
        used = torch_includes(source, project_include_dirs)
        tier = "none" if not used else "core" if used <= core else "full"
        assigned[tier].append(source)
    return assigned
