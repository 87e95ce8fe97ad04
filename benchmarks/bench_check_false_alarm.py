"""How often ``det-calib check`` cries wolf: its verdicts on clean images the run never saw.

Two cases, each at least 40 repetitions, labelled (calibration and detection verdicts) and
label-free (``--images``: the output-shift verdict), every head of the run:

- **fresh renders**: the demo generator's test split rendered with other seeds (``--seeds``, 400
  images each; same generator, same distribution as the run's eval split), captured once by the
  run's detector as ``check`` captures (:func:`det_calib.check.run_check.new_boxes`); each repetition draws
  as many images as the run's eval split from that pool and checks them against the run. The run's
  eval split is the same in every repetition: this is the rate for that run.
- **random three-way splits**: a pool of labelled images (the run's own fit and eval splits, from
  its ``boxes.parquet``, and the fresh renders) cut at random by image into fit / eval / new
  (``--split-size`` images each) per repetition; each repetition fits the run's calibrator choice
  on its fit part (:func:`det_calib.pipeline.fitting.fit_head`, the run's settings) and checks its new
  part against its eval part: the rate over runs, the eval split's own noise included.

Both cases reuse the captured boxes (no forward pass per repetition) and run the check's own
functions on box tables (:func:`det_calib.check.verdicts.labelled_checks`,
:func:`~det_calib.check.verdicts.shift_check`). Beside the rates, the same repetitions judged as the
check did before crowded images were set apart, and with each labelled verdict at ``--alpha`` (as
before ``--alpha`` was halved between them).

    python benchmarks/bench_check_false_alarm.py --run det_calib_out --reps 60 --doc

Also tabulates the crowded images of each labelled split (the run's own, the renders, one shifted
split: ``--shifted blur 3``), and says where the shifted split's kept boxes sit among the clean draws
of case (a) (:func:`against_clean`). Prints both Markdown tables (with ``--doc``, writes
``docs/generated/check_false_alarm.md`` and ``check_crowded_images.md``, which docs/check.md
includes). Renders and captures are cached in ``--work`` (default a folder in the
demo cache), so a rerun only repeats the checks.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.check.check_record import CHANGED, DRIFTED, SHIFTED
from det_calib.check.drift_tests import (
    CROWDED_FACTOR,
    CROWDED_MIN_BOXES,
    citl_change,
    crowded_images,
)
from det_calib.check.verdicts import QUESTIONS, labelled_checks, shift_check
from det_calib.data.box_view import BoxView, with_calibrated
from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.demo import cache_dir
from det_calib.demo.shapes import CLASS_NAMES, generate
from det_calib.job.settings import Settings
from det_calib.pipeline.fitting import fit_head
from det_calib.record.calibrator_record import calibrator_of
from det_calib.record.run_folder import load_run

ALPHA = 0.05
MIN_BOXES = 30
N_PERM = 999


@dataclass
class Source:
    """Captured, matched boxes of one labelled split (every head) with its ground truth per image."""

    name: str
    boxes: pl.DataFrame  # columns of a box table, ``head``; image_id 0..n_img-1
    gt_count: np.ndarray  # (n_img,) ground-truth boxes (no crowd) per image
    gt_cls: list[np.ndarray]  # per image: the classes of its ground-truth boxes

    @property
    def n_img(self) -> int:
        return int(self.gt_count.size)


def _gt(sp) -> tuple[np.ndarray, list[np.ndarray]]:
    g = sp.gt.filter(~pl.col("crowd"))
    ids, cls = g["image_id"].to_numpy().astype(np.int64), g["cls"].to_numpy().astype(np.int64)
    n = len(sp.images)
    return np.bincount(ids, minlength=n)[:n].astype(float), [cls[ids == i] for i in range(n)]


def fresh_source(run_dir: Path, seed: int, work: Path, n: int, model: Path | None = None) -> Source:
    """The demo's test split rendered with ``seed`` (``n`` images), captured by the run's detector
    and matched as ``check`` does; cached under ``work``."""
    from det_calib.check.run_check import new_boxes

    root = work / f"seed{seed}"
    yml = root / "data.yaml"
    if len(list((root / "images" / "test").glob("*.png"))) != n:
        generate(root, seed=seed, splits={"test": n})
    yml.write_text(
        f"path: {root}\ntest: images/test\nval: images/test\nnames:\n"
        + "".join(f"  {i}: {c}\n" for i, c in enumerate(CLASS_NAMES))
    )
    cached = root / "boxes.parquet"
    sp = load_split(load_data_yaml(yml), "test")
    if cached.is_file():
        boxes = pl.read_parquet(cached)
    else:
        _, sp, tables = new_boxes(run_dir, yml, "test", model=model)
        boxes = pl.concat(
            [
                t.with_columns(pl.lit(h).alias("head")) if "head" not in t.columns else t
                for h, t in tables.items()
            ],
            how="diagonal_relaxed",
        )
        boxes.write_parquet(cached)
    count, cls = _gt(sp)
    return Source(f"seed{seed}", boxes, count, cls)


def run_sources(run) -> list[Source]:
    """The run's own fit and eval splits as sources (their boxes from ``boxes.parquet``)."""
    ds = load_data_yaml(run.result.data)
    out = []
    for name in (run.settings.fit_split, run.settings.eval_split):
        sp = load_split(ds, name)
        count, cls = _gt(sp)
        out.append(Source(f"run {name}", run.boxes.filter(pl.col("split") == name), count, cls))
    return out


