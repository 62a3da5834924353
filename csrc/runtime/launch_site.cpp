#include "runtime/launch_site.h"

#include <Python.h>
#include <frameobject.h>

#include <mutex>
#include <string>
#include <unordered_map>

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

} // namespace

LaunchSite capture_launch_site() {
  LaunchSite site;
  if (!Py_IsInitialized() || !PyGILState_Check()) {
    return site;
  }
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (frame == nullptr) {
    return site;
  }
  PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
  site.file = intern_file_of(code);
  site.line = PyFrame_GetLineNumber(frame);
  Py_DECREF(code);
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
