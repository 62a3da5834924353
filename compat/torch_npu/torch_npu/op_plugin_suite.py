"""op-plugin's own tests against this torch_npu, each file alone, with every failure's reason classified.

    python -m torch_npu.op_plugin_suite PATH/op-plugin [--folder test/test_base_ops ...] [--jobs 2]
                                        [--timeout 300] [--markdown table.md] [-k abs -k rms_norm ...]

PATH is a checkout of Ascend's op-plugin (its test code stays there). Each test file runs as
op-plugin runs it, `python FILE` in its folder, in a process of its own (the device is named
"npu" there, and op-plugin's YAML is loaded when the checkout has it, so its custom operators
have their names). A file passes when every test it ran passed and at least one was not
skipped; it is skipped when all its tests skipped (a part it does not support, a CANN version);
it fails otherwise, and the first failure's reason is classified:

- no kernel yet: an operator with no simulated kernel (NotImplementedError), or one simhpu does
  not declare at all;
- unsupported format: a failure about a tensor's internal format;
- torch_npu API: a torch_npu / torch.npu name this package does not have;
- mismatch: a result that differs from the expected one (the test's assertion);
- error: the operator or the program raised (a message simhpu gave, an unexpected exception);
- missing module: a Python package the file imports that is not installed;
- timeout: the file ran past --timeout.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

DEFAULT_FOLDERS = ("test/test_base_ops", "test/test_custom_ops")
REASONS = ("no kernel yet", "unsupported format", "torch_npu API", "mismatch", "error", "missing module", "timeout")
_OP_PLUGIN_YAML = Path("op_plugin/config/op_plugin_functions.yaml")


@dataclasses.dataclass
class FileResult:
    path: Path
    outcome: str  # "passed", "failed" or "skipped"
    ran: int = 0
    skipped: int = 0
    reason: str = ""  # one of REASONS for a failed file
    detail: str = ""  # the line that says why
    seconds: float = 0.0


def classify(output: str) -> tuple[str, str]:
    """The reason a file failed, and the line that says it, from what it printed."""
    # (pytest marks the lines of a failure's exception with "E   ")
    lines = [re.sub(r"^E\s+", "", line.strip()) for line in output.splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b.*", line)
              or line.startswith(("NotImplementedError", "AssertionError"))]
    first = raised[0] if raised else (lines[-1] if lines else "no output")
    text = "\n".join(raised)
    if "ModuleNotFoundError" in text:
        return "missing module", first
    if "NotImplementedError" in text or "no operator npu::" in text or "has no attribute 'npu_" in text:
        return "no kernel yet", next((line for line in raised if "NotImplementedError" in line or "npu::" in line
                                      or "'npu_" in line), first)
    if re.search(r"format", text, re.IGNORECASE) and ("npu_format" in text or "internal format" in text):
        return "unsupported format", first
    if re.search(r"module 'torch(_npu)?(\.npu)?[\w.]*' has no attribute|cannot import name .* from 'torch_npu",
                 text):
        return "torch_npu API", first
    if first.startswith("AssertionError"):
        return "mismatch", first
    return "error", first


def command(path: Path) -> list[str]:
    """How a file runs alone: as a script, or, where it has no __main__ block (run so, it would run nothing),
    through pytest, which collects its test classes whether or not they are TestCases."""
    if "__main__" not in path.read_text(errors="replace"):
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path.name]
    return [sys.executable, path.name]


def counts(output: str) -> tuple[bool, int, int]:
    """Whether the run reported its tests, how many ran and how many of those were skipped: unittest's
    "Ran N tests ... skipped=S", or pytest's "P passed, F failed, S skipped"."""
    ran_match = re.search(r"^Ran (\d+) tests?", output, re.MULTILINE)
    if ran_match:
        skipped_match = re.search(r"skipped=(\d+)", output)
        return True, int(ran_match.group(1)), int(skipped_match.group(1)) if skipped_match else 0
    line = next((line for line in reversed(output.splitlines())
                 if re.match(r"^\W*\d+ (passed|failed|skipped|errors?)\b.* in [\d.]+s", line)), "")
    summary = re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", line)
    if not summary:
        return False, 0, 0
    tally = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in summary}
    return True, sum(tally.values()), tally.get("skipped", 0)


