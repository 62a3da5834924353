"""No false positives: suites nobody wrote for the sanitizer run clean under it
(SIMHPU_SANITIZER=1 raises at the first race). Streams, the model zoo (CNNs,
RNNs, transformers training), graph mode (torch.compile, graphs), the profiler,
torch.distributed (DDP, FSDP2 under torchrun) and the operator packages."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SUITES = ["test_streams.py", "test_memory.py", "test_model_zoo.py", "test_graph_mode.py", "test_profiler.py",
          "test_distributed.py"]


def test_the_suites_run_clean_under_the_sanitizer(tmp_path):
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
               *(os.path.join(HERE, s) for s in SUITES), os.path.join(ROOT, "examples")]
    # (not from the repository's root: its torch_simhpu/ folder would shadow the installed one)
    done = subprocess.run(command, cwd=tmp_path, env={**os.environ, "SIMHPU_SANITIZER": "1"}, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:]
    assert " passed" in done.stdout.splitlines()[-1]
