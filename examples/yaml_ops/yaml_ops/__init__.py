"""yaml_ops: the operators of op_plugin_functions.yaml, as yaml_ops.npu_* and torch.ops.yaml_ops.*."""
from yaml_ops._generated.ops import *  # noqa: F401,F403
from yaml_ops._generated.ops import __all__  # noqa: F401
