"""What the fork server (scheduling/forkserver.py) loads before it forks workers: the worker's module, with torch,
and the API table, so a forked worker starts with both in memory instead of building them for a second."""

from api_registry import lookup
from precheck.scheduling import process  # noqa: F401  (imported for what it imports: torch, the checks)

lookup("Torch.add")