def _index(sources: list[Source], head: str) -> dict[tuple[int, int], pl.DataFrame]:
    """(source, image) -> that image's boxes of ``head`` (empty frames are left out)."""
    out = {}
    for s, src in enumerate(sources):
        b = src.boxes.filter(pl.col("head") == head)
        for (i,), part in b.partition_by("image_id", as_dict=True).items():
            out[(s, int(i))] = part
    return out


def _gather(
    index: dict, empty: pl.DataFrame, sources: list[Source], picks: list[tuple[int, int]]
) -> tuple[pl.DataFrame, np.ndarray, list[np.ndarray]]:
    frames = [
        index[k].with_columns(pl.lit(j, dtype=pl.Int64).alias("image_id"))
        for j, k in enumerate(picks)
        if k in index
    ]
    boxes = pl.concat(frames, how="diagonal_relaxed") if frames else empty
    return (
        boxes,
        np.array([sources[s].gt_count[i] for s, i in picks]),
        [sources[s].gt_cls[i] for s, i in picks],
    )


def _kept(boxes: pl.DataFrame, conf: float) -> BoxView:
    return BoxView.from_boxes(boxes, geometry=False).as_recorded().kept(conf)


def one_check(
    then: BoxView,
    gt_then: np.ndarray,
    cls_then: list[np.ndarray],
    now: BoxView,
    gt_now: np.ndarray,
    cls_now: list[np.ndarray],
    *,
    conf: float,
    names: list[str],
    ece_bins: int,
    seed: int,
) -> dict[str, bool | int]:
    """The check's verdicts of one repetition (labelled, as before crowded images were set apart, and label-free)."""
    nc = len(names)
    cls_then_counts = np.bincount(
        np.concatenate(cls_then) if cls_then else np.zeros(0, np.int64), minlength=nc
    )[:nc].tolist()
    kw = dict(
        conf=conf,
        names=names,
        gt_now=gt_now,
        gt_cls_now=np.concatenate(cls_now) if cls_now else np.zeros(0, np.int64),
        gt_then=gt_then,
        gt_cls_then=cls_then_counts,
        n_gt_then=int(gt_then.sum()),
        n_img_then=int(gt_then.size),
        alpha=ALPHA,
        min_boxes=MIN_BOXES,
        ece_bins=ece_bins,
    )
    lc = labelled_checks(now, then, **kw)
    before = labelled_checks(now, then, set_apart=False, **kw)
    each = labelled_checks(
        now, then, **{**kw, "alpha": QUESTIONS * ALPHA}
    )  # each verdict at ALPHA, as before
    _, shift, _ = shift_check(
        then,
        now,
        n_img_then=int(gt_then.size),
        n_img=int(gt_now.size),
        n_classes=nc,
        conf=conf,
        alpha=ALPHA,
        n_perm=N_PERM,
        min_boxes=MIN_BOXES,
        seed=seed,
    )
    return {
        "drifted": lc.calibration_verdict == DRIFTED,
        "changed": lc.detection_verdict == CHANGED,
        "drifted_before": before.calibration_verdict == DRIFTED,
        "shifted": shift == SHIFTED,
        "any_each": each.calibration_verdict == DRIFTED or each.detection_verdict == CHANGED,
        "crowded": int(lc.calibration.crowded_images or 0),
        **kept_figures(now, then),
    }


