"""How one operator looks in each generated language: small frozen views
built from the model, the only things templates receive.

An OpView is everything the generators need to know about one Operator:
its C++ signatures (functional, out=, in-place), its Python bindings, the
checks its adapter and its fake kernel both make, its outputs, its autograd
node and, for elementwise ops, its generated kernel.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from torchgen.api import cpp
from torchgen.model import FunctionSchema
from torchgen.native_function_generation import functional_to_out_signature

from ..model import rules as rule_lang
from ..model.operators import Operator, output_names
from ..model.types import (KERNEL_NUMBER_TYPES, base_type, binding_param, cpp_default, dispatcher_signature,
                    python_default, stub_type)


@dataclass(frozen=True)
class CppSignature:
    """A schema as a C++ function the dispatcher calls."""
    schema: str
    name: str  # npu_op, npu_op.out, add.Tensor
    base_name: str
    overload: str
    cpp_name: str  # a C++ identifier: npu_op_out, add_Tensor
    returns: str
    param_types: tuple[str, ...]
    arg_names: tuple[str, ...]

    @property
    def params(self) -> str:
        return ", ".join(f"{t} {n}" for t, n in zip(self.param_types, self.arg_names))

    @property
    def fn_type(self) -> str:
        return f"{self.returns} ({', '.join(self.param_types)})"

    @staticmethod
    def of(schema: FunctionSchema) -> CppSignature:
        returns, params, _ = dispatcher_signature(schema)
        return CppSignature(str(schema), str(schema.name), str(schema.name.name), schema.name.overload_name,
                            str(schema.name).replace(".", "_"), returns, tuple(t for t, _ in params),
                            tuple(n for _, n in params))

    @staticmethod
    def mutating(schema: FunctionSchema) -> CppSignature:
        """A mutating variant, registered as returning nothing.

        torch.compile's functionalization accepts custom ops that mutate their
        arguments but not ones whose outputs alias them, so the schema ends in
        `-> ()` (torchgen's model, made for aten, cannot express that for out=
        ops, hence the rewrite after it computed the argument types). The
        Python functions still return the tensors they wrote."""
        full = CppSignature.of(schema)
        return dataclasses.replace(full, schema=full.schema.rsplit(" -> ", 1)[0] + " -> ()", returns="void")


@dataclass(frozen=True)
class PyArgument:
    """An argument of the pybind11 binding and the Python stub."""
    name: str
    ptype: str  # pybind11 parameter type
    convert: str  # C++ expression turning it into the dispatcher's type
    kw_only: bool
    default: str | None  # C++
    stub_type: str
    py_default: str | None


@dataclass(frozen=True)
class OutputView:
    name: str
    size: str  # C++ expression
    dtype: str
    size_py: str  # Python expression
    dtype_py: str
    text: str  # the rule as written
    # An elementwise output of an aten operator (size: broadcast(...)): laid out in the
    # order of these operands' strides, as PyTorch's TensorIterator lays it out.
    layout_of: tuple[str, ...] = ()


@dataclass(frozen=True)
class Check:
    """One argument check, as the adapter (C++) and the fake kernel (Python) make it."""
    cpp: str
    py: str


@dataclass(frozen=True)
class SavedValue:
    """A value the backward needs, stored on the autograd node."""
    name: str
    tensor: bool
    decl: str
    field: str
    expr: str
    is_output: bool = False
    index: int = 0  # which output, for saved outputs


@dataclass(frozen=True)
class Formula:
    formula: str
    slots: tuple[int, ...]  # the positions of the inputs it computes gradients for
    uses_mask: bool


@dataclass(frozen=True)
class AutogradView:
    node: str
    tensor_args: tuple[str, ...]
    diff_args: tuple[str, ...]
    no_formula_args: tuple[str, ...]
    single_grad: bool
    derivatives: tuple[Formula, ...]
    saved: tuple[SavedValue, ...]
    saved_outputs: tuple[SavedValue, ...]
    differentiable_outputs: tuple[int, ...]
    aten_calls: tuple[str, ...]
    output_shapes: bool  # several differentiable outputs: zeros stand in for an unused one

    @property
    def saved_tensors(self) -> tuple[SavedValue, ...]:
        return tuple(s for s in self.saved + self.saved_outputs if s.tensor)


@dataclass(frozen=True)
class ElementwiseView:
    kernel: str
    expression: str  # as written in the YAML
    cpp: str
    params: str
    args: str
    tensors: tuple[str, ...]
    numbers: tuple[tuple[str, str], ...]  # (name, conversion to acc_t)
    dtypes: tuple[tuple[str, str], ...]  # (ScalarType enum, C++ type)


@dataclass(frozen=True)
class OpView:
    op: Operator
    namespace: str
    signature: CppSignature
    out_variant: CppSignature | None
    inplace_variant: CppSignature | None
    bindings: tuple[PyArgument, ...]
    tensors: tuple[str, ...]  # plain Tensor arguments
    promoted: tuple[str, ...]  # cast to the promoted dtype before the kernel runs
    checks: tuple[Check, ...]  # device, dtype and the entry's own checks, in that order
    outputs: tuple[OutputView, ...]
    launch_args: tuple[str, ...]  # C++ arguments of the kernel launch (exec) or the op_plugin call (adapter)
    autograd: AutogradView | None
    elementwise: ElementwiseView | None

    @property
    def name(self) -> str:
        return self.signature.name

    @property
    def cpp_name(self) -> str:
        return self.signature.cpp_name

    @property
    def first(self) -> str:
        """The first Tensor argument: it decides the device."""
        return self.tensors[0]

    @property
    def variants(self) -> tuple[CppSignature, ...]:
        return tuple(v for v in (self.signature, self.out_variant, self.inplace_variant) if v)

    @property
    def dtypes_cpp(self) -> str:
        return ", ".join(rule_lang.DTYPES[d][0] for d in self.op.dtypes)

    @property
    def return_expr(self) -> str:
        names = [o.name for o in self.outputs]
        return names[0] if len(names) == 1 else "{" + ", ".join(names) + "}"

    @property
    def stub_returns(self) -> str:
        n = len(self.op.schema.returns)
        return "Tensor" if n == 1 else "tuple[" + ", ".join(["Tensor"] * n) + "]"


def out_schema(schema: FunctionSchema) -> FunctionSchema:
    """The out= variant, its out arguments named like the functional op's outputs."""
    out = functional_to_out_signature(schema)
    renamed = tuple(dataclasses.replace(a, name=n) for a, n in zip(out.arguments.out, output_names(schema)))
    return dataclasses.replace(out, arguments=dataclasses.replace(out.arguments, out=renamed))


