"""torch_simhpu.op_plugin_references: op-plugin's custom operators given kernels by references in YAML.
Each test uses a namespace of its own (registrations last the process)."""
import itertools
import textwrap
from pathlib import Path

import pytest
import torch
import torch_simhpu
from torch.testing import assert_close

from torch_simhpu.codegen.errors import CodegenError
from torch_simhpu.op_plugin_references import load_references

CORPUS = Path(__file__).resolve().parents[1] / "codegen" / "op_plugin_dialect" / "op_plugin_functions.yaml"
_names = (f"simhpu_refs{i}" for i in itertools.count())


def references(tmp_path, text: str) -> Path:
    path = tmp_path / "references.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_reference_is_the_operators_kernel_with_autograd_and_a_fake(tmp_path):
    namespace = next(_names)
    path = references(tmp_path, """\
        custom:
          - func: scaled_tanh(Tensor self, float scale=2.0) -> Tensor
            reference: torch.tanh(self) * scale
          - func: halves(Tensor self) -> (Tensor, Tensor)
            reference: helpers.halves(self)
        """)
    loaded = load_references(path, namespace, helpers={"helpers": type("H", (), {"halves": staticmethod(
        lambda x: tuple(x.chunk(2, -1)))})})
    assert loaded.defined == ["scaled_tanh", "halves"]
    ops = getattr(torch.ops, namespace)
    x = torch.randn(3, 4, dtype=torch.float64)
    assert_close(ops.scaled_tanh(x.to("simhpu")).cpu(), torch.tanh(x) * 2)
    assert_close(ops.scaled_tanh(x.to("simhpu"), 0.5).cpu(), torch.tanh(x) * 0.5)
    first, second = ops.halves(x.to("simhpu"))
    assert not first._is_view() and torch.equal(second.cpu(), x[:, 2:])  # outputs never alias an input
    leaf = x.to("simhpu").requires_grad_()
    assert torch.autograd.gradcheck(lambda t: ops.scaled_tanh(t), (leaf,))
    torch.library.opcheck(ops.halves.default, (x.to("simhpu"),))
    with torch._subclasses.FakeTensorMode():
        assert ops.scaled_tanh(torch.empty(5, 2, device="simhpu")).shape == (5, 2)


def test_a_tensor_on_another_device_is_refused(tmp_path):
    namespace = next(_names)
    load_references(references(tmp_path, "custom:\n  - func: twice(Tensor self) -> Tensor\n    reference: self * 2\n"),
                    namespace)
    with pytest.raises(RuntimeError, match=f"{namespace}::twice: argument 'self' is on cpu"):
        getattr(torch.ops, namespace).twice(torch.ones(2))


def test_an_argument_the_adapter_reads_on_the_host_must_be_a_cpu_tensor(tmp_path):
    namespace = next(_names)
    load_references(references(tmp_path, """\
        custom:
          - func: take_first(Tensor self, Tensor lengths) -> Tensor
            reference: self[:lengths.tolist()[0]]
            host: [lengths]
        """), namespace)
    take_first = getattr(torch.ops, namespace).take_first
    x = torch.arange(6.0)
    assert_close(take_first(x.to("simhpu"), torch.tensor([4])).cpu(), x[:4])
    with pytest.raises(RuntimeError, match=f"{namespace}::take_first: argument 'lengths' is on simhpu:0; the kernel "
                                           "reads it on the host, so it must be a CPU tensor"):
        take_first(x.to("simhpu"), torch.tensor([4], device="simhpu"))
    with pytest.raises(RuntimeError, match="argument 'self' is on cpu"):
        take_first(x, torch.tensor([4]))


def test_simhpus_own_operator_of_the_name_is_kept(tmp_path):
    path = references(tmp_path, "custom:\n  - func: npu_swish(Tensor self, float beta=1.0) -> Tensor\n"
                                "    reference: self * 0\n")
    loaded = load_references(path, "npu")
    assert loaded.kept == ["npu_swish"] and not loaded.defined
    x = torch.randn(8)
    assert_close(torch.ops.npu.npu_swish(x.to("simhpu")).cpu(), x * torch.sigmoid(x))


