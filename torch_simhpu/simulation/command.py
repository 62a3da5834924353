"""`python -m torch_simhpu.simulation`: a script or module under simulated time, its report
printed (--html: the page too); with --world, one rank or several joined (joined_run.py).
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path

from torch_simhpu.simulation import phantom, simulated_ranks
from torch_simhpu.simulation.clocks import simulate
from torch_simhpu.simulation.part_profiles import _HOST_TIME, profiles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_simhpu.simulation",
        description="Run a script with simulated time on and print where the modelled part spends it.")
    parser.add_argument("--profile", required=True, help=f"a shipped profile ({', '.join(profiles())}) or a path")
    parser.add_argument("--host-time", choices=sorted(_HOST_TIME), default="modelled",
                        help="modelled (the default): the part's host time per operator and launch, the same on "
                             "every machine; measured: the script's own time between operators here, added")
    parser.add_argument("--top", type=int, default=20, help="operators listed (by simulated time)")
    parser.add_argument("--execute", action=argparse.BooleanOptionalAction, default=None,
                        help="run the kernels (--no-execute: phantom execution, see torch_simhpu/simulation/phantom.py; "
                             "the default without --world)")
    parser.add_argument("--world", type=int, help="simulated ranks: play one rank of a world this large "
                                                  "(see torch_simhpu/simulation/simulated_ranks.py; phantom execution)")
    parser.add_argument("--rank", default="0",
                        help="the rank this process plays, with --world; several (0,8 or 0-3): one process each, "
                             "their clocks joined, so a late rank delays its peers (pipeline stages)")
    parser.add_argument("--tokens-per-step", type=int, help="tokens one optimizer step trains on, per device: "
                                                               "the report gives tokens/s")
    parser.add_argument("--flops-per-token", type=float,
                        help="model FLOPs a token, for MFU (default: 6 x the optimizer's parameters)")
    parser.add_argument("--html", help="also write the report as an HTML page here (timeline, roofline, memory)")
    parser.add_argument("--values", choices=sorted(phantom.VALUES), default="placeholder",
                        help="what host reads of device values get under --no-execute")
    parser.add_argument("script", nargs="?", help="the script (or -m MODULE, as python takes it: -m torchtitan.train)")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    argv = list(sys.argv[1:] if argv is None else argv)
    options = None
    if "-m" in argv[:-1]:  # -m MODULE ARGS...: what follows the module is its own
        at = argv.index("-m")
        head = parser.parse_args(argv[:at])
        if head.script is None:
            options = head
            options.module, options.args = argv[at + 1], argv[at + 2:]
    if options is None:
        options = parser.parse_args(argv)
        options.module = None
        if options.script is None:
            parser.error("give a script to run, or -m and a module")
    if options.world is not None:
        if options.execute:
            parser.error("--world runs under phantom execution: the absent ranks compute no values (drop --execute)")
        try:
            ranks = simulated_ranks.parse_ranks(options.rank, options.world, what="--rank")
        except ValueError as error:
            parser.error(str(error))
        if len(ranks) > 1 and simulated_ranks.JOINED_RANKS not in os.environ:
            from torch_simhpu.simulation import joined_run

            return joined_run.run(argv, ranks, options.module, options.script, options.args, options.html, main)
        if len(ranks) > 1:  # one of the processes joined_run forked: its rank is in the environment
            ranks = [int(os.environ[simulated_ranks.RANK])]
            if options.html:
                page = Path(options.html)
                options.html = str(page.with_name(f"{page.stem}.rank{ranks[0]}{page.suffix}"))
        simulated_ranks.start(options.world, ranks[0])
        options.execute = False
    elif options.rank != "0":
        parser.error("--rank needs --world")
    if options.execute is None and phantom.execution_off_in_environment():
        options.execute = False  # (SIMHPU_EXECUTE=0 beside the command's --profile: phantom execution on it)
    sys.argv = [options.script or options.module, *options.args]
    with simulate(options.profile, host_time=options.host_time, execute=options.execute is not False,
                  values=options.values, tokens_per_step=options.tokens_per_step,
                  flops_per_token=options.flops_per_token) as run:
        try:
            if options.module is not None:
                runpy.run_module(options.module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(options.script, run_name="__main__")
        except SystemExit as exit_:
            if exit_.code not in (None, 0):
                raise
    print(run.report(options.top))
    if options.html:
        print(f"report written to {run.write_html(options.html, options.top)}")
        from torch_simhpu.simulation import joined_run

        joined_run.save_page(run, options.top)
    return 0