def kept_figures(now: BoxView, then: BoxView) -> dict[str, float]:
    """How far the kept boxes ``now`` are from calibrated, as figures a verdict could turn on: their gap
    (fraction correct - mean conf), the deficit (expected - correct) of their crowded images, and the
    p-value of the change in the large against ``then`` with every box counted as an independent draw
    (Poisson-binomial variance: what a per-box test of the crowded images' boxes would read)."""
    ids = crowded_images(now.image_id)
    m = np.isin(now.image_id, ids)
    per_box = citl_change(
        (then.conf, then.correct, np.arange(then.n)), (now.conf, now.correct, np.arange(now.n))
    )
    return {
        "gap": float(now.correct.mean() - now.conf.mean()) if now.n else math.nan,
        "deficit": float(now.conf[m].sum() - now.correct[m].sum()),
        "per_box_p": math.nan if per_box is None else per_box.p_value,
    }


def against_clean(rows: list[dict], shifted: BoxView, then: BoxView, label: str) -> str:
    """Where a shifted split's kept boxes sit among the clean draws ``rows`` (case (a), one head): how many
    clean draws are as far from calibrated as it is, by each figure of :func:`kept_figures`; a calibration
    verdict that called the shifted split drifted on such a figure would call as many clean draws drifted."""
    f = kept_figures(shifted, then)
    n = len(rows)
    level = ALPHA / QUESTIONS
    gap = sum(r["gap"] <= f["gap"] for r in rows)
    deficit = sum(r["deficit"] >= f["deficit"] for r in rows)
    per_box = sum(r["per_box_p"] < level for r in rows)
    return (
        f"{label} against the {n} clean draws of case (a), {then.n} kept boxes of the run's eval "
        "split as the "
        f"reference: kept-set gap (fraction correct - mean conf) {f['gap']:+.3f}, reached or "
        "passed by "
        f"{gap}/{n} = {gap / n:.2f} of the clean draws; expected - correct in its crowded images "
        f"{f['deficit']:.1f}, reached or passed by {deficit}/{n} = {deficit / n:.2f}; the change "
        "in the large "
        f"with every box an independent draw: p {f['per_box_p']:.2g}, below {level:g} on "
        f"{per_box}/{n} = "
        f"{per_box / n:.2f} of the clean draws."
    )


def _then(run, head: str, conf: float) -> BoxView:
    """The boxes of ``head`` the run's eval split keeps at ``conf`` under the run's calibrator."""
    cal = calibrator_of(run.head(head).calibrator)
    ev = run_sources(run)[1]
    return (
        BoxView.from_boxes(ev.boxes, head=head, geometry=False)
        .scored(cal, recorded=True)
        .kept(conf)
    )


def fresh_case(
    run, fresh: list[Source], head: str, reps: int, rng: np.random.Generator
) -> list[dict]:
    """Case (a): draws of the run's eval-split size from the fresh renders, against the run's eval split."""
    st = run.settings
    conf = float(min(st.conf_thresholds))
    ev = run_sources(run)[1]
    then = _then(run, head, conf)
    index = _index(fresh, head)
    empty = fresh[0].boxes.head(0)
    all_imgs = [(s, i) for s, src in enumerate(fresh) for i in range(src.n_img)]
    out = []
    for r in range(reps):
        pick = [all_imgs[j] for j in rng.choice(len(all_imgs), size=ev.n_img, replace=False)]
        boxes, gt_now, cls_now = _gather(index, empty, fresh, pick)
        out.append(
            one_check(
                then,
                ev.gt_count,
                ev.gt_cls,
                _kept(boxes, conf),
                gt_now,
                cls_now,
                conf=conf,
                names=list(run.class_names),
                ece_bins=st.ece_bins,
                seed=r,
            )
        )
    return out


