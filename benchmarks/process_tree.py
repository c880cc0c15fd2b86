"""Wall time and peak resident memory of a command's whole process tree, for the benchmarks that run tools as a
user types them (a run's workers and msprobe's subprocesses count with their parent)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path


class TreePeak:
    """The largest sum of resident memory over a process and its descendants, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._done = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.02):
            self.peak = max(self.peak, tree_rss(self.pid))

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak


def tree_rss(root: int) -> int:
    """The resident memory of ``root`` and its descendants. Walked down from ``root`` through each thread's
    ``children`` file where the kernel has them: a scan of every process in /proc took 1.5 ms a sample, 7% of a
    core at one sample per 20 ms, and on a 2-core machine that cost came out of ``-n 2``'s wall (0.8 s of 9)."""
    if not Path(f"/proc/{root}/task/{root}/children").exists():
        return _scanned_tree_rss(root)
    total, todo, page = 0, [root], os.sysconf("SC_PAGE_SIZE")
    while todo:
        pid = todo.pop()
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
            for task in os.listdir(f"/proc/{pid}/task"):
                todo.extend(int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split())
        except (OSError, IndexError, ValueError):  # it ended meanwhile
            continue
    return total


def _scanned_tree_rss(root: int) -> int:
    """tree_rss by a scan of every process's parent (a kernel without ``children`` files)."""
    parents, rss = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            parents[int(entry)] = int(stat[1])
            rss[int(entry)] = int(stat[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(rss.get(pid, 0) for pid in tree)


def measure(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """(wall seconds, peak tree RSS in MiB) of one command; a failing command ends the benchmark."""
    wall, rss, failure = run_measured(cmd, env)
    if failure:
        sys.exit(f"failed: {' '.join(cmd)}\n{failure}")
    return wall, rss


def run_measured(cmd: list[str], env: dict | None = None) -> tuple[float, float, str | None]:
    """(wall seconds, peak tree RSS in MiB, None) of one command, or with the exit code and its output's end in
    place of None where it failed (the incumbent fails on some real dumps: that is a result, not the end)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak = TreePeak(proc.pid)
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    rss = peak.stop() / 2**20
    failure = f"exit {proc.returncode}: {(out + err).decode(errors='replace')[-2000:]}" if proc.returncode else None
    return wall, rss, failure
