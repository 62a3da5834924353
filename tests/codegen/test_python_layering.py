"""The Python rooms keep their directions, as csrc's do (test_layering.py).

The device module's parts (torch.simhpu's streams, memory, graphs, properties) name no lens:
the lenses (the simulator in torch_simhpu/simulation/, the sanitizer, chaos scheduling) attach
their faces to torch.simhpu at registration. Inside the simulator, the HTML page takes the data
it draws and imports nothing of the simulator; and no import circle runs through the benchmarks'
driver (run.py): every benchmark takes its table helpers from tables.py.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "torch_simhpu"
DEVICE_MODULE = ("device.py", "streams.py", "memory.py", "graphs.py", "properties.py")
LENSES = ("torch_simhpu.simulation", "torch_simhpu.sanitizer", "torch_simhpu.chaos")


def imported(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function (`from a import b`: a and a.b)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def names_a_lens(name: str) -> bool:
    return any(name == lens or name.startswith(lens + ".") for lens in LENSES)


def test_the_device_module_names_no_lens():
    found = {(part, name) for part in DEVICE_MODULE for name in imported(PACKAGE / part) if names_a_lens(name)}
    assert not found, f"the device module imports a lens: {sorted(found)}"


def test_the_html_page_takes_what_it_draws():
    assert not {n for n in imported(PACKAGE / "simulation" / "html.py") if n.startswith("torch_simhpu")}


def test_the_simulator_is_one_folder():
    flat = {p.stem for p in PACKAGE.glob("*.py")}
    for room in ("pricing", "phantom", "simulated_ranks", "simulated_objects", "memory_ledger", "simulation_html",
                 "part_fit", "part_measure", "host_memory"):
        assert room not in flat, f"torch_simhpu/{room}.py belongs in torch_simhpu/simulation/"


def test_no_benchmark_imports_the_driver_back():
    back = {p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name != "run.py" and "run" in imported(p)}
    assert not back, f"benchmarks importing run.py: {sorted(back)}"
