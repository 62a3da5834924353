"""A device profile from a part: measure it, fit a profile's constants, write the profile.

    python -m torch_simhpu.profile_part --device cuda -o h100.json        # on a machine with the part
    python -m torch_simhpu.profile_part --device cpu -o host.json         # this host's CPU, as a part
    python -m torch_simhpu.profile_part --rows measured.json -o part.json # fit rows measured elsewhere

It times the kinds of calls ../shared/measurements' files hold (torch_simhpu/simulation/part_measure.py:
GEMMs, attention, memory-bound classes, the host link, launches, optimizer steps; the CPU at
smaller sizes) in at most --time-limit seconds, then fits the constants of --base (a shipped
profile or a path: the part's structure, its datasheet rates) to half of the rows of each kind
(torch_simhpu/simulation/part_fit.py) and reports the error on the other half. The profile written names
the measurements and the errors in its sources, and loads wherever a profile does
(torch.simhpu.simulate(path), SIMHPU_DEVICE_PROFILE=path).

Nothing is written when the device does not exist, a measurement fails or runs past the time
limit, or the fitted profile has a field out of range: the error names it.

The measurement half needs torch alone: on a machine where simhpu is not built, run
`python torch_simhpu/simulation/part_measure.py --device cuda -o rows.json` and fit here with --rows.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch


def _default_base(device: str) -> str:
    return "cpu-host" if torch.device(device).type == "cpu" else "h100-sxm"


def profile_part(device: str | None, output: str, *, base: str | None = None, rows_file: str | None = None,
                 time_limit: float = 600.0, name: str | None = None, log=print) -> dict:
    """Measures (or reads) rows, fits, checks and writes the profile; returns its report."""
    from torch_simhpu.simulation import part_fit, part_measure
    from torch_simhpu.simulation.part_profiles import ProfileError

    if rows_file:
        try:
            measured = json.loads(Path(rows_file).read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"profile_part: cannot read the rows in {rows_file}: {error}") from None
        if not isinstance(measured, dict) or not isinstance(measured.get("rows"), list):
            raise ValueError(f"profile_part: {rows_file} holds no 'rows' list (a file part_measure.py wrote)")
        where = rows_file
        device = device or measured.get("device", "cuda")
    else:
        if device is None:
            raise ValueError("profile_part: give --device (a device torch has: cpu, cuda, ...) or --rows")
        cases = part_measure.cpu_cases() if torch.device(device).type == "cpu" else part_measure.gpu_cases()
        measured = part_measure.measure(device, cases, time_limit=time_limit, log=log)
        if measured["failures"]:
            raise RuntimeError(f"profile_part: {len(measured['failures'])} measurement(s) failed on {device}, the "
                               f"first: {measured['failures'][0]}; nothing written")
        where = f"measured by python -m torch_simhpu.profile_part --device {device} on {measured['measured']}"
    base = base or _default_base(device)
    fit_rows, held_out = part_fit.split(measured["rows"])
    log(f"fitting {base} on {len(fit_rows)} rows, {len(held_out)} held out")
    profile, notes = part_fit.fit(fit_rows, base, log=log)
    profile["name"] = name or Path(output).stem
    profile["description"] = f"{measured.get('part', device)}, profiled by torch_simhpu.profile_part"
    held_in = part_fit.summary(part_fit.evaluate(fit_rows, profile))
    held = part_fit.summary(part_fit.evaluate(held_out, profile))

    def line(label, table):
        return "; ".join(f"{kind} {s['median'] * 100:.1f}% median over {s['rows']}" for kind, s in table.items()
                         if s["median"] is not None) or "none"

    profile["sources"] = [
        f"Fitted by torch_simhpu.profile_part on {len(fit_rows)} calls of {measured.get('part', device)} "
        f"({measured.get('software', '')}; {where}): " + "; ".join(notes),
        f"Errors on the {len(fit_rows)} calls fitted on: {line('held in', held_in)}",
        f"Errors on {len(held_out)} calls held out: {line('held out', held)}",
        *[s for s in profile.get("sources", []) if not s.startswith(("Fitted by", "Errors on"))],
    ]
    try:
        part_fit.check(profile)
    except ProfileError as error:
        raise ProfileError(f"profile_part: the fitted profile is refused ({error}); nothing written") from None
    Path(output).write_text(json.dumps(profile, indent=2) + "\n")
    report = {"profile": output, "rows": len(measured["rows"]), "held_in": held_in, "held_out": held}
    for label, table in (("fitted on", held_in), ("held out", held)):
        for kind, s in table.items():
            median = "-" if s["median"] is None else f"{s['median'] * 100:.1f}%"
            log(f"  {label:>9}  {kind:<13} {s['rows']:>4} rows  median |error| {median:>6}  "
                f"within 15% {s['within_15']:>3}  unpriceable {s['unpriceable']}")
    log(f"wrote {output}")
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_simhpu.profile_part", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", help="the device to measure (cpu, cuda, cuda:1, ...)")
    parser.add_argument("-o", "--output", required=True, help="the profile to write (JSON)")
    parser.add_argument("--base", help="the profile whose structure is fitted (default: h100-sxm for a GPU, "
                                       "cpu-host for the CPU)")
    parser.add_argument("--rows", help="fit these measured rows (a part_measure.py file) instead of measuring")
    parser.add_argument("--time-limit", type=float, default=600.0, help="seconds the measurements may take")
    parser.add_argument("--name", help="the profile's name (default: the output file's stem)")
    parser.add_argument("--threads", type=int, help="with --device cpu: the intra-op threads the part has "
                                                    "(torch.set_num_threads; default: torch's)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if os.path.exists(args.output) and os.path.isdir(args.output):
        parser.error(f"--output {args.output} is a folder; name a file")
    if args.device is not None and args.device.split(":")[0] == "cpu":
        from torch_simhpu.simulation import part_measure
        part_measure.keep_the_heap()  # (the part keeps the memory it freed, as a device's caching allocator does)
    began = time.monotonic()
    try:
        profile_part(args.device, args.output, base=args.base, rows_file=args.rows, time_limit=args.time_limit,
                     name=args.name)
    except (ValueError, RuntimeError, TimeoutError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"({time.monotonic() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
