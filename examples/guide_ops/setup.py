"""guide_ops: the three ways PyTorch's PrivateUse1 guide gives custom operators
autograd, on simhpu: forward only (autograd's not-implemented fallback),
forward and backward registered as operators, and torch.autograd.Function."""
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension

from torch_simhpu.utils.cpp_extension import SimHPUExtension

setup(
    name="guide_ops",
    version="0.1.0",
    packages=["guide_ops"],
    ext_modules=[SimHPUExtension("guide_ops._C", ["csrc/guide_ops.cpp"])],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch_simhpu"],
)
