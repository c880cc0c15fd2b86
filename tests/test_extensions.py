"""The extension points of docs/architecture.md, used as a user would: a backend registered by its public
function runs a real dump's cases through run_ut."""

from precheck.run_ut import run_ut
from precheck.scheduling.backends import Backend, InProcess, register_backend
from tests.helpers import DATA

MLP = DATA / "mlp_fp32_tensor/step0/proc8486/dump.json"


def test_a_registered_backend_runs_a_dump_through_run_ut(tmp_path):
    ran = []

    @register_backend
    class Counting(Backend):
        name = "counting"

        def _run(self, cases, body):
            for result in InProcess(self.data_dir, self.options, 1)._run(cases, body):
                ran.append(result.name)
                yield result

    summary = run_ut(MLP, out_path=tmp_path, device="cpu", backend="counting")
    assert ran and sorted(ran) == sorted(r.name for r in summary.results)
