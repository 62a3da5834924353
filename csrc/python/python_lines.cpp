// Counts the lines of the program's own Python a thread runs, for the modelled host to price
// (a profile's host_python_line): a deterministic measure of the work the part's host does
// between operators, the same however fast this machine ran it.
//
// Whose lines they are is decided by the code that runs them. simhpu's own Python (the runtime,
// the lenses) is not the program's, and nor is what it calls (torch's pytree under a FLOP
// formula); the programs simhpu ships (the model zoo, profile_part's calls) are, even when the
// simulator calls them. Functions named apart (the autograd engine's entry) are not counted
// either, with what runs under them. Any other code takes the side of the frame that called it.
#include "python/python_lines.h"

#include "simclock/sim_clock.h"

#include <Python.h>
#include <frameobject.h>

#include <pybind11/stl.h>

#include <string>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace simhpu {

namespace {

enum class Side : int8_t { Inherits, Program, NotTheProgram };

struct Rules {
  std::vector<std::string> simulator_folders;  // code under these is simhpu's
  std::vector<std::string> program_files;      // except these files, which are programs
  // These functions' code, and what they call, is not counted (references held by hand: a global's
  // destructor would run after the interpreter ended).
  std::vector<PyObject*> uncounted_code;
};

// Everything here is touched with the GIL held: the tracer runs under it.
Rules rules;
// Each code object's side, holding a reference to the code so that its address is not reused.
std::unordered_map<PyCodeObject*, Side> sides;
PyObject* marker = nullptr;  // the trace object sys.gettrace() returns while this counts

// The frames that decided a side, innermost last, for the thread being traced.
struct Decided {
  PyFrameObject* frame;
  Side side;
};
thread_local std::vector<Decided> decided;
thread_local uint64_t counted = 0;

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

Side side_of(PyFrameObject* frame) {
  PyCodeObject* code = PyFrame_GetCode(frame);  // (a new reference: the map keeps it)
  auto [it, inserted] = sides.try_emplace(code, Side::Inherits);
  if (!inserted) {
    Py_DECREF(code);
    return it->second;
  }
  const char* name = PyUnicode_AsUTF8(code->co_filename);
  if (name == nullptr) {
    PyErr_Clear();
    return it->second;
  }
  for (const auto& uncounted : rules.uncounted_code) {
    if (uncounted == reinterpret_cast<PyObject*>(code)) return it->second = Side::NotTheProgram;
  }
  const std::string file(name);
  for (const auto& program : rules.program_files) {
    if (file == program) return it->second = Side::Program;
  }
  for (const auto& folder : rules.simulator_folders) {
    if (starts_with(file, folder)) return it->second = Side::NotTheProgram;
  }
  return it->second;
}

bool counting() {
  return decided.empty() || decided.back().side == Side::Program;
}

int on_trace_event(PyObject*, PyFrameObject* frame, int what, PyObject*) {
  switch (what) {
    case PyTrace_CALL: {
      const Side side = side_of(frame);
      if (side == Side::NotTheProgram && counting()) simclock::pay_python_lines();
      if (side != Side::Inherits) decided.push_back({frame, side});
      break;
    }
    case PyTrace_RETURN:  // (also when the frame ends by an exception, and at a generator's yield)
      if (!decided.empty() && decided.back().frame == frame) decided.pop_back();
      break;
    case PyTrace_LINE:
      if (counting()) {
        ++counted;
        simclock::count_python_line();
      }
      break;
    default:
      break;
  }
  return 0;
}

bool installed_here() {
  py::object current = py::module_::import("sys").attr("gettrace")();
  return current.ptr() == marker;
}

// The frames already running when counting starts: they return later, and their side holds until then.
void decide_running_frames() {
  decided.clear();
  std::vector<PyFrameObject*> stack;
  for (PyFrameObject* f = PyEval_GetFrame(); f != nullptr; f = PyFrame_GetBack(f)) {
    stack.push_back(f);
    Py_DECREF(f);  // (PyFrame_GetBack's reference: the frames live while they run, below this call)
  }
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
    const Side side = side_of(*it);
    if (side != Side::Inherits) decided.push_back({*it, side});
  }
}

// Counts this thread's lines from now; false if another tracer (a debugger, coverage) holds the
// thread, which is left to it.
bool start(std::vector<std::string> simulator_folders, std::vector<std::string> program_files,
           std::vector<py::object> uncounted_code) {
  if (marker == nullptr) marker = PyCapsule_New(&rules, "torch_simhpu.python_lines", nullptr);
  py::object current = py::module_::import("sys").attr("gettrace")();
  if (!current.is_none() && current.ptr() != marker) return false;
  for (PyObject* code : rules.uncounted_code) Py_DECREF(code);
  rules = Rules{std::move(simulator_folders), std::move(program_files), {}};
  for (const py::object& code : uncounted_code) rules.uncounted_code.push_back(code.inc_ref().ptr());
  for (auto& [code, side] : sides) Py_DECREF(code);
  sides.clear();
  decide_running_frames();
  PyEval_SetTrace(&on_trace_event, marker);
  return true;
}

void stop() {
  if (marker != nullptr && installed_here()) PyEval_SetTrace(nullptr, nullptr);
  decided.clear();
}

} // namespace

void bind_python_lines(py::module_& m) {
  m.def("_python_lines_start", &start, py::arg("simulator_folders"), py::arg("program_files"),
        py::arg("uncounted_code"));
  m.def("_python_lines_stop", &stop);
  m.def("_python_lines_counting", &installed_here);
  m.def("_python_lines_counted", [] { return counted; });
}

} // namespace simhpu
