"""python -m codegen {check,generate,list}"""
from __future__ import annotations

import argparse
import os
import sys

from .errors import CodegenError
from .model import registered_kernels
from .project import KERNEL_DIR, generate, load_project

DEFAULT_OUT = os.path.join("build", "generated")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
    parser.add_argument("--root", default=".", help="project folder holding the YAML files")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="validate the YAML files and report every problem")
    gen = sub.add_parser("generate", help="write the generated sources")
    gen.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    sub.add_parser("list", help="list operators, kernels and differentiability")
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
    except CodegenError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
