"""Work that waits until another module is imported, so that importing torch_simhpu (which every
`import torch` does, through PyTorch's backend entry point) does not import it.

Graph mode's registrations (the device with Dynamo and Inductor, the functions Dynamo must not
trace) need torch._dynamo, whose import costs about a second: `after_import("torch._dynamo", f)`
runs f once torch._dynamo has been imported, by torch.compile or anything else, at once if it
already has been.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading

_waiting: dict[str, list] = {}
_lock = threading.Lock()


def after_import(module: str, callback) -> None:
    """Run `callback()` once `module` has been imported (now, if it has been)."""
    with _lock:
        if module not in sys.modules:
            if not any(isinstance(f, _Finder) for f in sys.meta_path):
                sys.meta_path.insert(0, _Finder())
            _waiting.setdefault(module, []).append(callback)
            return
    callback()


def _run(module: str) -> None:
    with _lock:
        callbacks = _waiting.pop(module, [])
    for callback in callbacks:
        callback()


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module someone waits for, it asks the other finders and runs the
    callbacks after the module's code has run."""

    def find_spec(self, name, path, target=None):
        if name not in _waiting:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, name)
                return spec
        return None


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, name: str):
        self._loader, self._name = loader, name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _run(self._name)

    def __getattr__(self, attribute):  # get_source, is_package, ... as the real loader answers
        return getattr(self._loader, attribute)
