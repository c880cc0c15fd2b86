"""The extension points of docs/architecture.md, used as a user would: a backend or a target registered by its
public function runs a real dump's cases through run_ut."""

from precheck.execution.options import CheckOptions
from precheck.execution.targets import DeviceTarget, Target, register_target
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


def test_a_registered_target_is_graded_through_run_ut(tmp_path):
    ran = []

    @register_target
    class Toy(Target):
        name = "toy"
        label = "target: toy"

        def run(self, call, case):
            ran.append(case.name)
            return DeviceTarget(self.options).run(call, case)

    summary = run_ut(MLP, out_path=tmp_path, device="cpu", backend="inprocess", options=CheckOptions(target="toy"))
    assert ran and set(ran) == {r.name for r in summary.results}
    assert "target: toy" in summary.details_path.read_text()
