"""What every placement method returns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PlacementResult:
    """A method's answer for one instance.

    Attributes:
        method: the method's registered name.
        placement: ``[D, L]`` machine indices, or ``None`` when no feasible placement was found.
        cost_evals: placements evaluated with the cost model to get there.
        reason: why there is no placement; for a feasible one, an optional note (e.g. why a
            method returned the naive placement).
    """

    method: str
    placement: np.ndarray | None
    cost_evals: int = 0
    reason: str = ""

    @property
    def feasible(self) -> bool:
        return self.placement is not None
