"""A seeded fuzzer of the shipped YAML files (issue 11).

Each case applies one to three random mutations (values replaced by hostile
tokens, lines deleted, duplicated, swapped or inserted, bytes corrupted, the
file cut short, and plausible mistakes an author makes: see SEMANTIC) to op_plugin_functions.yaml or derivatives.yaml. Every outcome
must be one of two:

- rejected: a CodegenError whose every problem reads `file:line: entry: ...`
  and says how to fix it;
- accepted: the generated tree renders, its Python files parse, and nothing
  hostile appears in its C++ outside string literals and comments.

Anything else (another exception, a hang) fails. SIMHPU_FUZZ_CASES sets how
many cases run (CI: 300); SIMHPU_FUZZ_SEED the seed; SIMHPU_FUZZ_COMPILE how
many generated C++ files that differ from the shipped YAML's are compiled
(g++ -fsyntax-only against torch's headers; CI: 2, ~10 s each).
"""
from __future__ import annotations

import ast
import collections
import os
import random
import re
import shutil
import subprocess
import sysconfig

import pytest
from yaml_edit import ROOT, copy_project

CASES = int(os.environ.get("SIMHPU_FUZZ_CASES", "300"))
COMPILE = int(os.environ.get("SIMHPU_FUZZ_COMPILE", "2"))
SEED = int(os.environ.get("SIMHPU_FUZZ_SEED", "11"))
FILES = ("op_plugin_functions.yaml", "derivatives.yaml")

# What a hostile author would type; the markers below must never reach generated code as code.
HOSTILE = [
    ";", "}", "{", '"', "'", ")doc\"", '"""', "std::system(\"id\")", "#include <cstdlib>", "*a", "&a x", "|",
    "1e999", "inf", "nan", "2**70", "-1", "0", "[]", "{}", "null", "yes", "~", "[[float32]]", "\\", "\u200b",
    "\u202e", "lambda", "class", "dtype", "out", "guard", "kOpName", "A" * 300, "npu_add_custom", "x", "self",
    "Tensor", "float32", "grad", "grad; INJECTED", "INJECTED()", "x.INJECTED()", "at::INJECTED(x)",
    "') INJECTED('", "\"; INJECTED; \"", "npu_x(Tensor x) -> Tensor", "(" * 50, "- - -", ": :", "&anchor",
]
INJECTION_MARKERS = ("INJECTED", "system(", "#include <cstdlib>")

# Plausible mistakes rather than noise: each rewrites a line that matches into
# one an author could write and the C++ compiler (or the kernel, at run time)
# would be the first to refuse, unless codegen does.
SEMANTIC = [
    (r"grad_input_mask\b(?!\[)", "grad_input_mask[7]"),         # a mask index past the inputs
    (r"grads\[\d\]", "grads[9]"),                                # a grad index past the outputs
    (r"(\w+): grad\b", r'\1: grad * "str"'),                     # a string operand in a formula
    (r"int\[1\] dim", "int[2] dim=[1, 2, 3]"),                     # a default of the wrong length
    (r"int\[1\] dim", "int[2] dim"),                               # a fixed length the callers do not give
    (r"composite: .*", 'composite: "42"'),                         # composites of another type than Tensor
    (r"composite: .*", "composite: x.sizes()"),
    (r"composite: .*", "composite: std::get<0>(npu_rms_norm(x, gamma, eps))"),
    (r"exec: (\w+), (.*), out$", r"exec: \1, \2, out, out"),        # an output passed twice
    (r"exec: (\w+), (\w+), (.*)$", r"exec: \1, out, \3"),          # an output passed as an input
    (r"(\s+)composite: (.*)", r'\1composite: \2\n\1checks: ["same_shape(x, y)"]'),  # checks on a composite
    (r"checks: \[(.*)\]", r'checks: [\1, "one_of(self, [\"a\"])"]'),  # a rule on the wrong kind of argument
    # issue 43's families: names the generated code declares, repeated dtypes, SymInts into ATen,
    # operators torchgen takes for random ones, ATen functions by their header's name
    (r"float (\w+)=", r"float below_autograd="),                     # an argument named like a generated local
    (r"Tensor (\w+), ", r"Tensor grad_fn, "),
    (r"dtypes: \[(\w+)", r"dtypes: [\1, \1"),                          # a dtype listed twice
    (r"float (\w+)=1\.0\)", r"SymInt \1=1)"),                           # an argument becomes a SymInt
    (r"int\[1\] dim", "int[1]? dim=None"),                            # a list becomes optional (ATen's sum)
    (r"SymInt\[\] (\w+)", r"SymInt[]? \1=None"),
    (r"composite: .*", 'composite: "at::topk(x, 2)"'),                    # an ATen call with tuple result
    (r"composite: .*", 'composite: "at::and(x, y)"'),                      # C++'s and, ATen's __and__
    (r"composite: .*", 'composite: "at::__and__(x, y)"'),
    (r"func: npu_(\w+)\(", r"func: npu_rand_\1("),                      # a random-looking name, untagged
    # outputs on parameters the kernel only reads, inputs on ones it writes (patterns over two lines)
    (r"\(Tensor x, Tensor y, Tensor z\) -> \(Tensor prod, Tensor total\)\n(\s+)exec: mul_add, x, y, z, prod, total",
     r"(Tensor x, Tensor y) -> (Tensor z, Tensor prod, Tensor total)\n\1exec: mul_add, x, y, z, prod, total"),
    (r"\(Tensor x, Tensor gamma, float eps=1e-06\) -> \(Tensor y, Tensor rstd\)\n(\s+)exec: rms_norm, x, gamma, eps, y, rstd",
     r"(Tensor x, Tensor gamma, Tensor y, float eps=1e-06) -> Tensor rstd\n\1exec: rms_norm, x, gamma, eps, y, rstd"),
]


