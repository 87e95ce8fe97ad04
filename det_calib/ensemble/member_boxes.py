"""``det-calib ensemble --boxes RUN``: re-fit and re-fuse from an ensemble run's member boxes.

An ensemble run writes every member's boxes (``members.parquet``, with the members' and splits'
fingerprints); ``--boxes`` reads them back instead of capturing, so other fusion settings
(``--fusion-score``, ``--fusion-iou``, ``--fusion-order``, weights) and calibration settings
(``--method``, ``--iou``, ``--conf``...) take seconds. The members given must be the run's
(same files, views and heads), and the data the run's images and labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from det_calib.capture.parts import data_fingerprint, model_fingerprint
from det_calib.data.box_table import CAPTURE_COLUMNS, read_boxes, run_meta
from det_calib.data.ground_truth import Split
from det_calib.ensemble.ensemble_record import MemberRecord
from det_calib.ensemble.members import MemberSpec
from det_calib.errors import InputError


def reuse_members(
    folder: str | Path, specs: Sequence[MemberSpec], splits: Sequence[Split], s: Any
) -> tuple[
    dict[str, list[list[pl.DataFrame]]], dict[str, list[str]], list[MemberRecord], dict[str, float]
]:
    """The member boxes of an earlier ensemble run, checked against these members, data and settings.

    Returns:
        ``(captured, plan, member records, cost)`` as the capture would give them.
    """

    path = Path(folder)
    path = path / "members.parquet" if path.is_dir() else path
    if not path.is_file():
        raise InputError(
            f"`boxes`: {path} not found: give the folder of an earlier `det-calib ensemble` run"
        )
    meta = run_meta(path) or {}
    rec = meta.get("members") or []
    have = [(Path(m["path"]).name, bool(m["flip"]), float(m["scale"]), m.get("head")) for m in rec]
    want = [(sp.path.name, sp.flip, sp.scale, sp.head) for sp in specs]
    if have != want:
        raise InputError(
            f"`boxes`: {path} holds the boxes of other members "
            f"({', '.join(m['name'] for m in rec)})"
        )
    for m, sp in zip(rec, specs, strict=True):
        fp = model_fingerprint(sp.path) if sp.path.suffix == ".pt" else f"yaml:{sp.path.name}"
        if fp != m["fingerprint"]:
            raise InputError(
                f"`boxes`: member {sp.path} is not the file the run captured "
                f"({m['fingerprint'][:15]}...)"
            )
    for sp in splits:
        got = (meta.get("splits") or {}).get(sp.name)
        if got != data_fingerprint(sp.images, names=sp.image_names(), coco_gt=s.coco_gt):
            raise InputError(
                f"`boxes`: split `{sp.name}` is not the images and labels {path} was captured on"
            )
    st = meta.get("settings") or {}
    for field, key, want in (
        ("conf_floor", "conf", s.conf_floor),
        ("max_det", "max_det", s.max_det),
        ("imgsz", "imgsz", s.imgsz),  # None: the members' own, as recorded
    ):
        have = st.get(key)
        have = max(have) if isinstance(have, list) else have
        if want is not None and have is not None and have != want:
            raise InputError(
                f"`boxes`: {path} was captured with `{field}` {have}, not {want}: capture again "
                f"or pass `{field}` {have}"
            )
    df = read_boxes(path, matched=False)
    heads = list(meta.get("heads") or [])
    plan = {h: [m["heads"][h] for m in rec] for h in heads}
    captured = {
        h: [
            [
                df.filter(
                    (pl.col("member") == i) & (pl.col("head") == h) & (pl.col("split") == sp.name)
                ).select(CAPTURE_COLUMNS)
                for sp in splits
            ]
            for i in range(len(rec))
        ]
        for h in heads
    }
    records = [
        MemberRecord.from_dict({**m, "name": m.get("name") or Path(m["path"]).name}) for m in rec
    ]
    return captured, plan, records, _capture_cost(path.parent)


def _capture_cost(folder: Path) -> dict[str, float]:
    """The capture's seconds per image recorded by the run the boxes come from (empty: unknown)."""
    import json

    try:
        doc = json.loads((folder / "calibration.json").read_text(encoding="utf-8"))
        sec = doc["ensemble"]["seconds_per_image"]
        return {k: float(v) for k, v in sec.items() if k != "fusion"}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
