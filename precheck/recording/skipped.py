"""A step whose optimizer step a GradScaler skipped ends as one whose optimizer stepped.

``scaler.step(optimizer)`` calls ``optimizer.step()`` only when the gradients it unscaled are finite (early fp16
iterations find inf or NaN and skip it), so the optimizer's hooks, which end ``precheck record``'s steps, never
hear of a skipped one: six skipped iterations were one "step 0" of 78 records (``mse_loss.0`` ... ``.5``), which is
not msprobe's step 0 (its users call ``debugger.step()`` once per iteration, skipped or not), and the dump grew
with every skip. So ``GradScaler.step`` is wrapped: a call in which no optimizer stepped ends the step there.

The wrapper is the program's guest, as the API wrappers are (precheck.recording.wrap): it calls what the class
held, and taking it off puts that back only where the wrapper is still there.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["SkippedSteps"]

# the GradScaler classes that define their own step(): torch.amp's (torch 2.3 on; torch.cuda.amp's and FSDP's
# sharded one inherit it), torch.cuda.amp's before 2.3. Both are imported with torch: none is imported here.
_SCALERS = (("torch.amp.grad_scaler", "GradScaler"), ("torch.cuda.amp.grad_scaler", "GradScaler"))


class SkippedSteps:
    """Tells ``end_step`` when a ``GradScaler.step`` call ran no optimizer step (it found inf or NaN); the
    optimizer step hook that ends a step calls :meth:`stepped` (this class adds no hook of its own: one removed
    while torch runs the hooks would change their table under it)."""

    def __init__(self, end_step: Callable[[], None]) -> None:
        self._end_step = end_step
        self._stepped = 0  # optimizer steps run so far
        self._patched = [(cls, cls.__dict__["step"], self._wrap(cls.__dict__["step"])) for cls in _classes()]
        for cls, _, wrapper in self._patched:
            cls.step = wrapper

    def remove(self) -> None:
        """Off: what each class held is back, unless the program replaced the wrapper since."""
        for cls, own, wrapper in self._patched:
            if cls.__dict__.get("step") is wrapper:
                cls.step = own
        self._patched.clear()

    def stepped(self) -> None:
        """An optimizer stepped."""
        self._stepped += 1

    def _wrap(self, own: Callable) -> Callable:
        @functools.wraps(own)
        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            before = self._stepped
            result = own(scaler, optimizer, *args, **kwargs)
            if self._stepped == before:  # skipped: the step ends here all the same
                self._end_step()
            return result

        return step


def _classes() -> Iterator[type]:
    for module, name in _SCALERS:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and "step" in cls.__dict__:
            yield cls
