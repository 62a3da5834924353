"""torch.compile(model, backend="simhpu"): Inductor with every call of a
compiled graph launched as one cluster, whatever torch_simhpu._inductor.config
says (the default compiler clusters too, unless that config turns it off)."""
from __future__ import annotations

from torch._dynamo import register_backend

from torch_simhpu._inductor import config


def _compile_clustered(*args, **kwargs):
    from torch._inductor.compile_fx import compile_fx_inner

    with config.patch(cluster=True):
        return compile_fx_inner(*args, **kwargs)


@register_backend(name="simhpu")
def simhpu(graph_module, example_inputs, **kwargs):
    from torch._inductor.compile_fx import compile_fx

    # inner_compile compiles the forward now and the backward at the first
    # backward pass; both under the patch.
    return compile_fx(graph_module, example_inputs, inner_compile=_compile_clustered, **kwargs)
