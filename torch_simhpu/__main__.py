"""python -m torch_simhpu: the environment report (torch_simhpu/collect_env.py) to paste into a bug report."""
from torch_simhpu.collect_env import main

main()
