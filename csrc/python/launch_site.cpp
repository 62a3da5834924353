// The Python side of launch sites: which frame of the user's code launched a
// kernel, and the GIL hand-off while a thread waits for the device.
#include "python/launch_site.h"

#include "runtime/launch_record.h"
#include "runtime/launch_site.h"

#include <Python.h>
#include <frameobject.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace simhpu {
namespace {

// What the runtime remembers of a code object that launched work. The code
// object itself is kept alive for the process's lifetime (one per distinct
// launching function), so a record may hold a plain pointer to it and its
// address is never reused by another code object.
struct CodeInfo {
  std::string file;
  bool in_library = false;
};

// Folders of torch and torch_simhpu, and contextlib.py (the `with` blocks that
// end a compiled call or a graph capture): frames there are the library, not the caller.
const std::vector<std::string>& library_dirs() {
  static const std::vector<std::string> dirs = [] {
    std::vector<std::string> found;
    for (const char* name : {"torch", "torch_simhpu", "contextlib"}) {
      PyObject* module = PyImport_ImportModule(name);
      PyObject* file = module ? PyObject_GetAttrString(module, "__file__") : nullptr;
      const char* path = file ? PyUnicode_AsUTF8(file) : nullptr;
      if (path != nullptr) {
        const std::string where(path);
        const bool package = where.size() >= 12 && where.compare(where.size() - 12, 12, "/__init__.py") == 0;
        found.push_back(package ? where.substr(0, where.rfind('/') + 1) : where);
      }
      Py_XDECREF(file);
      Py_XDECREF(module);
      PyErr_Clear();
    }
    return found;
  }();
  return dirs;
}

bool in_library(const std::string& file) {
  for (const auto& dir : library_dirs()) {
    if (file.compare(0, dir.size(), dir) == 0) {
      return true;
    }
  }
  return false;
}

std::mutex codes_mu;
std::unordered_map<const void*, CodeInfo*>& codes() {
  static auto* known = new std::unordered_map<const void*, CodeInfo*>();
  return *known;
}

// Called with the GIL held. The last code object seen by this thread is
// remembered, since a loop launches from the same place again and again.
const CodeInfo& info_of(PyCodeObject* code) {
  thread_local const void* last_code = nullptr;
  thread_local const CodeInfo* last_info = nullptr;
  if (code == last_code) {
    return *last_info;
  }
  std::lock_guard<std::mutex> lock(codes_mu);
  CodeInfo*& info = codes()[code];
  if (info == nullptr) {
    Py_INCREF(code);  // kept for good: see CodeInfo
    const char* utf8 = PyUnicode_AsUTF8(code->co_filename);
    info = new CodeInfo{utf8 != nullptr ? utf8 : "?", false};
    info->in_library = in_library(info->file);
  }
  last_code = code;
  last_info = info;
  return *info;
}

// The innermost frame of the user's code (outside torch and torch_simhpu).
LaunchSite read_site() {
  LaunchSite site;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference; info_of keeps one for good
    const bool library = info_of(code).in_library;
    site.code = code;
    site.instruction = PyFrame_GetLasti(frame);
    Py_DECREF(code);
    if (!library) {
      break;
    }
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return site;
}

// Compiled graphs' wrapper files: wrapper line -> the user's line it stands
// for (map_compiled_sources). Entries are never removed; names are interned.
using SourceLines = std::unordered_map<int, std::pair<const char*, int>>;
std::unordered_map<std::string, SourceLines>& compiled_sources() {
  static auto* sources = new std::unordered_map<std::string, SourceLines>();
  return *sources;
}

// The line table is immutable and the code object lives for good, so this
// needs no GIL (the worker threads format failure messages with it).
int raw_line_of(const LaunchSite& site) {
  return PyCode_Addr2Line(const_cast<PyCodeObject*>(static_cast<const PyCodeObject*>(site.code)), site.instruction);
}

// The user's line a compiled graph's launch stands for, if the site is in one (under codes_mu).
const std::pair<const char*, int>* compiled_source_locked(const LaunchSite& site) {
  const std::string& file = codes().at(site.code)->file;
  auto sources = compiled_sources().find(file);
  if (sources == compiled_sources().end()) {
    return nullptr;
  }
  auto line = sources->second.find(raw_line_of(site));
  return line == sources->second.end() ? nullptr : &line->second;
}

const char* file_of(const LaunchSite& site) {
  std::lock_guard<std::mutex> lock(codes_mu);
  if (const auto* source = compiled_source_locked(site)) {
    return source->first;
  }
  return codes().at(site.code)->file.c_str();
}

int line_of(const LaunchSite& site) {
  std::lock_guard<std::mutex> lock(codes_mu);
  if (const auto* source = compiled_source_locked(site)) {
    return source->second;
  }
  return raw_line_of(site);
}

LaunchSite capture_site() {
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

void* release_gil() {
  return Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
}

void restore_gil(void* state) {
  PyEval_RestoreThread(static_cast<PyThreadState*>(state));
}

} // namespace

void map_compiled_sources(const std::string& wrapper_file, const std::map<int, std::pair<std::string, int>>& lines) {
  std::lock_guard<std::mutex> lock(codes_mu);
  SourceLines& mapped = compiled_sources()[wrapper_file];
  for (const auto& [line, source] : lines) {
    mapped[line] = {intern_name(source.first), source.second};
  }
}

void install_python_launch_sites() {
  install_launch_site_hooks({&capture_site, &file_of, &line_of, &release_gil, &restore_gil});
}

} // namespace simhpu
