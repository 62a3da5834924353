"""my_add: a device kernel and its adapter, registered into the npu namespace
(Ascend's kernel-direct route): torch.ops.npu.my_add(x, y). No Python module in
C++: the package loads its library with torch.ops.load_library."""
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension

from torch_simhpu.utils.cpp_extension import SimHPUExtension

setup(
    name="my_add",
    version="0.1.0",
    packages=["my_add"],
    ext_modules=[SimHPUExtension("my_add._kernels", ["csrc/my_add.cpp"])],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch_simhpu"],
)
