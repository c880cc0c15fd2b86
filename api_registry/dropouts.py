"""The dropout family, once: each API's training argument and its kind of unit.

Both the randomness rule (randomness.py: is this call a random draw?) and the law its draws must follow
(precheck/grader/laws/dropout.py) read this table, so a new dropout API is added in one place.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dropout:
    train_name: str  # the training flag's keyword (position 2 in every member)
    train_default: bool
    alpha: bool = False  # alpha dropout: kept values are affine in the input, dropped ones a constant
    unit: str = "element"  # what one draw keeps or drops: element, channel (from dim 2), channel1d, channel3d


DROPOUTS = {
    "Functional.dropout": Dropout("training", True),
    "Functional.dropout1d": Dropout("training", True, unit="channel1d"),
    "Functional.dropout2d": Dropout("training", True, unit="channel"),
    "Functional.dropout3d": Dropout("training", True, unit="channel3d"),
    "Functional.alpha_dropout": Dropout("training", False, alpha=True),
    "Functional.feature_alpha_dropout": Dropout("training", False, alpha=True, unit="channel"),
    "Torch.dropout": Dropout("train", True),
    "Torch.feature_dropout": Dropout("train", True, unit="channel"),
    "Torch.alpha_dropout": Dropout("train", True, alpha=True),
    "Torch.feature_alpha_dropout": Dropout("train", True, alpha=True, unit="channel"),
}