def split_case(
    run, pool: list[Source], head: str, reps: int, size: int, rng: np.random.Generator
) -> list[dict]:
    """Case (b): random fit / eval / new cuts of the pool, a calibrator fitted per cut as the run chose it."""
    st = run.settings
    conf = float(min(st.conf_thresholds))
    s = Settings.from_recorded(st, head=head, progress=False)
    index = _index(pool, head)
    empty = pool[0].boxes.head(0)
    all_imgs = [(k, i) for k, src in enumerate(pool) for i in range(src.n_img)]
    out = []
    for r in range(reps):
        order = rng.permutation(len(all_imgs))[: 3 * size]
        parts = [
            _gather(index, empty, pool, [all_imgs[j] for j in order[k * size : (k + 1) * size]])
            for k in range(3)
        ]
        choice = fit_head(
            parts[0][0].filter(~pl.col("ignore"))
            if "ignore" in parts[0][0].columns
            else parts[0][0],
            s,
        )
        (eb, gt_then, cls_then), (nb, gt_now, cls_now) = parts[1], parts[2]
        then = _kept(with_calibrated(eb, choice.calibrator), conf)
        now = _kept(with_calibrated(nb, choice.calibrator), conf)
        out.append(
            one_check(
                then,
                gt_then,
                cls_then,
                now,
                gt_now,
                cls_now,
                conf=conf,
                names=list(run.class_names),
                ece_bins=st.ece_bins,
                seed=r,
            )
        )
    return out


def crowded_rows(named: list[tuple[str, Source]], head: str, conf: float) -> str:
    """Per labelled split: its crowded images (:func:`~det_calib.check.drift_tests.crowded_images`), their
    kept boxes, and correct / expected in them and outside them (boxes kept at ``conf``, ``head``)."""
    out = (
        "| images | crowded images | their kept boxes | boxes in them | correct / expected in them "
        "| "
        "correct / expected outside |\n|---|---|---|---|---|---|\n"
    )
    for label, src in named:
        v = _kept(src.boxes.filter(pl.col("head") == head), conf)
        ids = crowded_images(v.image_id)
        m = np.isin(v.image_id, ids)
        each = ", ".join(str(int((v.image_id == i).sum())) for i in ids) or "-"
        out += (
            f"| {label} | {ids.size} | {each} | {int(m.sum())} of {v.n} | "
            f"{int(v.correct[m].sum())} / "
            f"{v.conf[m].sum():.1f} | {int(v.correct[~m].sum())} / {v.conf[~m].sum():.1f} |\n"
        )
    return out


def shifted_source(run_dir: Path, kind: str, severity: int, model: Path | None) -> Source:
    """The demo's test split under a corruption (:func:`det_calib.demo.shifted_data_yaml`), captured as
    ``check`` captures."""
    from det_calib.check.run_check import new_boxes
    from det_calib.demo import shifted_data_yaml

    _, sp, tables = new_boxes(run_dir, shifted_data_yaml(kind, severity), "test", model=model)
    count, cls = _gt(sp)
    return Source(
        f"{kind}-{severity}", pl.concat(list(tables.values()), how="diagonal_relaxed"), count, cls
    )


def _rate(rows: list[dict], key: str) -> str:
    """``k / n = rate [Wilson 95%]``."""
    n = len(rows)
    k = sum(bool(r[key]) for r in rows)
    p = k / n
    z = 1.959964
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{k}/{n} = {p:.3f} [{max(0.0, mid - half):.3f}, {min(1.0, mid + half):.3f}]"


