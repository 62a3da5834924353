"""python -m codegen {check,generate,list,docs,new-op}"""
from __future__ import annotations

import argparse
import os
import sys

from .errors import CodegenError
from .model import registered_kernels
from .emit import render
from .project import KERNEL_DIR, generate, load_project
from .scaffold import new_op

DEFAULT_OUT = os.path.join("build", "generated")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
    parser.add_argument("--root", default=".", help="project folder holding the YAML files")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="validate the YAML files and report every problem")
    gen = sub.add_parser("generate", help="write the generated sources")
    gen.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    sub.add_parser("list", help="list operators, kernels and differentiability")
    sub.add_parser("docs", help="write docs/ops.md, the operator reference")
    scaffold = sub.add_parser("new-op", help="scaffold a kernel file, a YAML entry and a derivative stub")
    scaffold.add_argument("name", help="the operator's name, with or without the npu_ prefix")
    args = parser.parse_args(argv)

    try:
        if args.command == "check":
            project = load_project(args.root)
            print(f"ok: {len(project.ops)} operators")
        elif args.command == "generate":
            changed = generate(args.root, os.path.join(args.root, args.out))
            print(f"generated {args.out}: {len(changed)} file(s) changed")
            for rel in changed:
                print(f"  {rel}")
        elif args.command == "list":
            project = load_project(args.root)
            for op in project.ops:
                grad = "differentiable" if op.derivative else "-"
                print(f"{op.kind:9} {op.name:28} kernel={op.kernel:20} {grad}")
            kernels = registered_kernels(os.path.join(args.root, KERNEL_DIR))
            print(f"kernels: {', '.join(sorted(kernels))}")
        elif args.command == "docs":
            path = os.path.join(args.root, "docs", "ops.md")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(render(load_project(args.root))["docs/ops.md"])
            print(f"wrote {path}")
        elif args.command == "new-op":
            try:
                written = new_op(args.root, args.name)
            except ValueError as e:
                print(f"new-op: {e}", file=sys.stderr)
                return 1
            print("wrote " + ", ".join(written))
            project = load_project(args.root)  # the scaffold must validate as written
            print(f"ok: {len(project.ops)} operators; fill in the kernel, the doc and the derivative")
    except CodegenError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
