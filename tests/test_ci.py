""".ci/setup installs the CPU build of torch: from PyTorch's CPU index when it answers, else from pip's own."""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH_INDEX = ROOT / ".ci" / "torch-index"


def _torch_index(url: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PRECHECK_TORCH_INDEX": url}
    return subprocess.run(
        ["bash", str(TORCH_INDEX), sys.executable], capture_output=True, text=True, env=env, timeout=30
    )


def test_a_reachable_cpu_index_is_added_for_torch(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "index.html").write_text("<a href='torch-2.13.0+cpu.whl'>torch</a>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        proc = _torch_index(url)
    finally:
        server.shutdown()
    assert proc.returncode == 0 and proc.stdout == f"--extra-index-url {url}\n"
    assert f"torch: CPU build from {url}" in proc.stderr


def test_an_unreachable_cpu_index_falls_back_to_pips_configured_index():
    # A closed port, as an offline machine or one behind a proxy sees download.pytorch.org.
    proc = _torch_index("http://127.0.0.1:9/whl/cpu")
    assert proc.returncode == 0 and proc.stdout == ""
    assert "is not reachable; installing torch from pip's configured index" in proc.stderr


def test_setup_asks_torch_index_for_torchs_options():
    setup = (ROOT / ".ci" / "setup").read_text()
    assert '$(.ci/torch-index "$VENV/bin/python") torch==$TORCH' in setup


# .ci/setup and .ci/chromium run in a copy of .ci/ with stand-ins for python, pip, apt-get and id on a PATH that
# holds nothing else: what they install is read from the stand-ins' log.
# -c: the CPU index's probe fails (offline); whether torch converts to numpy 2 is NUMPY2's answer (yes if unset);
# pip fails where PIP_FAILS is set
_FAKE_PYTHON = """#!/bin/bash
echo "$0 $*" >> "$LOG"
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
if [ "$1 $2" = "-m pip" ] && [ -n "${PIP_FAILS:-}" ]; then exit 1; fi
if [ "$1" = -c ]; then
    case "$2" in
        *urlopen*) exit 1 ;; *".numpy()"*) [ "${NUMPY2:-yes}" = yes ] ;; *version_info*) echo "${PYVER:-3.9}" ;;
    esac
fi
"""


def _stand_ins(tmp_path: Path, apt_installs: bool) -> tuple[Path, dict[str, str]]:
    repo, bin_ = tmp_path / "repo", tmp_path / "bin"
    (repo / ".ci").mkdir(parents=True)
    bin_.mkdir()
    for name in ("setup", "chromium", "torch-index"):
        (repo / ".ci" / name).write_bytes((ROOT / ".ci" / name).read_bytes())
        (repo / ".ci" / name).chmod(0o755)
    for tool in ("bash", "dirname", "rm", "mkdir", "cp", "chmod", "timeout"):
        (bin_ / tool).symlink_to(shutil.which(tool))
    chromium = f"printf '#!/bin/bash\\necho Chromium 1\\n' > {bin_}/chromium; chmod +x {bin_}/chromium; " * apt_installs
    scripts = {
        "python3": _FAKE_PYTHON,
        "id": "#!/bin/bash\necho 0\n",
        # apt-get that unpacks the package (when told to) and then fails, as a refused post-install step does
        "apt-get": f'#!/bin/bash\necho "apt-get $*" >> "$LOG"\n[ "$1" = install ] && {{ {chromium}:; }}\nexit 100\n',
    }
    for name, text in scripts.items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    env = {"PATH": str(bin_), "LOG": str(tmp_path / "log"), "PYTHON": "python3", "PRECHECK_TORCH_INDEX": "x"}
    return repo, env


def _setup(
    tmp_path: Path, *args: str, apt_installs: bool = True, numpy2: bool = True
) -> tuple[subprocess.CompletedProcess, str]:
    repo, env = _stand_ins(tmp_path, apt_installs)
    env["NUMPY2"] = "yes" if numpy2 else "no"
    proc = subprocess.run(
        ["bash", str(repo / ".ci" / "setup"), *args], capture_output=True, text=True, env=env, timeout=60
    )
    log = (tmp_path / "log").read_text() if (tmp_path / "log").exists() else ""
    return proc, log


def test_the_main_jobs_setup_installs_torch_and_precheck_only(tmp_path):
    proc, log = _setup(tmp_path)
    assert proc.returncode == 0, proc.stderr
    installs = [line for line in log.splitlines() if " pip install " in line]
    assert (
        len(installs) == 2
        and installs[0].endswith("torch==2.13.0")
        and installs[1].endswith("install -q --disable-pip-version-check -e .")
    )
    assert "apt-get" not in log and ".venv-mindspore" not in log
    assert not (tmp_path / "repo" / ".venv-mindspore").exists()


def test_the_test_setup_adds_the_test_extras_and_chromium_and_mindspore_only_when_asked(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    proc, log = _setup(tmp_path / "a", "--test")
    assert proc.returncode == 0, proc.stderr
    assert "-e .[test]" in log and "apt-get install -y -q chromium" in log
    assert "mindspore" not in log and not (tmp_path / "a" / "repo" / ".venv-mindspore").exists()  # 2.9 GB unasked
    proc, log = _setup(tmp_path / "b", "--test", "--mindspore")
    assert proc.returncode == 0, proc.stderr
    assert "-m venv .venv-mindspore" in log and "mindspore==2.10.*" in log


def test_a_chromium_that_works_after_a_failing_apt_get_is_not_reported_missing(tmp_path):
    proc, _ = _setup(tmp_path, "--test")
    assert "chromium" not in proc.stderr


def test_no_working_chromium_is_reported_in_one_line(tmp_path):
    proc, _ = _setup(tmp_path, "--test", apt_installs=False)
    assert proc.returncode == 0
    assert [line for line in proc.stderr.splitlines() if "chromium" in line] == [
        "setup: no working chromium (chromium --version failed); the report's browser tests will be skipped"
    ]


def test_setup_installs_the_torch_asked_for_with_numpy_1_pins_where_it_cannot_use_numpy_2(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    proc, log = _setup(tmp_path / "a", "--torch", "2.1.2", "--test", numpy2=False)
    assert proc.returncode == 0, proc.stderr
    installs = [line for line in log.splitlines() if " pip install " in line]
    assert installs[0].endswith("torch==2.1.2") and installs[1].endswith("-e .[test]")
    assert installs[2].endswith("-e .[test,numpy1]") and len(installs) == 3
    assert "setup: torch 2.1.2 cannot use numpy 2 (built against numpy 1.x): installing precheck[numpy1]" in proc.stderr
    proc, log = _setup(tmp_path / "b", "--torch", "2.5.1")  # one that can keeps numpy 2 and pandas 3
    installs = [line for line in log.splitlines() if " pip install " in line]
    assert proc.returncode == 0 and installs[0].endswith("torch==2.5.1") and installs[1].endswith("-e .")
    assert len(installs) == 2 and "numpy1" not in proc.stderr


def test_an_unknown_setup_option_is_refused(tmp_path):
    refused = (["--tests"], ["--mindspore"], ["--test", "--mindspore", "x"], ["--torch"], ["--torch", "2.1; rm -rf /"])
    for i, args in enumerate((*refused, ["--test", "--torch", "2.1.2"])):
        (tmp_path / str(i)).mkdir()
        proc, log = _setup(tmp_path / str(i), *args)
        assert proc.returncode == 2 and log == ""
        assert proc.stderr == "usage: .ci/setup [--torch VERSION] [--test [--mindspore]]\n"


def test_ci_runs_exactly_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [line for line in readme.splitlines() if line.startswith("bash .ci/setup")]
    # The main job's set-up is the bare one; the tests' adds what they need.
    assert len(commands) == 2 and commands[0].startswith("bash .ci/setup && .venv/bin/precheck run_ut ")
    assert commands[1] == "bash .ci/setup --test --mindspore && .venv/bin/python -m pytest -q -n 2 && bash .ci/compat"
    assert (ROOT / ".ci" / "run").read_text().splitlines()[-1] == commands[1]


def _compat_copy(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of .ci/ with the stand-ins, and .ci/compat's inputs; its cache under tmp_path/cache."""
    repo, env = _stand_ins(tmp_path, apt_installs=False)
    (repo / ".ci" / "compat").write_bytes((ROOT / ".ci" / "compat").read_bytes())
    (repo / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    (repo / "tests").mkdir()
    (repo / "tests" / "compat.txt").write_bytes((ROOT / "tests" / "compat.txt").read_bytes())
    for tool in ("sed", "cat", "sha256sum", "cut", "touch"):
        (tmp_path / "bin" / tool).symlink_to(shutil.which(tool))
    return repo, {
        **env,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
        "PRECHECK_COMPAT_PYTHON": "python3",
    }


def _compat(repo: Path, env: dict[str, str], **more: str) -> tuple[subprocess.CompletedProcess, str]:
    log = Path(env["LOG"])
    log.unlink(missing_ok=True)
    proc = subprocess.run(
        ["bash", str(repo / ".ci" / "compat")], capture_output=True, text=True, env={**env, **more}, timeout=60
    )
    return proc, log.read_text() if log.exists() else ""


def test_the_compat_pass_builds_its_venv_once_and_fails_loudly_where_it_cannot(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    repo, env = _compat_copy(tmp_path / "a")
    proc, log = _compat(repo, env)
    assert proc.returncode == 0, proc.stderr
    assert f"compat: building {tmp_path}/a/cache/precheck/compat-py3.9-torch-2.1.2-" in proc.stderr
    assert (
        "(Python 3.9, torch 2.1.2)" in proc.stderr
        and "torch==2.1.2" in log
        and "-m pytest -q -n 2 -p no:cacheprovider tests/test_torch_versions.py" in log
    )
    assert len(list((tmp_path / "a" / "cache" / "precheck").glob("compat-py3.9-torch-2.1.2-*/.built"))) == 1
    proc, log = _compat(repo, env)  # cached: precheck alone is installed, without its dependencies
    assert proc.returncode == 0 and "torch==" not in log and "--no-deps -e ." in log
    assert "compat: building" not in proc.stderr
    proc, _ = _compat(*_compat_copy(tmp_path / "b"), PIP_FAILS="1")
    assert proc.returncode == 1
    assert "compat: FAILED to build a venv with torch 2.1.2 (set PRECHECK_SKIP_COMPAT=1 to skip offline)" in proc.stderr
    assert not list((tmp_path / "b" / "cache" / "precheck").glob("compat-*"))


def test_the_compat_pass_is_skipped_only_when_asked_and_its_tests_exist(tmp_path):
    proc, log = _compat(*_compat_copy(tmp_path), PRECHECK_SKIP_COMPAT="1")
    assert proc.returncode == 0 and log == ""
    assert proc.stderr == "compat: skipped (PRECHECK_SKIP_COMPAT is set): precheck was not tested on its oldest torch\n"
    listed = [line.split("#")[0].strip() for line in (ROOT / "tests" / "compat.txt").read_text().splitlines()]
    files = [name for name in listed if name.startswith("tests/")]
    assert "tests/test_torch_versions.py" in files and all((ROOT / name.split("::")[0]).is_file() for name in files)


def test_the_compat_pass_refuses_in_one_line_a_python_it_cannot_find(tmp_path):
    proc, log = _compat(*_compat_copy(tmp_path), PRECHECK_COMPAT_PYTHON="python3.9-not-here")
    assert proc.returncode == 1 and log == ""
    assert proc.stderr.endswith(
        "compat: FAILED: no python3.9-not-here on PATH or under pyenv (set PRECHECK_COMPAT_PYTHON)\n"
    )
