"""Options of Inductor's simhpu backend, part of Inductor's cache key.

    torch_simhpu._inductor.config.cluster = False   # one queued launch per kernel
"""
import sys

from torch.utils._config_module import install_config_module

# Each call of a compiled graph queues its kernels as one launch record (a
# cluster, run on the stream's worker as a unit) rather than one record each.
cluster: bool = True

install_config_module(sys.modules[__name__])
