"""What a build prints: one line per translation unit, the full commands on request.

torch's ninja driver (torch.utils.cpp_extension._run_ninja_build) always runs
`ninja -v`, which prints every compiler command line (about 1,400 terminal rows
for a clean build of this project). `install()` replaces it for the build with
a driver that gives each compile rule a description, so ninja prints
"[12/61] compiling csrc/runtime/streams.cpp" instead; SIMHPU_VERBOSE_BUILD=1
keeps torch's (BuildExtension always asks torch's for verbose output, so its
flag cannot be the switch). A failed compile shows the compiler's messages and
ends with one line, not a Python traceback.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

from setuptools.errors import CompileError
from torch.utils import cpp_extension

VERBOSE_ENV = "SIMHPU_VERBOSE_BUILD"
RULE = re.compile(r"^rule (\w+)\n((?:[ \t]+.*\n)*)", re.MULTILINE)


def describe_rules(build_file: str, verb: str = "compiling") -> None:
    """Gives each rule of the ninja file that has no description `verb $in`."""
    with open(build_file) as f:
        text = f.read()

    def with_description(match: re.Match) -> str:
        if "description" in match.group(2):
            return match.group(0)
        return f"{match.group(0)}  description = {verb} $in\n"

    described = RULE.sub(with_description, text)
    if described != text:
        with open(build_file, "w") as f:
            f.write(described)


def verbose_build() -> bool:
    """Whether the build shows its full command lines."""
    return os.environ.get(VERBOSE_ENV, "0") not in ("", "0")


def install(root: str) -> None:
    """Replaces torch's ninja driver for this process; paths print relative to root."""
    torch_driver = cpp_extension._run_ninja_build

    def run_ninja(build_directory: str, verbose: bool, error_prefix: str) -> None:
        if verbose_build():
            return torch_driver(build_directory, verbose, error_prefix)
        describe_rules(os.path.join(build_directory, "build.ninja"))
        command = ["ninja"]
        workers = cpp_extension._get_num_workers(False)
        if workers is not None:
            command += ["-j", str(workers)]
        sys.stdout.flush()
        process = subprocess.Popen(command, cwd=build_directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, errors="replace")
        after_failed = False
        for line in process.stdout:
            if after_failed:
                # The failed unit's full command line: long, and the verbose build shows it.
                after_failed = False
                print(f"  (its command: {VERBOSE_ENV}=1)", flush=True)
                continue
            after_failed = line.startswith("FAILED:")
            if line.startswith("ninja: no work to do"):
                continue
            print(line.rstrip("\n").replace(root + os.sep, ""), flush=True)
        if process.wait() != 0:
            # setuptools prints a CompileError as one line, without a traceback.
            raise CompileError(f"{error_prefix}: the compiler's messages are above")

    cpp_extension._run_ninja_build = run_ninja
