// Kernels Inductor generates for simhpu (torch_simhpu/_inductor): C++ loops
// compiled by Inductor's CPU code cache, launched on the stream like any other
// device kernel. Python calls the kernel object with the tensors and sizes the
// generated wrapper passes; the worker calls the compiled entry with the
// tensors' host addresses (device memory is host memory behind the kernel
// mapping, runtime/device_memory.h).
#include "python/compiled_kernel.h"

#include "runtime/device.h"
#include "runtime/kernel_arg.h"
#include "runtime/launch_site.h"
#include "runtime/launch_work.h"
#include "runtime/observers.h"
#include "runtime/streams.h"

#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <string>
#include <vector>

namespace simhpu {
namespace {

namespace py = pybind11;

// What the compiled entry takes at each position, from Inductor's C++ argument types.
enum class ArgKind : char { Read = 'r', Written = 'w', Int = 'i', Float = 'f' };

// The entry Inductor's source is given (torch_simhpu/_inductor/kernels.py): one
// array with the address of every argument, in the kernel's order.
using Entry = void (*)(void* const* addresses);

struct CompiledKernel {
  KernelDef def;
  Entry entry;
  std::vector<ArgKind> kinds;
};

void run_compiled(LaunchRecord& record) {
  const auto& kernel = *static_cast<const CompiledKernel*>(record.payload);
  const size_t n = kernel.kinds.size();
  std::vector<void*> addresses(n);
  std::vector<int64_t> ints(n);
  std::vector<float> floats(n);
  for (size_t i = 0; i < n; ++i) {
    switch (kernel.kinds[i]) {
      case ArgKind::Read:
      case ArgKind::Written:
        addresses[i] = std::get<DeviceTensor>(record.args[i]).data;
        break;
      case ArgKind::Int:
        ints[i] = std::get<int64_t>(record.args[i]);
        addresses[i] = &ints[i];
        break;
      case ArgKind::Float:
        floats[i] = static_cast<float>(std::get<double>(record.args[i]));
        addresses[i] = &floats[i];
        break;
    }
  }
  kernel.entry(addresses.data());
}

std::vector<ArgKind> parse_kinds(const std::string& name, const std::string& kinds) {
  std::vector<ArgKind> parsed;
  for (char c : kinds) {
    TORCH_CHECK(c == 'r' || c == 'w' || c == 'i' || c == 'f', "simhpu compiled kernel '", name,
                "': unknown argument kind '", c, "' (expected r, w, i or f)");
    parsed.push_back(static_cast<ArgKind>(c));
  }
  return parsed;
}

const char* kind_name(ArgKind kind) {
  switch (kind) {
    case ArgKind::Read:
    case ArgKind::Written:
      return "a tensor";
    case ArgKind::Int:
      return "an int";
    case ArgKind::Float:
      return "a float";
  }
  return "?";
}

// Python's view of one compiled kernel: calling it launches it.
class PyCompiledKernel {
 public:
  PyCompiledKernel(const std::string& name, uintptr_t entry, const std::string& kinds)
      : kernel_(std::make_shared<CompiledKernel>(CompiledKernel{
            KernelDef{intern_name(name), nullptr, &run_compiled}, reinterpret_cast<Entry>(entry),
            parse_kinds(name, kinds)})) {
    TORCH_CHECK(entry != 0, "simhpu compiled kernel '", name, "': no entry point");
  }

  void launch(const py::args& args) const {
    const CompiledKernel& kernel = *kernel_;
    const char* name = kernel.def.name;
    TORCH_CHECK_TYPE(args.size() == kernel.kinds.size(), "simhpu compiled kernel '", name, "' takes ",
                     kernel.kinds.size(), " arguments, got ", args.size());
    const LaunchSite site = capture_launch_site();  // before the slot: it may take the GIL
    std::optional<c10::Device> device;
    for (size_t i = 0; i < args.size() && !device; ++i) {
      PyObject* arg = args[i].ptr();
      if (THPVariable_Check(arg) && THPVariable_Unpack(arg).is_privateuseone()) {
        device = THPVariable_Unpack(arg).device();
      }
    }
    TORCH_CHECK(device.has_value(), "simhpu compiled kernel '", name, "': no simhpu tensor among its arguments");
    if (observers::watched()) describe_work(args);
    LaunchSlot slot(current_stream(device->index()));
    LaunchRecord& record = slot.record();
    record.kernel = &kernel.def;
    record.op_name = name;
    record.site = site;
    record.payload = kernel_.get();
    record.payload_owner = kernel_;
    for (size_t i = 0; i < args.size(); ++i) {
      add(record, kernel.kinds[i], args[i].ptr(), i, *device);
    }
    slot.commit();
  }

