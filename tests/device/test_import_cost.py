"""What `import torch` pays for the installed wheel (its backend entry point imports torch_simhpu):
not graph mode's modules, which torch.compile imports when it is used (torch_simhpu/_after_import.py);
the time itself is benchmarks/import_time.py's. Child processes: an import is once per process."""
from helpers import python_output as run


def test_import_torch_leaves_dynamo_inductor_and_sympy_unimported():
    out = run("""
        import sys, torch
        print(torch.simhpu.device_count() > 0, [m for m in ("torch._dynamo", "torch._inductor", "sympy") if m in sys.modules])
    """)
    assert out.strip() == "True []", out


def test_graph_mode_registers_once_dynamo_is_imported():
    out = run("""
        import torch, torch_simhpu
        print(hasattr(torch.simhpu.manual_seed, "_torchdynamo_disable"))
        import torch._dynamo
        from torch._dynamo.device_interface import get_interface_for_device
        print(torch.simhpu.manual_seed._torchdynamo_disable, get_interface_for_device("simhpu").__name__)
        f = torch.compile(lambda x: torch_simhpu.npu_swish(x) * 2, fullgraph=True)
        x = torch.randn(16, device="simhpu")
        print(torch.allclose(f(x).cpu(), (x * torch.sigmoid(x) * 2).cpu()))
    """)
    assert out.split() == ["False", "True", "SimHPUInterface", "True"], out


def test_a_module_imported_later_still_runs_what_waits_for_it():
    out = run("""
        import sys
        from torch_simhpu._after_import import after_import
        after_import("colorsys", lambda: print("after colorsys"))  # imported by neither torch nor torch_simhpu
        print("before", "colorsys" in sys.modules)
        import colorsys
        after_import("colorsys", lambda: print("already there"))
    """)
    assert out.split("\n")[:3] == ["before False", "after colorsys", "already there"], out
