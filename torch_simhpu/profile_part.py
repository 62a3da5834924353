"""`python -m torch_simhpu.profile_part`: a device profile from a part. The command stays where users
run it; the simulator's package holds it (torch_simhpu/simulation/profile_part.py)."""
import sys

from torch_simhpu.simulation.profile_part import main

if __name__ == "__main__":
    sys.exit(main())