 private:
  // What the kernel does, as Inductor prices it: the buffers it reads and writes
  // (its records describe them by address alone), one operation per element of the largest.
  void describe_work(const py::args& args) const {
    LaunchWork cost;
    cost.bytes = 0;
    cost.flops = 0;
    for (size_t i = 0; i < args.size(); ++i) {
      const ArgKind kind = kernel_->kinds[i];
      if ((kind == ArgKind::Read || kind == ArgKind::Written) && THPVariable_Check(args[i].ptr())) {
        const at::Tensor& t = THPVariable_Unpack(args[i].ptr());
        if (t.dim() == 0) continue;  // a scalar: an argument
        cost.bytes += static_cast<double>(t.nbytes());
        cost.flops = std::max(cost.flops, static_cast<double>(t.numel()));
        if (cost.dtype == c10::ScalarType::Undefined) cost.dtype = t.scalar_type();
      }
    }
    describe_next_launch(cost);
  }

  void add(LaunchRecord& record, ArgKind kind, PyObject* arg, size_t i, c10::Device device) const {
    const char* name = kernel_->def.name;
    switch (kind) {
      case ArgKind::Read:
      case ArgKind::Written: {
        TORCH_CHECK_TYPE(THPVariable_Check(arg), "simhpu compiled kernel '", name, "': argument ", i,
                         " must be ", kind_name(kind), ", got ", Py_TYPE(arg)->tp_name);
        const at::Tensor& t = THPVariable_Unpack(arg);
        TORCH_CHECK(t.device() == device || (t.is_cpu() && t.dim() == 0 && kind == ArgKind::Read),
                    "simhpu compiled kernel '", name, "': argument ", i, " is on ", t.device(), ", expected ",
                    device);
        DeviceTensor d;
        d.data = t.is_privateuseone() ? host_address(device.index(), t.data_ptr()) : t.data_ptr();
        d.dtype = t.scalar_type();
        record.args.emplace_back(std::move(d));
        record.keep_alive.push_back(t.storage());
        if (kind == ArgKind::Written) {
          record.mark_written(static_cast<int64_t>(record.keep_alive.size()) - 1);
        }
        return;
      }
      case ArgKind::Int: {
        const long long value = PyLong_AsLongLong(arg);
        if (value == -1 && PyErr_Occurred()) {
          PyErr_Clear();
          TORCH_CHECK_TYPE(false, "simhpu compiled kernel '", name, "': argument ", i, " must be an int, got ",
                           Py_TYPE(arg)->tp_name);
        }
        record.args.emplace_back(static_cast<int64_t>(value));
        return;
      }
      case ArgKind::Float: {
        const double value = PyFloat_AsDouble(arg);
        if (value == -1.0 && PyErr_Occurred()) {
          PyErr_Clear();
          TORCH_CHECK_TYPE(false, "simhpu compiled kernel '", name, "': argument ", i, " must be a float, got ",
                           Py_TYPE(arg)->tp_name);
        }
        record.args.emplace_back(value);
        return;
      }
    }
  }

  std::shared_ptr<const CompiledKernel> kernel_;
};

} // namespace

void bind_compiled_kernels(py::module_& m) {
  py::class_<PyCompiledKernel>(m, "_CompiledKernel")
      .def(py::init<const std::string&, uintptr_t, const std::string&>(), py::arg("name"), py::arg("entry"),
           py::arg("kinds"))
      .def("__call__", &PyCompiledKernel::launch);
}

} // namespace simhpu
