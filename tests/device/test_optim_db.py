"""PyTorch's optimizer database (common_optimizers.optim_db) on simhpu, against
the CPU from the same start.

Every OptimizerInfo's inputs (its hyperparameter variants), in each form the
optimizer has: its default, foreach, the for-loop, fused, and capturable (the
forms that keep step counts on the device). The CPU runs the plain form with the
same hyperparameters as the reference; both take the same gradients for a few
steps, and the parameters and every state tensor must agree.
"""
import warnings

import pytest
import torch
from torch.testing._internal.common_optimizers import optim_db

DEVICE = "simhpu"
STEPS = 3
TOLERANCE = dict(atol=2e-5, rtol=2e-5)


def _forms(info):
    yield "default", {}
    if "foreach" in info.supported_impls:
        yield "foreach", {"foreach": True}
        yield "for-loop", {"foreach": False}
    if "fused" in info.supported_impls:
        yield "fused", {"fused": True}
    if info.has_capturable_arg:
        yield "capturable", {"capturable": True}


def _cases():
    for info in optim_db:
        for form, extra in _forms(info):
            yield pytest.param(info, extra, id=f"{info.optim_cls.__name__}-{form}")


def _parameters(device, matrices_only, dtype):
    torch.manual_seed(0)
    shapes = [(4, 5), (3, 4)] if matrices_only else [(4, 5), (5,)]
    return [torch.nn.Parameter(torch.randn(shape).to(device, dtype)) for shape in shapes]


def _dtype(kwargs):
    # A line search branches on comparisons of sums, so a last-bit difference in
    # one (the device's and the CPU's reductions add in different orders, and the
    # CPU's order depends on its vector width) can send the two runs down
    # different branches. In float64 such a difference is far below the margins
    # the comparisons work with.
    return torch.float64 if kwargs.get("line_search_fn") else torch.float32


def _gradients(info, step, params):
    generator = torch.Generator().manual_seed(100 + step)
    grads = []
    for p in params:
        g = torch.randn(p.shape, generator=generator)
        if info.only_supports_sparse_grads:
            g = (g * (torch.rand(p.shape, generator=generator) > 0.5)).to_sparse()
        grads.append(g)
    return grads


def _run(info, kwargs, device, matrices_only):
    params = _parameters(device, matrices_only, _dtype(kwargs))
    optimizer = info.optim_cls(params, **kwargs)
    for step in range(STEPS):
        for p, g in zip(params, _gradients(info, step, params)):
            p.grad = g.to(device, p.dtype)
        if info.step_requires_closure:
            optimizer.step(lambda: (params[0] ** 2).sum())
        else:
            optimizer.step()
    return params, optimizer.state_dict()["state"]


@pytest.mark.parametrize("info, form", list(_cases()))
def test_optim_db_matches_the_cpu(info, form):
    # Muon takes matrices only.
    matrices_only = info.optim_cls.__name__ == "Muon"
    ran = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for optim_input in info.optim_inputs_func(device="cpu"):
            kwargs = dict(optim_input.kwargs)
            if form and ({"foreach", "fused"} & set(form)) and ({"foreach", "fused"} & set(kwargs)):
                continue  # the input chooses the implementation itself
            expected_params, expected_state = _run(info, kwargs, "cpu", matrices_only)
            actual_params, actual_state = _run(info, {**kwargs, **form}, DEVICE, matrices_only)
            what = f"{optim_input.desc} ({kwargs})"
            for i, (e, a) in enumerate(zip(expected_params, actual_params)):
                assert a.device.type == DEVICE
                torch.testing.assert_close(a.detach().cpu(), e.detach(), **TOLERANCE,
                                           msg=lambda m, i=i: f"{what}: parameter {i}: {m}")
            for index, state in expected_state.items():
                for name, e in state.items():
                    if isinstance(e, torch.Tensor):
                        a = torch.as_tensor(actual_state[index][name]).cpu().to(e.dtype)
                        torch.testing.assert_close(a, e, **TOLERANCE,
                                                   msg=lambda m, name=name: f"{what}: state {name}: {m}")
            ran += 1
    assert ran, "no optimizer input ran"