def table(results: dict[tuple[str, str], list[dict]]) -> str:
    head = (
        "| case | head | repetitions | sets with crowded images | calibration drifted, crowded "
        "images not set "
        "apart | calibration drifted | detection changed | any labelled alarm | any labelled "
        "alarm, each verdict "
        "at 0.05 (before) | label-free: output shifted "
        "|\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for (case, h), rs in results.items():
        for r in rs:
            r["any"] = r["drifted"] or r["changed"]
        crowded = sum(r["crowded"] > 0 for r in rs)
        rows.append(
            f"| {case} | {h} | {len(rs)} | {crowded} | {_rate(rs, 'drifted_before')} | "
            f"{_rate(rs, 'drifted')} "
            f"| {_rate(rs, 'changed')} | {_rate(rs, 'any')} | {_rate(rs, 'any_each')} "
            f"| {_rate(rs, 'shifted')} |"
        )
    return head + "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="run folder of `det-calib calibrate` on the demo")
    ap.add_argument(
        "--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="seeds of the fresh renders"
    )
    ap.add_argument("--images", type=int, default=400, help="images per fresh render")
    ap.add_argument("--reps", type=int, default=40, help="repetitions per case and head")
    ap.add_argument(
        "--split-size", type=int, default=400, help="images of each part in the random splits"
    )
    ap.add_argument("--work", type=Path, default=None, help="cache of the renders and their boxes")
    ap.add_argument(
        "--model",
        type=Path,
        default=None,
        help="the detector (default the run's; give it where the run's file has moved)",
    )
    ap.add_argument(
        "--shifted",
        nargs=2,
        metavar=("KIND", "SEVERITY"),
        default=["blur", "3"],
        help="a shifted demo split shown beside the clean ones in the crowded-images table",
    )
    ap.add_argument(
        "--doc",
        action="store_true",
        help="write docs/generated/check_false_alarm.md and check_crowded_images.md",
    )
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    t0 = time.perf_counter()
    run_dir = Path(a.run)
    run = load_run(run_dir)
    work = a.work or cache_dir() / "check-false-alarm"
    fresh = [fresh_source(run_dir, k, work, a.images, a.model) for k in a.seeds]
    t_capture = time.perf_counter() - t0
    pool = run_sources(run) + fresh
    rng = np.random.default_rng(0)
    results = {}
    for h in run.heads:
        results[("fresh renders", h)] = fresh_case(run, fresh, h, a.reps, rng)
        results[("random splits", h)] = split_case(run, pool, h, a.reps, a.split_size, rng)
    text = table(results)
    conf = float(min(run.settings.conf_thresholds))
    fit_src, eval_src = run_sources(run)
    named = [
        (f"run's fit split ({run.settings.fit_split}, seed 0)", fit_src),
        (f"run's eval split ({run.settings.eval_split}, seed 0)", eval_src),
        *((f"fresh test render, seed {k}", src) for k, src in zip(a.seeds, fresh)),
        (
            f"{a.shifted[0]}-{a.shifted[1]} (test, seed 0)",
            shifted_source(run_dir, a.shifted[0], int(a.shifted[1]), a.model),
        ),
    ]
    h0 = "nms" if "nms" in run.heads else run.heads[0]
    crowd = crowded_rows(named, h0, conf)
    crowd += (
        "\n"
        + against_clean(
            results[("fresh renders", h0)],
            _kept(named[-1][1].boxes.filter(pl.col("head") == h0), conf),
            _then(run, h0, conf),
            named[-1][0],
        )
        + "\n"
    )
    wall = time.perf_counter() - t0
    print(crowd)
    print(text)
    print(f"wall {wall:.0f} s (renders and captures {t_capture:.0f} s)")
    if a.doc:
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from doc_table import write_doc_table

        note = (
            f"Nominal level {ALPHA} (`--alpha`: the labelled check's two verdicts at "
            f"{ALPHA / QUESTIONS:g} each, "
            f"each a Bonferroni family; before, each at {ALPHA}); at least {MIN_BOXES} kept boxes; "
            f"{N_PERM} permutations; fresh renders: seeds {', '.join(map(str, a.seeds))} of the "
            "demo's test "
            f"split, {a.images} images each; random splits: {a.split_size} images a part from the "
            "run's fit "
            f"and eval splits and the renders. Rates with Wilson 95% intervals; wall {wall:.0f} s "
            "on a shared "
            "2-core machine."
        )
        seeds = "" if a.seeds == [1, 2, 3, 4, 5] else f" --seeds {' '.join(map(str, a.seeds))}"
        command = (
            f"python3 benchmarks/bench_check_false_alarm.py --run RUN --reps {a.reps}{seeds} --doc"
        )
        write_doc_table("check_false_alarm", text, note=note, command=command)
        write_doc_table(
            "check_crowded_images",
            crowd,
            command=command,
            note=f"Head {'nms' if 'nms' in run.heads else run.heads[0]}, boxes kept at conf {conf:g}; "
            f"an image is crowded with at least {CROWDED_FACTOR} times the median kept boxes per "
            f"image and at least {CROWDED_MIN_BOXES}.",
        )


if __name__ == "__main__":
    main()
