"""Every schema of the installed torch's native_functions.yaml goes through
codegen's schema and default checks without a traceback (issue 37: ATen's own
`int[1] dim=[]` raised IndexError). A default codegen refuses is refused with a
reason and a fix, and only for the reasons listed here."""
from __future__ import annotations

import os

import pytest
import torchgen
import yaml
from torchgen.model import FunctionSchema

NATIVE_FUNCTIONS = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native",
                                "native_functions.yaml")

# What codegen refuses in ATen's schemas, on purpose: a generated binding takes a
# dtype default of None only, and a str default is a short plain word (a quote or
# a backslash would have to be escaped into two languages).
REFUSED = {
    ("ScalarType?", "can only default to None"),
    ("str", "which is not a valid str"),
}


@pytest.fixture(scope="module")
def aten_arguments():
    with open(NATIVE_FUNCTIONS) as f:
        entries = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    arguments = []
    for entry in entries:
        schema = FunctionSchema.parse(entry["func"])
        arguments += [(str(schema.name), a) for a in schema.arguments.flat_all]
    assert len(entries) > 2000 and len(arguments) > 8000
    return arguments


def test_every_aten_default_is_accepted_or_refused_with_a_reason(types, aten_arguments):
    refused = []
    for op, argument in aten_arguments:
        if types.base_type(argument.type) not in types.SUPPORTED_ARG_TYPES:
            continue
        problem = types.check_default(argument)
        if problem is None:
            if argument.default is not None:  # written into C++ and Python without a traceback
                assert types.cpp_default(argument) and types.python_default(argument)
                assert types.stub_type(argument)
            continue
        reason, fix = problem
        assert reason.startswith(f"argument '{argument.name}'") and fix, (op, problem)
        kind = str(argument.type)
        assert any(kind == k and r in reason for k, r in REFUSED), f"{op}: {argument}: {problem}"
        refused.append(op)
    assert len(refused) < 20, refused


@pytest.mark.parametrize("schema,cpp", [
    ("amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor", "std::vector<int64_t>{}"),
    ("norm(Tensor self, int[1] dim=[-2,-1]) -> Tensor", "std::vector<int64_t>{-2, -1}"),
    ("pool(Tensor self, int[2] stride=[]) -> Tensor", "std::vector<int64_t>{}"),
    ("loss(Tensor self, int reduction=Mean) -> Tensor", "1"),
])
def test_atens_list_and_named_defaults_become_values(types, schema, cpp):
    argument = FunctionSchema.parse(schema).arguments.flat_all[-1 if "reduction" in schema else 1]
    assert types.check_default(argument) is None
    assert types.cpp_default(argument) == cpp


def test_a_fixed_size_list_of_the_wrong_length_is_still_refused(types):
    argument = FunctionSchema.parse("f(Tensor self, int[2] zz=[1,2,3]) -> Tensor").arguments.flat_all[1]
    reason, fix = types.check_default(argument)
    assert "of 3 value(s) where the type holds 2" in reason and "write 2 values" in fix


# -- ATen's functional schemas as whole entries (issue 43) ---------------------------------------
# Each schema goes through load_project alone, as an official entry and as a custom composite
# calling its aten operator: the outcome is an accepted operator or CodegenError's problems, never
# a traceback; a sample of the accepted composites is compiled. SIMHPU_ATEN_SCHEMAS sets how many
# schemas a run tries (CI: 120 of ~1,500, by SIMHPU_FUZZ_SEED; 0: all of them).
import random  # noqa: E402
import shutil  # noqa: E402

from test_codegen_fuzz import SEED, compile_cpp  # noqa: E402

SAMPLE = int(os.environ.get("SIMHPU_ATEN_SCHEMAS", "120"))
RANDOM_NAMES = ("rand", "dropout", "Generator")


def functional_schemas():
    with open(NATIVE_FUNCTIONS) as f:
        entries = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    schemas = []
    for entry in entries:
        schema = FunctionSchema.parse(entry["func"])
        if not (schema.is_out_fn() or schema.name.name.inplace or any(a.annotation for a in schema.arguments.flat_all)):
            schemas.append(entry["func"])
    rng = random.Random(SEED)
    return schemas if SAMPLE == 0 else rng.sample(schemas, min(SAMPLE, len(schemas)))


def as_custom_composite(func: str) -> dict:
    schema = FunctionSchema.parse(func)
    name = "npu_" + str(schema.name).replace(".", "_")
    entry = {"func": func.replace(f"{schema.name}(", f"{name}(", 1),
             "composite": f"at::{schema.name.name}({', '.join(a.name for a in schema.arguments.flat_all)})"}
    if any(word in func for word in RANDOM_NAMES):
        entry["tags"] = ["nondeterministic_seeded"]
    return entry


def load_alone(codegen, root, kind: str, entry: dict):
    (root / "op_plugin_functions.yaml").write_text(yaml.safe_dump(
        {"backend": "simhpu", "namespace": "npu", kind: [entry]}, sort_keys=False))
    try:
        return codegen.load_project(str(root))
    except codegen.CodegenError:
        return None


@pytest.fixture
def bare_root(tmp_path):
    (tmp_path / "csrc").mkdir()
    shutil.copytree(os.path.join(os.path.dirname(__file__), "..", "..", "csrc", "autograd"), tmp_path / "csrc" / "autograd")
    (tmp_path / "derivatives.yaml").write_text("[]\n")
    return tmp_path


def test_atens_schemas_as_entries_load_or_are_refused_without_a_traceback(codegen, emit, bare_root, tmp_path):
    accepted = []
    for func in functional_schemas():
        official = {"func": func, "exec": "add, self, other, alpha, out", "out": {"size": "self", "dtype": "self"},
                    "dtypes": ["float32"]}
        load_alone(codegen, bare_root, "official", official)  # a CodegenError at most
        entry = as_custom_composite(func)
        if load_alone(codegen, bare_root, "custom", entry) is not None:
            accepted.append(entry)
    assert accepted
    # What check accepts compiles: a few of the accepted, those passing SymInts first.
    sample = sorted(accepted, key=lambda e: "SymInt" not in e["func"])[:3]
    (bare_root / "op_plugin_functions.yaml").write_text(yaml.safe_dump(
        {"backend": "simhpu", "namespace": "npu", "custom": sample}, sort_keys=False))
    files = emit.render(codegen.load_project(str(bare_root)))
    compile_cpp(files, sorted(r for r in files if r.startswith("csrc/adapters/")), tmp_path / "generated")
