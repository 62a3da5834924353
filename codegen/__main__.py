"""python -m codegen {check,generate,list,docs,new-op,test}"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys

from .emit import render, write_file
from .errors import CodegenError
from .project import OPS_YAML, OVERLAY_YAML, generate, load_dialect_project, load_project
from .scaffold import new_op
from .target import package

DEFAULT_OUT = os.path.join("build", "generated")


class UsageError(Exception):
    """A command-line mistake, explained."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description=__doc__)
    parser.add_argument("--root", default=".", help="project folder holding the YAML files")
    parser.add_argument("--extension", default=None,
                        help="an operator package's extension module (e.g. my_ops._C); the default when run as "
                             "torch_simhpu.codegen, from the folder's name")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="validate the YAML files and report every problem")
    rules = sub.add_parser("check-rules", help="op-plugin's dialect: hold each official gen_opapi entry's output "
                                              "rules to ATen on the calls of PyTorch's op_db")
    rules.add_argument("ops", nargs="*", help="entries to check (default: all)")
    gen = sub.add_parser("generate", help="write the generated sources")
    gen.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    sub.add_parser("list", help="list operators, kernels and differentiability")
    sub.add_parser("docs", help="write docs/ops.md, the operator reference")
    scaffold = sub.add_parser("new-op", help="scaffold a kernel file, a YAML entry and a derivative stub")
    scaffold.add_argument("name", help="the operator's name, with or without the npu_ prefix")
    test = sub.add_parser("test", help="run the tests each entry's reference: generates, on the installed build")
    test.add_argument("ops", nargs="*", help="operators to test (default: every one with a reference:)")
    args = parser.parse_args(argv)

    try:
        _check_root(args.root)
        COMMANDS[args.command](args)
    except CodegenError as e:
        print(e, file=sys.stderr)
        return 1
    except UsageError as e:
        print(f"python -m codegen {args.command}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`list | head`): not an error of ours. Point stdout
        # at nothing so the interpreter's final flush does not complain.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        print(f"python -m codegen {args.command}: {e.strerror or e}: {e.filename or ''}", file=sys.stderr)
        return 2
    return 0


def _target(args):
    """The backend when run from its source tree (python -m codegen); an operator
    package when run from the installed wheel (python -m torch_simhpu.codegen)."""
    if args.extension is None and __package__ == "codegen":
        return None
    name = args.extension or re.sub(r"\W", "_", os.path.basename(os.path.abspath(args.root))) + "._C"
    try:
        return package(name if not name[0].isdigit() else "_" + name)
    except ValueError as e:
        raise UsageError(f"--extension: {e}") from None


def _check_root(root: str) -> None:
    if not os.path.isdir(root):
        raise UsageError(f"--root {root!r} is not a folder")
    if not os.path.isfile(os.path.join(root, OPS_YAML)):
        raise UsageError(f"--root {root!r} holds no {OPS_YAML}; point --root at the project folder")


def _check(args) -> None:
    dialect = load_dialect_project(args.root)
    if dialect is not None:
        print(dialect.summary())
        built = collections.Counter(op.implementation for op in load_project(args.root).ops)
        print(f"a build gives {built['aclnn']} simulated ACLNN kernels (official entries whose rules read), "
              f"{built['unprovided']} custom operators whose kernels are torch_npu's, and "
              f"{sum(n for k, n in built.items() if k not in ('aclnn', 'unprovided'))} operators of {OVERLAY_YAML} "
              "simhpu's kernels run")
        return
    project = load_project(args.root, _target(args))
    print(f"ok: {len(project.ops)} operators")


def _check_rules(args) -> None:
    dialect = load_dialect_project(args.root)
    if dialect is None:
        raise UsageError(f"{OPS_YAML} is not in op-plugin's dialect (no all_version:); check-rules reads that "
                         "dialect's gen_opapi rules")
    from .op_plugin.check import check_rules, summary

    checks = check_rules(dialect, ops=set(args.ops) or None)
    print(summary(checks, OPS_YAML))
    if any(c.mismatches for c in checks):
        raise SystemExit(1)


def _generate(args) -> None:
    out = os.path.join(args.root, args.out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"--out {args.out!r} is a file; give a folder")
    changed = generate(args.root, out, _target(args))
    print(f"generated {args.out}: {len(changed)} file(s) changed")
    for rel in changed:
        print(f"  {rel}")


def _list(args) -> None:
    project = load_project(args.root, _target(args))
    for op in project.ops:
        grad = "differentiable" if op.derivative else "-"
        print(f"{op.kind:9} {op.name:28} {op.implementation:11} {op.kernel or op.adapter or '-':20} {grad}")
    print(f"kernels: {', '.join(project.kernel_names)}")
    sys.stdout.flush()  # a closed pipe shows here, inside main's handler


def _docs(args) -> None:
    path = os.path.join(args.root, "docs", "ops.md")
    content = render(load_project(args.root, _target(args)))["docs/ops.md"]  # validated before anything is written
    write_file(path, content)
    print(f"wrote {path}")


def _new_op(args) -> None:
    try:
        written = new_op(args.root, args.name)
    except ValueError as e:
        raise UsageError(str(e)) from None
    print("wrote " + ", ".join(written))
    print("fill in the kernel, the doc and the derivative")


def _test(args) -> None:
    """The generated tests, run against what is installed: the YAML is validated
    first, and an installed build older than it is said to be."""
    import importlib
    import time

    project = load_project(args.root, _target(args))
    declared = {op.name for op in project.ops if op.reference}
    unknown = [name for name in args.ops if name not in declared]
    if unknown:
        raise UsageError(f"no entry with a reference: named {', '.join(unknown)} (those with one: "
                         f"{', '.join(sorted(declared)) or 'none'})")
    # The tests run the installed build: run from the repository's root, its
    # source folders (first on sys.path) would shadow the installed packages.
    root = os.path.abspath(args.root)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != root]
    import torch  # noqa: F401
    from torch_simhpu.testing.reference_tests import CHECKS, run

    generated = importlib.import_module(f"{project.target.package}._generated.reference")
    ops = [op for op in generated.OPS if not args.ops or op.name in args.ops]
    missing = sorted({*(args.ops or declared)} - {op.name for op in ops})
    if missing:
        raise UsageError(f"the installed {project.target.package} has no generated tests for {', '.join(missing)}: "
                         "rebuild and reinstall it")
    failed = 0
    for op in ops:
        start = time.perf_counter()
        results = run(op)
        bad = {check: failures for check, failures in results.items() if failures}
        failed += bool(bad)
        marks = " ".join(f"{check}:{'FAIL' if results[check] else 'ok'}" for check in CHECKS)
        print(f"{op.name:28} {time.perf_counter() - start:5.1f} s  {marks}")
        for check, failures in bad.items():
            for failure in failures[:5]:
                print(f"    {op.where}: {check}: {failure}")
    print(f"{len(ops) - failed} of {len(ops)} operators pass")
    if failed:
        raise SystemExit(1)


COMMANDS = {"check": _check, "check-rules": _check_rules, "generate": _generate, "list": _list, "docs": _docs, "new-op": _new_op, "test": _test}

if __name__ == "__main__":
    sys.exit(main())
