"""yaml_ops: an operator package with its own op_plugin_functions.yaml and
derivatives.yaml, and no hand-written C++."""
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension

from torch_simhpu.utils.cpp_extension import SimHPUExtension

setup(
    name="yaml_ops",
    version="0.1.0",
    packages=["yaml_ops"],  # (yaml_ops._generated, written by the codegen, is added by SimHPUExtension)
    ext_modules=[SimHPUExtension("yaml_ops._C", yaml="op_plugin_functions.yaml", derivatives="derivatives.yaml")],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch_simhpu"],
)
