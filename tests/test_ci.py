""".ci/setup installs the CPU build of torch: from PyTorch's CPU index when it answers, else from pip's own."""

from __future__ import annotations

import functools
import http.server
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
    assert "$(.ci/torch-index .venv/bin/python) torch==" in setup
