"""torch.compile(mode="reduce-overhead") on simhpu: each compiled graph is
captured once into a torch.simhpu.Graph and replayed after.

The first call runs as usual (it warms up, as CUDA graphs do). The second
captures the graph's launches over private copies of its inputs (parameters
are captured in place, since they stay the same tensors). From then on a call
is ONE launch record: a cluster that copies the new inputs in, replays the
graph, copies inputs the graph mutates back out and copies the outputs into
fresh tensors. Unlike torch.cuda's static outputs, results stay valid after
the next call. A call whose parameters are other tensors, or whose size
arguments differ, captures again. A graph that makes the host wait (an
operator whose output size depends on the data) cannot be captured: it warns
once and runs as clusters.
"""
from __future__ import annotations

import warnings

import torch

from torch_simhpu import _C
from torch_simhpu._inductor.cluster import cluster
from torch_simhpu.device.graphs import Graph, graph


def _is_static(value) -> bool:
    """Captured in place rather than copied: parameters, and whatever is not a tensor."""
    return isinstance(value, torch.nn.Parameter) or not isinstance(value, torch.Tensor)


class GraphedCall:
    def __init__(self, call, device_index: int, mutated_inputs: tuple[int, ...]) -> None:
        self.call = call
        self.device_index = device_index
        self.mutated_inputs = mutated_inputs
        self.warmed_up = False
        self.graph: Graph | None = None
        self.static_inputs: list = []
        self.static_outputs: tuple = ()
        self.not_capturable = ""  # why this graph runs as clusters instead

    def __call__(self, args: list):
        if _C._capturing_graph():
            return self.call(args)  # captured by an enclosing graph: plain launches
        if not self.warmed_up or self.not_capturable:
            self.warmed_up = True
            return self._run_clustered(args)
        if self.graph is None or not self._captured_for(args):
            try:
                self._capture(args)
            except RuntimeError as error:
                if "being captured into a torch.simhpu.Graph" not in str(error):
                    raise
                # Nothing ran: the capture only recorded. As CUDA graph trees skip
                # a graph they cannot capture, this one runs as clusters from now on.
                self.not_capturable = str(error).splitlines()[0]
                warnings.warn(f"simhpu: mode='reduce-overhead' cannot capture this compiled graph; it runs "
                              f"without replay ({self.not_capturable})", stacklevel=2)
                return self._run_clustered(args)
        return self._replay(args)

    def _run_clustered(self, args: list):
        with cluster(self.device_index):
            return self.call(args)

    def _captured_for(self, args: list) -> bool:
        if len(args) != len(self.static_inputs):
            return False
        for new, static in zip(args, self.static_inputs):
            if _is_static(static):
                if isinstance(static, torch.Tensor):
                    if new is not static:
                        return False
                elif new != static:
                    return False
            elif new.shape != static.shape or new.stride() != static.stride() or new.dtype != static.dtype:
                return False
        return True

    def _capture(self, args: list) -> None:
        self.graph = None  # frees the previous capture's memory first
        self.static_inputs = [a if _is_static(a) else torch.empty_strided(a.shape, a.stride(), dtype=a.dtype,
                                                                          device=a.device)
                              for a in args]
        captured = Graph()
        with graph(captured):
            self.static_outputs = tuple(self.call(list(self.static_inputs)))
        self.graph = captured

    def _replay(self, args: list):
        with cluster(self.device_index):
            for new, static in zip(args, self.static_inputs):
                if not _is_static(static):
                    static.copy_(new)
            self.graph.replay()
            for i in self.mutated_inputs:
                if not _is_static(self.static_inputs[i]):
                    args[i].copy_(self.static_inputs[i])
            outputs = tuple(o.clone() if isinstance(o, torch.Tensor) else o for o in self.static_outputs)
        args.clear()  # as Inductor's call does: the caller's list no longer holds the inputs
        return outputs


def graphed(call, device_index: int, mutated_inputs: tuple[int, ...]) -> GraphedCall:
    return GraphedCall(call, device_index, mutated_inputs)
