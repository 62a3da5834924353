#include "runtime/launch_site.h"

#include <Python.h>
#include <frameobject.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace simhpu {
namespace {

// File names by code object, kept for the process's lifetime so a record can
// hold a plain pointer; one entry per distinct code object that launched work.
const char* intern_file_of(PyCodeObject* code) {
  static std::mutex mu;
  static auto* names = new std::unordered_map<PyCodeObject*, std::string*>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = names->find(code);
  if (it == names->end()) {
    const char* utf8 = PyUnicode_AsUTF8(code->co_filename);
    it = names->emplace(code, new std::string(utf8 != nullptr ? utf8 : "?")).first;
  }
  return it->second->c_str();
}

// Folders of torch and torch_simhpu: frames there are the library, not the caller.
const std::vector<std::string>& library_dirs() {
  static const std::vector<std::string> dirs = [] {
    std::vector<std::string> found;
    for (const char* name : {"torch", "torch_simhpu"}) {
      PyObject* module = PyImport_ImportModule(name);
      PyObject* file = module ? PyObject_GetAttrString(module, "__file__") : nullptr;
      const char* path = file ? PyUnicode_AsUTF8(file) : nullptr;
      if (path != nullptr) {
        std::string dir(path);
        found.push_back(dir.substr(0, dir.rfind('/') + 1));
      }
      Py_XDECREF(file);
      Py_XDECREF(module);
      PyErr_Clear();
    }
    return found;
  }();
  return dirs;
}

bool in_library(const char* file) {
  for (const auto& dir : library_dirs()) {
    if (std::strncmp(file, dir.c_str(), dir.size()) == 0) {
      return true;
    }
  }
  return false;
}

// The innermost frame of the user's code (outside torch and torch_simhpu).
LaunchSite read_site() {
  LaunchSite site;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    site.file = intern_file_of(code);
    site.line = PyFrame_GetLineNumber(frame);
    Py_DECREF(code);
    if (!in_library(site.file)) {
      break;
    }
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return site;
}

} // namespace

LaunchSite capture_launch_site() {
  if (!Py_IsInitialized()) {
    return {};
  }
  if (PyGILState_Check()) {
    return read_site();  // called from our own bindings, which keep the GIL
  }
  if (PyGILState_GetThisThreadState() == nullptr) {
    return {};  // not a Python thread (autograd's engine, our workers)
  }
  // A Python thread inside an aten op: torch's bindings released the GIL; take
  // it back for a moment to read the frame the call came from.
  const PyGILState_STATE state = PyGILState_Ensure();
  const LaunchSite site = read_site();
  PyGILState_Release(state);
  return site;
}

GilRelease::GilRelease() {
  if (Py_IsInitialized() && PyGILState_Check()) {
    saved_ = PyEval_SaveThread();
  }
}

GilRelease::~GilRelease() {
  if (saved_ != nullptr) {
    PyEval_RestoreThread(static_cast<PyThreadState*>(saved_));
  }
}

} // namespace simhpu
