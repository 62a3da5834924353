"""custom_ops: an operator package built against the installed torch_simhpu
(Ascend's C++-extension route). `python setup.py bdist_wheel`."""
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension

from torch_simhpu.utils.cpp_extension import SimHPUExtension

setup(
    name="custom_ops",
    version="0.1.0",
    packages=["custom_ops"],
    ext_modules=[SimHPUExtension("custom_ops._C", ["csrc/add_custom.cpp"])],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch_simhpu"],
)
