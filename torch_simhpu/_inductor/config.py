"""Options of Inductor's simhpu backend, part of Inductor's cache key.

    torch_simhpu._inductor.config.cluster = False   # one queued launch per kernel
"""
import hashlib
import os
import sys

from torch.utils._config_module import install_config_module


def _fingerprint() -> str:
    """Of the code that writes and runs the generated modules, so no cache entry
    an earlier torch_simhpu wrote (before its modules stopped being cached, or
    in AOTAutograd's cache) is served to this one."""
    here = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()[:16]


# Each call of a compiled graph queues its kernels as one launch record (a
# cluster, run on the stream's worker as a unit) rather than one record each.
cluster: bool = True

# Part of the cache key, not an option.
codegen_fingerprint: str = _fingerprint()

install_config_module(sys.modules[__name__])
