"""The options of ``det-calib ensemble`` beyond ``calibrate``'s (:class:`FusionSettings`), in a module of
their own: the command line builds its options from them without importing the ensemble job."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from det_calib.ensemble.ensemble_record import AUTO, ORDERS
from det_calib.ensemble.fusion import SCORE_RULES
from det_calib.errors import InputError
from det_calib.job.settings import opt
from det_calib.validation import check_choice

__all__ = ["FusionSettings"]


@dataclass
class FusionSettings:
    """The options of ``det-calib ensemble`` beyond ``calibrate``'s (recorded under ``ensemble.fusion``)."""

    view: tuple[str, ...] = opt(
        (),
        "test-time view of every --model: orig, flip, scale:S, flip+scale:S "
        "(repeatable; with one --model its views are the members)",
        flag="--view",
        repeat=True,
    )
    snapshots: tuple[str, ...] = opt(
        (),
        "a training run's weights folder: its epochN.pt and last.pt are members (repeatable)",
        flag="--snapshots",
        repeat=True,
    )
    fusion_iou: float = opt(
        0.55, "IoU above which a box joins a fused box (default 0.55)", flag="--fusion-iou"
    )
    fusion_score: str = opt(
        AUTO,
        "score of a fused box: auto (default: chosen per head on the fit split's folds, "
        "see docs), best-avg (each member's best box in it, averaged over the members, an "
        "absent member counting 0), agree (the mean of its boxes times the share of members "
        "that have a box in it), avg (the mean of its boxes, an absent member counting 0), "
        "present, max, absent",
        flag="--fusion-score",
        choices=(AUTO, *SCORE_RULES),
    )
    fusion_order: str = opt(
        AUTO,
        "auto (default: chosen per head on the fit split's folds), fuse-then-calibrate "
        "(fuse the raw scores, calibrate the fused score) or calibrate-then-fuse",
        flag="--fusion-order",
        choices=(AUTO, *ORDERS),
    )
    fusion_skip: float = opt(
        0.0,
        "member boxes below this score are not fused (default 0: every captured box)",
        flag="--fusion-skip",
    )
    weight: tuple[float, ...] = opt(
        (),
        "weight of each member in the fusion, in order (repeatable; default 1 each)",
        flag="--weight",
        repeat=True,
    )
    fusion_table: bool = opt(
        True,
        "skip the table of both orders under every score rule (with --fusion-order and "
        "--fusion-score both given; auto scores every candidate)",
        flag="--no-fusion-table",
        negate=True,
    )

    def validate(self, n_members: int | None = None) -> None:
        if not 0 <= self.fusion_iou < 1:
            raise InputError(f"Expected `fusion_iou` in [0, 1), but got {self.fusion_iou}")
        check_choice(self.fusion_score, (AUTO, *SCORE_RULES), "fusion_score")
        check_choice(self.fusion_order, (AUTO, *ORDERS), "fusion_order")
        if not 0 <= self.fusion_skip < 1:
            raise InputError(f"Expected `fusion_skip` in [0, 1), but got {self.fusion_skip}")
        if any(not w > 0 for w in self.weight):
            got = ", ".join(f"{w:g}" for w in self.weight)
            raise InputError(f"Expected every `weight` to be positive, but got {got}")
        if n_members is not None and self.weight and len(self.weight) != n_members:
            raise InputError(
                f"Expected one `weight` per member ({n_members}), but got {len(self.weight)}"
            )

    def candidates(self) -> list[tuple[str, str]]:
        """The (order, score rule) pairs the fusion is chosen among (one: both given)."""
        orders = ORDERS if self.fusion_order == AUTO else (self.fusion_order,)
        rules = SCORE_RULES if self.fusion_score == AUTO else (self.fusion_score,)
        return [(o, r) for o in orders for r in rules]

    def weights(self, n: int) -> np.ndarray:
        return np.asarray(self.weight, dtype=np.float64) if self.weight else np.ones(n)
