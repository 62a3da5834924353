"""yaml_ops: the operators of op_plugin_functions.yaml, as yaml_ops.npu_* and torch.ops.yaml_ops.*."""
from torch_simhpu.utils import import_built

import_built(__name__, "_generated.ops")  # says so when run from this source folder
from yaml_ops._generated.ops import *  # noqa: F401,F403,E402
from yaml_ops._generated.ops import __all__  # noqa: F401,E402
