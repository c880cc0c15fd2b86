"""Run the incumbent, msprobe `acc_check`, with its device side on the CPU (it refuses to start without NPU/CUDA).

For side-by-side benchmarks only, inside msprobe's throwaway venv (tests/data/recipes/msprobe_venv.py makes it):
    python tests/data/recipes/msprobe_venv.py -- tests/data/recipes/msprobe_cpu.py acc_check \
        -api_info DUMP/step0/proc*/dump.json -o OUT
"""

import sys

import torch

torch.cuda.set_device = lambda *a, **k: None
torch.cuda.empty_cache = lambda *a, **k: None
import msprobe.pytorch.api_accuracy_checker.acc_check.acc_check as acc_check  # noqa: E402
import msprobe.pytorch.api_accuracy_checker.acc_check.acc_check_utils as acc_check_utils  # noqa: E402

acc_check.current_device = acc_check_utils.current_device = "cpu"
from msprobe.msprobe import main  # noqa: E402

sys.argv = ["msprobe"] + sys.argv[1:]
main()