def inplace_schema(schema: FunctionSchema) -> FunctionSchema:
    """The in-place variant: writes into its first argument, `self`."""
    args = str(schema.arguments)
    assert args.startswith("Tensor self")
    return FunctionSchema.parse(f"{schema.name.name.base}_(Tensor(a!) self{args[len('Tensor self'):]}) -> Tensor(a!)")


def op_view(op: Operator, namespace: str) -> OpView:
    args = list(op.schema.arguments.flat_all)
    tensors = tuple(a.name for a in args if base_type(a.type) == "Tensor")
    promoted = _promoted(op)
    written = {o.name for o in op.outputs}
    operands = {}
    for t in tensors:
        expr = f"{t}_" if (op.kind == "official" or t in promoted) else t
        operands[t] = f"{expr}.contiguous()" if op.contiguous else expr
    if op.implementation == "adapter":  # the schema's arguments, then the outputs (op_plugin.h)
        launch_args = (*(operands.get(a.name, a.name) for a in args), *(o.name for o in op.outputs))
    else:  # the exec: arguments, outputs marked as written
        launch_args = tuple(f"written({a})" if a in written else operands.get(a, a) for a in op.exec_args)
    return OpView(
        op=op, namespace=namespace,
        signature=CppSignature.of(op.schema),
        out_variant=CppSignature.mutating(out_schema(op.schema)) if "out" in op.variants else None,
        inplace_variant=CppSignature.mutating(inplace_schema(op.schema)) if "inplace" in op.variants else None,
        bindings=tuple(_binding(a, op.name, a in op.schema.arguments.flat_kwarg_only) for a in args),
        tensors=tensors,
        promoted=promoted,
        checks=_checks(op, tensors, promoted) if op.kind == "custom" else _rule_checks(op),
        outputs=tuple(OutputView(o.name, rule_lang.to_cpp(o.size), rule_lang.to_cpp(o.dtype),
                                 rule_lang.to_python(o.size), rule_lang.to_python(o.dtype), o.text,
                                 layout_of=tuple(o.size.arg_names())
                                 if op.kind == "official" and o.size.fn == "broadcast" else ())
                      for o in op.outputs),
        launch_args=launch_args,
        autograd=_autograd_view(op),
        elementwise=_elementwise_view(op),
    )


