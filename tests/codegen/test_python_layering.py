"""The Python rooms keep their directions, as csrc's do (test_layering.py).

codegen/ is front ends -> one typed model -> back ends: a front end (simhpu's YAML, op-plugin's
dialect, derivatives.yaml) imports the model and the shared readers, never a back end (dest/, emit)
nor another front end; the model imports no front end and no back end; the back ends read the model
alone; project.py is the one module that knows every front end.

The device module (torch_simhpu/device/: torch.simhpu and its streams, memory, graphs, properties)
names no lens:
the lenses (the simulator in torch_simhpu/simulation/, the sanitizer, chaos scheduling) attach
their faces to torch.simhpu at registration. Inside the simulator, the HTML page takes the data
it draws and imports nothing of the simulator; and no import circle runs through the benchmarks'
driver (run.py): every benchmark takes its table helpers from tables.py.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "torch_simhpu"
DEVICE_MODULE = tuple(p.relative_to(PACKAGE) for p in sorted((PACKAGE / "device").glob("*.py")))
LENSES = ("torch_simhpu.simulation", "torch_simhpu.sanitizer", "torch_simhpu.chaos")


def import_statements(path: Path):
    """(module, names) for each import a file makes, at its top or inside a function, relative
    imports made absolute: `import a` is (a, ()), `from a import b, c` is (a, (b, c))."""
    package = path.relative_to(ROOT).parent.parts
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else ()
            yield ".".join([*base, *(node.module.split(".") if node.module else [])]), tuple(a.name for a in node.names)


def imported(path: Path) -> set[str]:
    """Every module a file imports, and what it takes from each (`from a import b`: a and a.b)."""
    return {name for module, names in import_statements(path) for name in (module, *(f"{module}.{n}" for n in names))}


CODEGEN = ROOT / "codegen"
FRONT_ENDS = ("codegen.simhpu_yaml", "codegen.op_plugin", "codegen.derivatives")
BACK_ENDS = ("codegen.dest", "codegen.emit")


def under(name: str, rooms) -> str | None:
    return next((room for room in rooms if name == room or name.startswith(room + ".")), None)


def codegen_imports(folder: str) -> set[tuple[str, str]]:
    return {(str(p.relative_to(ROOT)), name) for p in sorted((CODEGEN / folder).rglob("*.py")) for name in imported(p)}


def test_a_front_end_imports_no_back_end_and_no_other_front_end():
    for front in FRONT_ENDS:
        folder = front.split(".")[1]
        found = {(f, n) for f, n in codegen_imports(folder) if under(n, BACK_ENDS) or under(n, FRONT_ENDS) not in (None, front)}
        assert not found, f"{front} reaches past the model: {sorted(found)}"


def test_the_model_imports_no_front_end_and_no_back_end():
    found = {(f, n) for f, n in codegen_imports("model") if under(n, FRONT_ENDS + BACK_ENDS)}
    assert not found, f"the model imports a front or back end: {sorted(found)}"


def test_the_back_ends_read_the_model_alone():
    found = {(f, n) for f, n in codegen_imports("dest") if under(n, FRONT_ENDS)}
    assert not found, f"a back end imports a front end: {sorted(found)}"


def test_only_project_knows_every_front_end():
    knowing = {str(p.relative_to(ROOT)) for p in CODEGEN.glob("*.py")
               if len({under(n, FRONT_ENDS) for n in imported(p)} - {None}) > 1}
    assert knowing <= {"codegen/project.py"}, f"modules that know several front ends: {sorted(knowing)}"


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


def module_graph(top: str) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports (inside functions too): `from a import b` is an
    edge to a.b where b is a module, to a where b is a name a defines. The root package's own
    __init__ is left out as a target: every module imports the native _C through it."""
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / top).rglob("*.py")}

    def known(name):
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for module, path in files.items():
        targets = set()
        for source, names in import_statements(path):
            submodules = {f"{source}.{name}" for name in names} & files.keys()
            targets.update(submodules)
            if not names or len(submodules) < len(names):
                targets.add(known(source))
        graph[module] = targets - {"", module, top}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module."""
    order, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        order[v] = low[v] = len(order)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in order:
            visit(v)
    return found


def test_no_import_circle():
    for top in ("torch_simhpu", "codegen"):
        assert not circles(module_graph(top)), f"import circles in {top}/: {circles(module_graph(top))}"


def test_no_benchmark_imports_the_driver_back():
    back = {p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name != "run.py" and "run" in imported(p)}
    assert not back, f"benchmarks importing run.py: {sorted(back)}"
