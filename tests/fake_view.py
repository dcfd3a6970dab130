"""A base for the small fleet views the method tests hand to ``select``: they offer no sampling fast path."""

from __future__ import annotations

from typing import Any

import numpy as np


class MaskOnlyView:
    """``FleetView.sample_selectable`` answering None: ``select_uniform`` then draws from ``selectable_mask``; the
    view selects among every device (``FleetView.members`` None)."""

    members: np.ndarray | None = None

    def sample_selectable(self, k: int, rng: np.random.Generator, eligible: Any = None) -> np.ndarray | None:
        return None