def _binding(a, op_name: str, kw_only: bool) -> PyArgument:
    ptype, convert = binding_param(a, op_name)
    return PyArgument(a.name, ptype, convert, kw_only, None if a.default is None else cpp_default(a), stub_type(a),
                      None if a.default is None else python_default(a))


def _promoted(op: Operator) -> tuple[str, ...]:
    for o in op.outputs:
        if o.dtype.fn == "promote":
            return tuple(o.dtype.arg_names())
    return ()


def _quoted(names) -> str:
    return ", ".join(f'"{n}"' for n in names)


def _checks(op: Operator, tensors: tuple[str, ...], promoted: tuple[str, ...]) -> tuple[Check, ...]:
    """What a custom op's adapter checks before it launches: devices, dtypes,
    then the entry's own checks. The fake kernel makes the same checks."""
    if op.implementation == "composite":
        return ()
    first = tensors[0]
    others = [a.name for a in op.schema.arguments.flat_all
              if base_type(a.type) in ("Tensor", "Tensor?", "Tensor[]") and a.name != first]
    checks = [Check(f'rules::check_device(kOpName, "{first}", {first})',
                    f'_rules.check_device(_op, "{first}", {first})')]
    checks += [Check(f'rules::check_device(kOpName, "{t}", {t}, {first})',
                     f'_rules.check_device(_op, "{t}", {t}, {first})') for t in others]
    dtypes = ", ".join(rule_lang.DTYPES[d][0] for d in op.dtypes)
    dtypes_py = ", ".join(f"torch.{d}" for d in op.dtypes)
    if promoted:
        checks.append(Check(
            f"rules::check_compute_dtype(kOpName, {{{_quoted(promoted)}}}, _compute_dtype, {{{dtypes}}})",
            f"_rules.check_compute_dtype(_op, [{_quoted(promoted)}], _compute_dtype, [{dtypes_py}])"))
    else:
        checks.append(Check(f'rules::check_dtype(kOpName, "{first}", {first}, {{{dtypes}}})',
                            f'_rules.check_dtype(_op, "{first}", {first}, [{dtypes_py}])'))
        checks += [Check(f'rules::check_same_dtype(kOpName, "{t}", {t}, "{first}", {first})',
                         f'_rules.check_same_dtype(_op, "{t}", {t}, "{first}", {first})') for t in tensors[1:]]
    # A Scalar the kernel cannot convert would fail only on the worker; the host can tell now.
    dtype_cpp, dtype_py = ("_compute_dtype", "_compute_dtype") if promoted else (f"{first}.scalar_type()", f"{first}.dtype")
    checks += [Check(f'rules::check_scalar_fits(kOpName, "{a.name}", {a.name}, {dtype_cpp})',
                     f'_rules.check_scalar_fits(_op, "{a.name}", {a.name}, {dtype_py})')
               for a in op.schema.arguments.flat_all if base_type(a.type) in ("Scalar", "Scalar?")]
    return tuple(checks) + _rule_checks(op)


def _rule_checks(op: Operator) -> tuple[Check, ...]:
    checks = [Check(rule_lang.to_cpp(c), rule_lang.to_python(c)) for c in op.checks]
    if op.elementwise and op.outputs[0].size.fn not in ("broadcast", "same"):
        # The kernel broadcasts its inputs to a declared output shape: check they do.
        size_cpp, size_py = rule_lang.to_cpp(op.outputs[0].size), rule_lang.to_python(op.outputs[0].size)
        for t in op.elementwise.tensors:
            checks.append(Check(f'rules::check_broadcastable(kOpName, "{t}", {t}, {size_cpp})',
                                f'_rules.check_broadcastable(_op, "{t}", {t}, {size_py})'))
    return tuple(checks)


