// The Python side of the allocator's history: the stack each event is recorded
// with, and the raw snapshot torch_simhpu/memory.py shapes for the visualiser.
#include "python/memory_history.h"

#include "runtime/device.h"
#include "memory_history/memory_history.h"
#include "runtime/allocator.h"

#include <Python.h>
#include <frameobject.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace simhpu {
namespace {

// Stacks seen so far, by their frames' code objects and lines: a training loop
// allocates from the same few stacks step after step, and a long history keeps
// one copy of each. The code objects are kept alive, so a key is never reused
// by another function. Used with the GIL held.
std::unordered_map<std::string, Stack>& interned_stacks() {
  static auto* stacks = new std::unordered_map<std::string, Stack>();  // (never destroyed: used at exit)
  return *stacks;
}

Stack walk_frames() {
  // A free may come while an exception is on its way out (a tensor dropped as
  // it unwinds): the walk keeps it, and clears only what the walk itself set.
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  // The key is the walked (code object, line) pairs' bytes: both members whole words, so a
  // pair has no padding, whose bytes would differ from walk to walk and no stack would ever be
  // found again.
  using Walked = std::pair<PyCodeObject*, intptr_t>;
  static_assert(sizeof(Walked) == sizeof(PyCodeObject*) + sizeof(intptr_t), "a walked frame has no padding");
  std::vector<Walked> walked;
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // (a new reference: the key's, or dropped below)
    walked.emplace_back(code, PyFrame_GetLineNumber(frame));
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  const std::string key(reinterpret_cast<const char*>(walked.data()), walked.size() * sizeof(Walked));
  auto [it, fresh] = interned_stacks().try_emplace(key);
  if (fresh) {  // the code objects stay referenced by the key
    auto frames = std::make_shared<std::vector<StackFrame>>();
    for (const auto& [code, line] : walked) {
      const char* file = PyUnicode_AsUTF8(code->co_filename);
      const char* name = PyUnicode_AsUTF8(code->co_name);
      frames->push_back({file ? file : "", name ? name : "", static_cast<int>(line)});
    }
    it->second = std::move(frames);
  } else {
    for (const auto& [code, line] : walked) Py_DECREF(code);
  }
  PyErr_Clear();
  PyErr_Restore(type, value, traceback);
  return it->second;
}

// The calling thread's Python stack, innermost first (the launch sites' policy):
// a Python thread inside an aten op, whose binding released the GIL, takes it back
// for a moment; a thread that never ran Python (a stream worker, autograd's device
// thread) has none of the user's frames.
Stack python_stack() {
  static const Stack none = std::make_shared<std::vector<StackFrame>>();
  if (!Py_IsInitialized()) return none;
  if (PyGILState_Check()) return walk_frames();
  if (PyGILState_GetThisThreadState() == nullptr) return none;
  const PyGILState_STATE state = PyGILState_Ensure();
  Stack stack = walk_frames();
  PyGILState_Release(state);
  return stack;
}

py::list frames_of(const Stack& stack) {
  py::list out;
  if (stack) {
    for (const StackFrame& f : *stack) {
      out.append(py::dict(py::arg("filename") = f.file, py::arg("name") = f.name, py::arg("line") = f.line));
    }
  }
  return out;
}

} // namespace

void bind_memory_history(py::module_& m) {
  m.def("_record_memory_history", [](bool enabled, size_t max_entries) {
    set_memory_history(enabled, max_entries, &python_stack);
  });
  m.def("_memory_events", [](int64_t device) {
    py::list out;
    for (const MemoryEvent& e : memory_events(static_cast<c10::DeviceIndex>(device))) {
      out.append(py::dict(py::arg("action") = e.action, py::arg("addr") = e.address, py::arg("size") = e.size,
                          py::arg("time_us") = e.time_us, py::arg("frames") = frames_of(e.frames)));
    }
    return out;
  });
  m.def("_memory_history_enabled", &recording_memory_history);
  m.def("_memory_events_recorded", [](int64_t device) {
    return memory_events_recorded(static_cast<c10::DeviceIndex>(device));
  });
  m.def("_memory_events_kept", [](int64_t device) {
    return memory_events_kept(static_cast<c10::DeviceIndex>(device));
  });
  // The kept events without their stacks, as (action, address, size), from position `first`,
  // at most `count`; and the stacks of those asked for by position: a long history is read in
  // slices, in two passes. (Each action is one Python string however many events carry it.)
  m.def("_memory_event_list", [](int64_t device, size_t first, size_t count) {
    std::unordered_map<const char*, py::str> actions;
    py::list out;
    for (const MemoryEvent& e : memory_events(static_cast<c10::DeviceIndex>(device), first, count)) {
      auto [it, fresh] = actions.try_emplace(e.action);
      if (fresh) it->second = py::str(e.action);
      out.append(py::make_tuple(it->second, e.address, e.size));
    }
    return out;
  }, py::arg("device"), py::arg("first") = 0, py::arg("count") = SIZE_MAX);
  m.def("_memory_event_frames", [](int64_t device, const std::vector<size_t>& positions) {
    py::list out;
    for (size_t i : positions) {
      const std::vector<MemoryEvent> one = memory_events(static_cast<c10::DeviceIndex>(device), i, 1);
      out.append(one.empty() ? py::list() : frames_of(one.front().frames));
    }
    return out;
  });
  m.def("_memory_segments", [](int64_t device) {
    py::list out;
    for (const SegmentInfo& s : device_segments(static_cast<c10::DeviceIndex>(device))) {
      out.append(py::make_tuple(s.address, s.size, s.active,
                                frames_of(s.active ? allocation_stack(reinterpret_cast<const void*>(s.address)) : nullptr)));
    }
    return out;
  });
  // `observer(device, requested_bytes)` is called before an out-of-memory error is raised; None: no one.
  m.def("_set_oom_observer", [](py::object observer) {
    if (observer.is_none()) {
      set_oom_observer(nullptr);
      return;
    }
    auto held = std::make_shared<py::object>(std::move(observer));
    set_oom_observer([held](c10::DeviceIndex device, size_t requested) {
      py::gil_scoped_acquire gil;
      try {
        (*held)(static_cast<int>(device), requested);
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("simhpu: the out-of-memory observer");
      }
    });
  });
}

} // namespace simhpu
