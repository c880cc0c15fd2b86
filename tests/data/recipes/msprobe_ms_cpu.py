# Minimal monkeypatch so msprobe (mindstudio-probe 26.2.0) can dump MindSpore 2.10 on CPU.
#
#   import msprobe_ms_cpu; msprobe_ms_cpu.patch_dump()        # before PrecisionDebugger(...)
#   python tests/data/recipes/msprobe_venv.py --mindspore -- tests/data/recipes/msprobe_ms_cpu.py \
#       acc_check -api_info DUMP.json -o OUT [-save_error_data]
#
# Why: msprobe computes per-tensor statistics (Max/Min/Mean/Norm) with mint.max/min/mean/norm
# on the tensor's device. On the MindSpore CPU backend mint.norm (LinalgVectorNorm) has no kernel
# in any dtype ("RuntimeError: The kernel LinalgVectorNorm unregistered."), and mint.max/min/mean
# have no BFloat16 kernel, so every dump aborts at the first hooked API.
# Fix: compute the same four numbers with numpy in float32 (host side) for non-empty, non-scalar,
# non-bool, non-complex tensors in synchronous dump mode; everything else goes to the original.
#
# `msprobe acc_check` on a MindSpore dump needs NO device patch on CPU (its bench is PyTorch on
# CPU; its tested side is the dumped npy, or MindSpore on the current device for statistics dumps).
# The wrapper below only matters for -save_error_data, whose stat path would otherwise hit
# mint.norm / "'Config' object has no attribute 'precision'" and turn an error row into SKIP.
import sys

import numpy as np


def patch_dump() -> None:
    import mindspore as ms
    from msprobe.core.dump.data_dump.data_processor import mindspore_processor as mp
    from msprobe.core.dump.data_dump.data_processor.base import TensorStatInfo

    orig = mp.MindsporeDataProcessor.get_stat_info
    if getattr(orig, "_cpu_patched", False):
        return

    def get_stat_info(self: object, data: object) -> object:
        if (
            getattr(self.config, "async_dump", False)
            or data.numel() == 0
            or not data.shape
            or data.dtype in (ms.bool_, ms.complex64, ms.complex128)
        ):
            return orig(self, data)
        self.api_register.restore_inner_used_api()  # same un-hooking the original does
        try:
            arr = data.to(ms.float32).asnumpy()
        finally:
            self.api_register.register_inner_used_api()
        st = TensorStatInfo()
        st.max, st.min, st.mean = float(arr.max()), float(arr.min()), float(arr.mean())
        st.norm = float(np.linalg.norm(arr.ravel()))
        return st

    get_stat_info._cpu_patched = True
    mp.MindsporeDataProcessor.get_stat_info = get_stat_info


if __name__ == "__main__":
    patch_dump()
    from msprobe.msprobe import main

    sys.argv = ["msprobe"] + sys.argv[1:]
    main()
