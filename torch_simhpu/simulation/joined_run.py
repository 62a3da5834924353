"""A joined run (`--world 8192 --rank 0,512,...`): one process a rank, their simulated
clocks joined through a store served here; their reports printed in rank order, and with
--html one page of the whole job beside each rank's own.

The processes are forked from the command's own, after it imported torch and what
the program imports first (_preload): sixteen pipeline stages of torchtitan share one
copy of those modules' memory and their import time instead of each paying it. A fork is as fresh as a new process for
the device: nothing here has used it (and torch_simhpu's import starts no autograd
thread, see _device_registration._loaded_by_torch_import).
"""
from __future__ import annotations

import ast
import atexit
import gc
import importlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Callable, NoReturn

from torch_simhpu.simulation import simulated_ranks

_page_folder: Path | None = None  # in a forked rank, with --html: where its page's data goes for the job's page


def run(argv: list[str], ranks: list[int], module: str | None, script: str | None, program_args: list[str],
        html: str | None, command: Callable[[list[str]], int]) -> int:
    """Forks a process for each rank of `ranks`, each running `command` (the command line's main,
    which calls this) on `argv` as that rank."""
    import torch.distributed as dist

    _preload(module, script, program_args)
    # Bound and listening before the forks, so a rank that connects before the store
    # serves waits in the backlog; the store takes this socket over once they are forked.
    listener = socket.create_server(("127.0.0.1", 0), backlog=max(128, 4 * len(ranks)))
    port = listener.getsockname()[1]
    folder = Path(tempfile.mkdtemp(prefix="simhpu-joined-"))
    environment = {simulated_ranks.JOINED_RANKS: ",".join(map(str, ranks)),
                   simulated_ranks.JOIN_STORE: f"127.0.0.1:{port}"}
    # What the imports made stays out of the collector's reach: its passes would write to every
    # object's header and so copy each page of them into every rank.
    gc.collect()
    gc.freeze()
    sys.stdout.flush()
    sys.stderr.flush()
    children: dict[int, int] = {}  # pid -> rank
    reaped: set[int] = set()
    failed = None
    try:
        for rank in ranks:
            pid = os.fork()
            if pid == 0:
                listener.close()
                _play(command, argv, {**environment, simulated_ranks.RANK: str(rank)}, folder, rank, html is not None)
            children[pid] = rank
        store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,  # noqa: F841 (serves)
                              master_listen_fd=listener.fileno())
        failed = _wait(children, reaped)
    finally:
        for pid in set(children) - reaped:  # (a failed rank's peers would wait for it until their timeout)
            _stop(pid)
        for rank in ranks:
            out = folder / f"rank{rank}.out"
            print(f"== rank {rank} ==")
            print(out.read_text() if out.exists() else "", end="", flush=True)
        pages = {rank: folder / f"rank{rank}.json" for rank in ranks}
        whole = None
        if html is not None and all(page.exists() for page in pages.values()):
            from torch_simhpu.simulation import html as page_writer

            whole = page_writer.write_joined({rank: json.loads(p.read_text()) for rank, p in pages.items()}, html)
        shutil.rmtree(folder, ignore_errors=True)
    if failed is not None:
        rank, status = failed
        print(f"rank {rank} failed (exit status {status}); the others were stopped", file=sys.stderr)
        return status or 1
    if whole is not None:
        print(f"the job's page (a row a rank) written to {whole}")
    return 0


def _preload(module: str | None, script: str | None, program_args: list[str]) -> None:
    """Imports here, once for every rank, what the program imports first: for `-m PACKAGE.MODULE`
    its package (as `python -m` does before it runs the module), then the modules its file imports
    at its top level (as a forkserver's preload would). Each rank still runs the whole program
    itself, its imports finding these done. A module that fails to import here is left for the
    ranks, which fail on it as they would without this."""
    # As each rank will run the program: with its own command line (a default argument of
    # sys.argv[1:] is taken at import: torchtitan's ConfigManager.parse_args has one).
    sys.argv = [module or script, *program_args]
    path = script
    if module:
        package = module.rpartition(".")[0]
        try:
            if package:
                importlib.import_module(package)
            spec = importlib.util.find_spec(module)
        except Exception:  # noqa: BLE001 - the ranks raise it themselves, where the program's run would
            return
        path = spec.origin if spec is not None and spec.has_location else None
    try:
        tree = ast.parse(Path(path).read_text(), path) if path else None
    except (OSError, SyntaxError, ValueError):
        return
    for node in tree.body if tree else ():
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - (as above)
                pass


def _wait(children: dict[int, int], reaped: set[int]) -> tuple[int, int] | None:
    """Waits for every rank; at the first that fails, returns (rank, exit status) at once."""
    while len(reaped) < len(children):
        pid, status = os.wait()
        if pid not in children:
            continue
        reaped.add(pid)
        rank = children[pid]
        code = os.waitstatus_to_exitcode(status)
        if code < 0:  # killed by a signal: the status a shell gives it
            code = 128 - code
        if code != 0:
            return rank, code
    return None


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _play(command: Callable[[list[str]], int], argv: list[str], environment: dict, folder: Path, rank: int,
          html: bool) -> NoReturn:
    """In a forked process: the command as one rank, its output into the folder; never returns."""
    global _page_folder
    code = 1
    try:
        os.environ.update(environment)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        output = os.open(folder / f"rank{rank}.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(output, 1)
        os.close(output)
        _page_folder = folder if html else None
        code = command(argv)
    except SystemExit as exit_:
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
        code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    except BaseException:  # noqa: BLE001 - the rank's failure is its exit status, its traceback on stderr
        traceback.print_exc()
    finally:
        # As the interpreter's exit would (the device drains, torch.distributed closes), without
        # unwinding into the command's frames this process was forked from.
        try:
            atexit._run_exitfuncs()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def save_page(run, top: int) -> None:
    """In a forked rank with --html: its page's data, for the job's page the command writes."""
    if _page_folder is None:
        return
    rank = os.environ[simulated_ranks.RANK]
    (_page_folder / f"rank{rank}.json").write_text(json.dumps(run.page_data(top), allow_nan=False))
