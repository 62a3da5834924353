"""custom_topk: an operator registered at load time with the Gaudi-style
custom-op API (no codegen): torch.ops.custom_op.custom_topk(x, k, axis, bottom)."""
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension

from torch_simhpu.utils.cpp_extension import SimHPUExtension

setup(
    name="custom_topk",
    version="0.1.0",
    packages=["custom_topk"],
    ext_modules=[SimHPUExtension("custom_topk.libcustom_topk", ["csrc/custom_topk.cpp"])],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch_simhpu"],
)
