"""Tools for operator packages: building them against torch_simhpu
(cpp_extension.SimHPUExtension), and loading what the build made from the
package's __init__ (import_built, built_library), which name the source folder
when Python was started in it."""
from .source_tree import built_library, import_built

__all__ = ["built_library", "import_built"]
