"""The extension points of docs/architecture.md, used as a user would: a backend or a target registered by its
public function runs a real dump's cases through run_ut, a standard so registered grades them."""

import pytest

from precheck.commands.parser import build_parser
from precheck.core.older_python import zip_strict
from precheck.core.status import ERROR, PASS
from precheck.execution import targets
from precheck.execution.options import BACKENDS, TARGETS, CheckOptions
from precheck.execution.targets import DeviceTarget, Target, register_target
from precheck.grader.choices import STANDARD_CHOICES
from precheck.grader.standards import STANDARDS, register_standard
from precheck.run_ut import run_ut
from precheck.scheduling import backends
from precheck.scheduling.backends import Backend, InProcess, register_backend
from tests.helpers import DATA

MLP = DATA / "mlp_fp32_tensor/step0/proc8486/dump.json"


@pytest.fixture(autouse=True)
def _registries():
    """A test's registrations are undone after it: the rest of the suite sees the built-in names only."""
    tables = (TARGETS, BACKENDS, STANDARD_CHOICES, STANDARDS, targets._KINDS, backends._KINDS)
    saved = [table.copy() for table in tables]
    yield
    for table, before in zip_strict(tables, saved):
        table.clear()
        table.extend(before) if isinstance(table, list) else table.update(before)


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


def test_a_registered_standard_grades_a_dump_through_run_ut(tmp_path):
    def toy(m, ctx):
        return (ERROR, f"toy: max abs error {m.max_abs_err:.3g}") if m.max_abs_err > 0 else (PASS, "")

    register_standard("toy", toy)
    summary = run_ut(MLP, out_path=tmp_path, device="cpu", backend="inprocess", options=CheckOptions(standard="toy"))
    assert "toy" in STANDARD_CHOICES
    assert "toy: max abs error" in summary.details_path.read_text()


def test_the_command_line_offers_the_registered_names():
    @register_backend
    class Counting(InProcess):
        name = "counting"

    @register_target
    class Toy(DeviceTarget):
        name = "toy"

    register_standard("toy", STANDARDS["default"])
    args = build_parser().parse_args(
        ["run_ut", "-api_info", str(MLP), "--backend", "counting", "--target", "toy", "--standard", "toy"]
    )
    assert (args.backend, args.target, args.standard) == ("counting", "toy", "toy")