def mutate(text: str, rng: random.Random) -> bytes:
    lines = text.split("\n")
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["value", "word", "delete", "duplicate", "swap", "insert", "bytes", "truncate",
                           "semantic", "semantic"])
        if not lines:
            lines = [""]
        i = rng.randrange(len(lines))
        token = rng.choice(HOSTILE)
        if kind == "value" and ": " in lines[i]:
            key, _, _ = lines[i].partition(": ")
            lines[i] = f"{key}: {token}"
        elif kind == "word":
            words = re.findall(r"\w+", lines[i])
            if words:
                lines[i] = lines[i].replace(rng.choice(words), token, 1)
        elif kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "swap":
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "insert":
            lines.insert(i, " " * rng.choice([0, 2, 4, 6]) + rng.choice(["", "- ", "x: ", "doc: "]) + token)
        elif kind == "truncate":
            lines = lines[:i]
        elif kind == "semantic":
            pattern, replacement = rng.choice(SEMANTIC)
            if "\\n" in pattern:  # a mistake over consecutive lines
                lines = re.sub(pattern, replacement, "\n".join(lines), count=1).split("\n")
                continue
            matching = [n for n, line in enumerate(lines) if re.search(pattern, line)]
            if matching:
                n = rng.choice(matching)
                lines[n:n + 1] = re.sub(pattern, replacement, lines[n], count=1).split("\n")
    data = "\n".join(lines).encode("utf-8")
    if rng.random() < 0.05:
        at = rng.randrange(len(data) + 1)
        data = data[:at] + bytes([rng.choice([0x00, 0xff, 0xc3, 0x80, 0x1b])]) + data[at:]
    return data


def code_outside_literals(cpp: str) -> str:
    cpp = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', cpp)
    return re.sub(r"//[^\n]*", "", cpp)


def check_generated(files: dict[str, str]) -> None:
    for rel, content in files.items():
        if rel.endswith((".py", ".pyi")):
            ast.parse(content, filename=rel)
        if rel.endswith((".cpp", ".h")):
            code = code_outside_literals(content)
            for marker in INJECTION_MARKERS:
                assert marker not in code, f"{marker!r} reached {rel} as code"


def compile_cpp(files: dict[str, str], changed: list[str], out) -> None:
    """g++ -fsyntax-only on the `changed` C++ files of a generated tree written under `out`."""
    import torch.utils.cpp_extension
    for rel, content in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(content)
    includes = [os.path.join(ROOT, "csrc"), str(out / "include"), sysconfig.get_paths()["include"],
                *torch.utils.cpp_extension.include_paths()]
    for rel in changed:
        command = [shutil.which("g++") or "c++", "-std=c++20", "-fsyntax-only", "-fopenmp",
                   *(f"-I{i}" for i in includes), str(out / rel)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        # What codegen lets through to the compiler must fail there naming the entry (a static_assert).
        named = re.search(r"static assertion failed: (op_plugin_functions|derivatives)\.yaml:\d+ \(\w+\): ",
                          result.stderr)
        assert result.returncode == 0 or named, f"{rel} does not compile:\n{result.stderr[-3000:]}"


def test_fuzzed_yaml_is_rejected_cleanly_or_generates_safe_code(codegen, emit, tmp_path):
    copy_project(tmp_path)
    originals = {name: (tmp_path / name).read_text() for name in FILES}
    rng = random.Random(SEED)
    outcomes = collections.Counter()
    shipped = emit.render(codegen.load_project(str(tmp_path)))
    to_compile = COMPILE
    for case in range(CASES):
        target = rng.choice(FILES)
        mutated = mutate(originals[target], rng)
        for name in FILES:
            (tmp_path / name).write_text(originals[name])
        (tmp_path / target).write_bytes(mutated)
        try:
            project = codegen.load_project(str(tmp_path))
        except codegen.CodegenError as error:
            for problem in error.problems:
                first = str(problem).split("\n")[0]
                assert re.match(r"^(op_plugin_functions|derivatives)\.yaml:\d+: ", first), (case, first)
                assert problem.fix.strip(), (case, first)
            outcomes["rejected"] += 1
            continue
        except Exception as error:  # noqa: BLE001 - the point: nothing but CodegenError
            pytest.fail(f"case {case} (seed {SEED}) on {target} raised {type(error).__name__}: {error}\n"
                        f"--- mutated file ---\n{mutated.decode('utf-8', 'replace')}")
        files = emit.render(project)
        check_generated(files)
        outcomes["accepted"] += 1
        changed = [rel for rel, content in files.items()
                   if rel.endswith(".cpp") and shipped.get(rel) != content][:to_compile]
        if changed:
            compile_cpp(files, changed, tmp_path / f"compiled_{case}")
            to_compile -= len(changed)
            outcomes["compiled"] += len(changed)
    print(f"fuzz: {CASES} cases, seed {SEED}: {dict(outcomes)}")
    assert outcomes["rejected"] > CASES // 4 and outcomes["rejected"] + outcomes["accepted"] == CASES
