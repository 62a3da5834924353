"""The host side of a compiled graph on simhpu: Inductor's Python wrapper, with
its C++ kernels compiled into device launchers and each call run as a cluster."""
from __future__ import annotations

from torch._inductor import config as inductor_config
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V

from torch_simhpu._inductor import config, cpp_backend, sources
from torch_simhpu._device_name import DEVICE_TYPE

_CPU_DEFINITION = "async_compile.cpp_pybinding("


class _LaunchesOnSimHPU:
    """What the module and its subgraphs (control flow) share: simhpu kernels are
    compiled into device launchers, and each launching line names the user's line."""

    def define_kernel(self, kernel_name, kernel_body, metadata=None, gpu=True, cpp_definition=None):
        # Inductor's C++ scheduling defines its kernels for the CPU's Python
        # binding; on simhpu they become launchers on the device's stream.
        device = V.graph.scheduler.current_device
        if device is not None and device.type == DEVICE_TYPE and kernel_body.startswith(_CPU_DEFINITION):
            kernel_body = (f"simhpu_compile_kernel(async_compile, {kernel_name!r}, "
                           + kernel_body[len(_CPU_DEFINITION):])
        super().define_kernel(kernel_name, kernel_body, metadata, gpu, cpp_definition)

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if device.type == DEVICE_TYPE and not triton:
            # A launcher from simhpu_compile_kernel: calling it queues the kernel.
            current = V.graph.scheduler.current_node
            self._mark_source([n.node for n in current.get_nodes()] if current is not None else [])
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)

    def generate_extern_kernel_out(self, node) -> None:
        self._mark_source([node])
        super().generate_extern_kernel_out(node)

    def generate_extern_kernel_alloc(self, node) -> None:
        self._mark_source([node])
        super().generate_extern_kernel_alloc(node)

    def generate_fallback_kernel(self, node) -> None:
        self._mark_source([node])
        super().generate_fallback_kernel(node)

    def _mark_source(self, ir_nodes) -> None:
        """Launches on the next line are reported at this user line (sources.py)."""
        source = sources.source_of(ir_nodes)
        if source is not None:
            self.writeline(sources.marker(source))



class SimHPUSubgraphWrapperCodegen(_LaunchesOnSimHPU, SubgraphPythonWrapperCodegen):
    """A subgraph (torch.cond, while_loop, invoke_subgraph): emitted inside the parent's module."""


class SimHPUWrapperCodegen(_LaunchesOnSimHPU, PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        cpp_backend.install_scheduler_choice()  # before Inductor builds the graph's scheduler
        if is_subgraph:
            return SimHPUSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return SimHPUWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.imports.splice(
            """
            from torch_simhpu._inductor.kernels import compile_kernel as simhpu_compile_kernel
            from torch_simhpu._inductor.cluster import clustered as simhpu_clustered
            from torch_simhpu._inductor.graphed import graphed as simhpu_graphed
            from torch_simhpu._inductor.sources import register as simhpu_register_sources
            """,
            strip=True,
        )

    def generate_end(self, result) -> None:
        super().generate_end(result)
        result.writeline("simhpu_register_sources(__file__)")
        device = _simhpu_device_index()
        if device is None:
            return
        if inductor_config.triton.cudagraphs:  # mode="reduce-overhead"
            mutated = tuple(i for i, name in enumerate(V.graph.graph_input_names) if name in V.graph.mutated_inputs)
            result.writeline(f"call = simhpu_graphed(call, {device}, mutated_inputs={mutated!r})")
        elif config.cluster:
            result.writeline(f"call = simhpu_clustered(call, {device})")


def _simhpu_device_index() -> int | None:
    """The simhpu device the graph runs on (its first, if several)."""
    indices = sorted(i for i in V.graph.device_idxs if i is not None)
    if DEVICE_TYPE not in V.graph.device_types:
        return None
    return indices[0] if indices else 0