def _saved_value(saved, is_output: bool, index: int = 0) -> SavedValue:
    """How a value torchgen says the backward needs is stored on the Node."""
    name = saved.nctype.name
    ctype = saved.nctype.type.remove_const_ref().cpp_type()
    if ctype in ("at::Tensor", "::std::optional<at::Tensor>"):
        return SavedValue(name, True, f"torch::autograd::SavedVariable {name}_", f"{name}_", saved.expr,
                          is_output, index)
    vector_of = {"c10::SymIntArrayRef": "c10::SymInt", "at::IntArrayRef": "int64_t"}
    if ctype in vector_of:
        return SavedValue(name, False, f"std::vector<{vector_of[ctype]}> {name}", name, f"{saved.expr}.vec()",
                          is_output, index)
    # An optional list is a view too: kept as ATen's own autograd keeps it (a list or none,
    # handed to the formula as the optional view again).
    optional_vector_of = {"at::OptionalIntArrayRef": "int64_t", "at::OptionalSymIntArrayRef": "c10::SymInt",
                          "::std::optional<at::ArrayRef<double>>": "double"}
    if ctype in optional_vector_of:
        return SavedValue(name, False, f"c10::OptionalArray<{optional_vector_of[ctype]}> {name}", name, saved.expr,
                          is_output, index)
    if ctype == "c10::string_view":
        ctype = "std::string"
    if ctype == "::std::optional<c10::string_view>":  # (kept as a string: the view would dangle)
        ctype = "std::optional<std::string>"
    return SavedValue(name, False, f"{ctype} {name}", name, saved.expr, is_output, index)


def _autograd_view(op: Operator) -> AutogradView | None:
    info = op.derivative
    if info is None:
        return None
    diff_args = [a.name for a in info.args_with_derivatives]
    differentiable = info.output_differentiability or [True] * len(op.schema.returns)
    return_names = [n if n != "self" else "result" for n in cpp.return_names(info.func)]
    formulas = tuple(Formula(d.formula, tuple(diff_args.index(v) for v in d.var_names),
                             "grad_input_mask" in d.formula) for d in info.derivatives)
    saved_outputs = []
    for s in info.all_saved_outputs:
        index = return_names.index(s.nctype.name)
        saved_outputs.append(_saved_value(s, bool(differentiable[index]), index))
    tensor_args = [a.name for a in op.schema.arguments.flat_all if base_type(a.type).startswith("Tensor")]
    skipped = set(diff_args) | set(info.non_differentiable_arg_names)
    n_differentiable = sum(bool(x) for x in differentiable)
    return AutogradView(
        node=info.op,
        tensor_args=tuple(tensor_args),
        diff_args=tuple(diff_args),
        no_formula_args=tuple(a for a in tensor_args if a not in skipped),
        single_grad=n_differentiable == 1,
        derivatives=formulas,
        saved=tuple(_saved_value(s, False) for s in info.all_saved_inputs),
        saved_outputs=tuple(saved_outputs),
        differentiable_outputs=tuple(i for i, d in enumerate(differentiable) if d),
        aten_calls=tuple(sorted(op.aten_calls)),
        output_shapes=n_differentiable > 1,
    )


def _elementwise_view(op: Operator) -> ElementwiseView | None:
    kernel = op.elementwise
    if kernel is None:
        return None
    params = [f"const DeviceTensor& {t}" for t in kernel.tensors]
    numbers = []
    for name, schema_type in kernel.numbers:
        params.append(f"{KERNEL_NUMBER_TYPES[schema_type]} {name}")
        convert = f"{name}.to<acc_t>()" if schema_type == "Scalar" else f"static_cast<acc_t>({name})"
        numbers.append((name, convert))
    return ElementwiseView(
        kernel=op.kernel,
        expression=kernel.expression,
        cpp=kernel.cpp,
        params=", ".join(params + ["const Out<DeviceTensor>& out"]),
        args=", ".join([*kernel.tensors, *(n for n, _ in kernel.numbers), "out"]),
        tensors=tuple(kernel.tensors),
        numbers=tuple(numbers),
        dtypes=tuple((rule_lang.DTYPES[d][0], rule_lang.DTYPES[d][2]) for d in op.dtypes),
    )
