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
