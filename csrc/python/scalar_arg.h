#pragma once
// Python number (or 0-dim tensor) -> at::Scalar for the generated bindings;
// torch's pybind11 caster only converts Scalars to Python, not from it.
#include <torch/csrc/utils/pybind.h>

namespace simhpu::python {

inline at::Scalar to_scalar(const pybind11::handle& obj, const char* op, const char* arg) {
  PyObject* p = obj.ptr();
  if (PyBool_Check(p)) {
    return at::Scalar(p == Py_True);
  }
  if (PyLong_Check(p)) {
    const long long value = PyLong_AsLongLong(p);
    if (value == -1 && PyErr_Occurred()) {
      // Out of int64's range: say which op and argument, as an OverflowError.
      PyErr_Clear();
      const std::string repr = pybind11::repr(obj);
      PyErr_Format(PyExc_OverflowError, "%s: argument '%s' = %s does not fit in a 64-bit integer Scalar",
                   op, arg, repr.c_str());
      throw pybind11::error_already_set();
    }
    return at::Scalar(static_cast<int64_t>(value));
  }
  if (PyFloat_Check(p)) {
    return at::Scalar(PyFloat_AsDouble(p));
  }
  if (PyComplex_Check(p)) {
    return at::Scalar(c10::complex<double>(PyComplex_RealAsDouble(p), PyComplex_ImagAsDouble(p)));
  }
  if (pybind11::isinstance<at::Tensor>(obj)) {
    const auto t = obj.cast<at::Tensor>();
    if (t.numel() == 1) {
      return t.item();
    }
  }
  throw pybind11::type_error(std::string(op) + ": argument '" + arg +
                             "' must be a number (bool, int, float or complex), got " +
                             Py_TYPE(p)->tp_name);
}

inline std::optional<at::Scalar> to_optional_scalar(const pybind11::handle& obj, const char* op, const char* arg) {
  if (obj.is_none()) {
    return std::nullopt;
  }
  return to_scalar(obj, op, arg);
}

} // namespace simhpu::python
