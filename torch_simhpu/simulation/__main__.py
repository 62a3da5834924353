"""python -m torch_simhpu.simulation: the command runs the package's main(), so the
script it runs sees one torch_simhpu.simulation module, not a second copy as __main__."""
import sys

from torch_simhpu.simulation import main

sys.exit(main())