@pytest.mark.parametrize("text,where,message", [
    ("custom:\n  - func: f(Tensor self) -> Tensor\n    reference: os.system(1)\n", ":3:",
     "names 'os', which is neither an argument nor torch"),
    ("custom:\n  - func: f(Tensor self) -> Tensor\n    reference: self.__class__\n", ":3:", "starts with '_'"),
    ("custom:\n  - func: f(Tensor self) -> Tensor\n    reference: \"(lambda: self)()\"\n", ":3:", "'Lambda' is not allowed"),
    ("custom:\n  - func: f(Tensor self -> Tensor\n    reference: self\n", ":2:", "the schema does not parse"),
    ("custom:\n  - func: f(Tensor self) -> Tensor\n    reference: self\n    exec: k, self\n", ":4:",
     "field 'exec': a references file has func:, reference:, tags:, host: and doc: only"),
    ("custom:\n  - func: f(Tensor self, int n) -> Tensor\n    reference: self\n    host: [n]\n", ":4:",
     "field 'host': expected a list of the schema's tensor arguments"),
    ("custom:\n  - func: f(Tensor self) -> Tensor\n    reference: self\n    tags: [made_up]\n", ":4:",
     "field 'tags': expected a list of torch.Tag names"),
    ("custom:\n  - func: f(Tensor self) -> Tensor\n    reference: self\n  - func: f(Tensor x) -> Tensor\n"
     "    reference: x\n", ":4:", "f has a reference already, at line 2"),
])
def test_file_problems_are_named_at_their_line_before_anything_registers(tmp_path, text, where, message):
    namespace = next(_names)
    with pytest.raises(CodegenError, match=message.replace("(", r"\(").replace(")", r"\)")) as raised:
        load_references(references(tmp_path, text), namespace)
    assert f"references.yaml{where}" in str(raised.value)
    assert not hasattr(getattr(torch.ops, namespace), "f")


def test_with_op_plugins_yaml_a_reference_replaces_the_missing_kernel_and_its_rules_are_checked(tmp_path):
    namespace = next(_names)
    path = references(tmp_path, """\
        custom:
          - func: npu_scaled_mask(Tensor x, Tensor mask, float scale) -> Tensor
            reference: torch.where(mask, x * scale, x).to(torch.float64)
          - func: npu_only_here(Tensor x) -> Tensor
            reference: x + 1
        """)
    loaded = torch_simhpu.load_op_plugin(CORPUS, namespace, references=path)
    assert {"npu_scaled_mask", "npu_only_here"} <= set(loaded.referenced)
    assert "npu_scaled_mask" not in loaded.defined
    ops = getattr(torch.ops, namespace)
    x = torch.ones(2, 2, dtype=torch.float64, device="simhpu")
    assert_close(ops.npu_scaled_mask(x, x > 0, 0.5).cpu(), torch.full((2, 2), 0.5, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"npu_scaled_mask \(.*op_plugin_functions.yaml:\d+\): gen_opapi's rule "
                                           r"for output 0 gives size \[2, 2\] and dtype float32, where the reference "
                                           r"computes \[2, 2\] and float64"):
        ops.npu_scaled_mask(x.float(), x > 0, 0.5)
    assert ops.npu_only_here(x).sum().item() == 8


def test_a_reference_whose_schema_is_not_the_entrys_is_refused(tmp_path):
    path = references(tmp_path, "custom:\n  - func: npu_scaled_mask(Tensor x, Tensor mask, float s) -> Tensor\n"
                                "    reference: x\n")
    with pytest.raises(ValueError, match=r"references.yaml:2: npu_scaled_mask's schema is not the one .*"
                                         r"op_plugin_functions.yaml:\d+ declares"):
        torch_simhpu.load_op_plugin(CORPUS, next(_names), references=path)


def test_a_reference_giving_other_values_than_its_schema_returns_is_named(tmp_path):
    namespace = next(_names)
    load_references(references(tmp_path, "custom:\n  - func: two(Tensor self) -> (Tensor, Tensor)\n"
                                          "    reference: self * 2\n"), namespace)
    with pytest.raises(RuntimeError, match=rf"{namespace}::two \(.*references.yaml:2\): its reference gives 1 values"):
        getattr(torch.ops, namespace).two(torch.ones(2, device="simhpu"))
    assert torch.ones(2, device="simhpu").sum().item() == 2