def run_file(path: Path, env: dict, timeout: float) -> FileResult:
    start = time.monotonic()
    try:
        done = subprocess.run(command(path), cwd=path.parent, env=env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return FileResult(path, "failed", reason="timeout", detail=f"past {timeout:.0f} s",
                          seconds=time.monotonic() - start)
    output = done.stdout + done.stderr
    seconds = time.monotonic() - start
    reported, ran, skipped = counts(output)
    if done.returncode == 0 and reported:
        outcome = "skipped" if skipped >= ran else "passed"
        return FileResult(path, outcome, ran, skipped, seconds=seconds)
    reason, detail = classify(output)
    return FileResult(path, "failed", ran, skipped, reason, detail[:300], seconds)


def environment(checkout: Path) -> dict:
    env = dict(os.environ, SIMHPU_DEVICE_NAME="npu", PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)  # the files import the installed torch_npu, never a copy beside them
    if (checkout / _OP_PLUGIN_YAML).is_file():
        env["SIMHPU_OP_PLUGIN_YAML"] = str((checkout / _OP_PLUGIN_YAML).resolve())
    return env


def commit_of(checkout: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short=8", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def table(results: list[FileResult], checkout: Path) -> str:
    """Markdown: pass / fail / skip by folder, the reasons failed files gave, and each failure."""
    by_folder: dict[str, list[FileResult]] = {}
    for result in results:
        by_folder.setdefault(str(result.path.parent.relative_to(checkout)), []).append(result)
    lines = [f"op-plugin {commit_of(checkout)}: each test file run alone against torch_npu on simhpu", "",
             "| folder | files | passed | failed | skipped | passed of those not skipped | "
             + " | ".join(REASONS) + " |", "|" + "---|" * (6 + len(REASONS))]
    for folder, rows in sorted(by_folder.items()):
        counts = Counter(row.outcome for row in rows)
        reasons = Counter(row.reason for row in rows if row.outcome == "failed")
        ran = counts["passed"] + counts["failed"]
        share = f"{100 * counts['passed'] / ran:.1f} %" if ran else "-"
        lines.append(f"| {folder} | {len(rows)} | {counts['passed']} | {counts['failed']} | {counts['skipped']} | "
                     f"{share} | " + " | ".join(str(reasons[r]) for r in REASONS) + " |")
    failures = [row for row in results if row.outcome == "failed"]
    if failures:
        lines += ["", "| file | reason | first line of the failure |", "|---|---|---|"]
        for row in sorted(failures, key=lambda r: (r.reason, str(r.path))):
            detail = row.detail.replace("|", "\\|")
            lines.append(f"| {row.path.relative_to(checkout)} | {row.reason} | {detail} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_npu.op_plugin_suite", description=__doc__.split("\n")[0])
    parser.add_argument("checkout", type=Path, help="a checkout of Ascend's op-plugin")
    parser.add_argument("--folder", action="append", help=f"test folders in it (default: {', '.join(DEFAULT_FOLDERS)})")
    parser.add_argument("-k", dest="patterns", action="append", help="only files whose name contains this (repeatable)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a file may run")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    folders = [args.checkout / folder for folder in (args.folder or DEFAULT_FOLDERS)]
    missing = [str(folder) for folder in folders if not folder.is_dir()]
    if missing:
        parser.error(f"no such test folder: {', '.join(missing)} (is {args.checkout} a checkout of op-plugin?)")
    if args.jobs < 1 or args.timeout <= 0:
        parser.error("--jobs must be >= 1 and --timeout > 0")
    files = sorted(f for folder in folders for f in folder.glob("test_*.py")
                   if not args.patterns or any(p in f.name for p in args.patterns))
    env = environment(args.checkout)
    results = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for done, result in enumerate(pool.map(lambda f: run_file(f, env, args.timeout), files), 1):
            results.append(result)
            print(f"[{done}/{len(files)}] {result.outcome:7} {result.path.relative_to(args.checkout)}"
                  + (f"  ({result.reason}: {result.detail[:120]})" if result.outcome == "failed" else ""),
                  flush=True)
    report = table(results, args.checkout)
    print(report)
    if args.markdown:
        args.markdown.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
