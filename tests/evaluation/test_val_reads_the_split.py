"""The Ultralytics val check reads the run's own split: the labels det_calib read for every image
(a subset of symlinked images carrying labels of its own included), nothing written outside the
user's data and the run's folder, and a val that read something else says "NOT verified"."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.pipeline import ultralytics_checks
from det_calib.pipeline.calibrate_job import calibrate
from det_calib.pipeline.val_view import write_split_yaml

RUN = {"n_boot": 10, "report": False, "progress": False, "method": "temperature", "head": "nms"}
NAMES = ["circle", "ellipse", "square", "rectangle", "triangle", "hexagon", "star", "cross"]


def _tree(root: Path) -> dict[str, float]:
    """Every file under ``root`` with its modification time."""
    return {str(p.relative_to(root)): p.lstat().st_mtime for p in root.rglob("*")}


@pytest.fixture(scope="module")
def symlinked_subset(tmp_path_factory, fixture_images) -> tuple[Path, Path]:
    """A larger dataset ``big/`` (the fixture images, labels with every class id permuted) and a subset
    ``sub/`` whose images are symlinks to big's and whose labels are the fixture's own: ``(sub yaml, big)``."""
    root = tmp_path_factory.mktemp("symlinked")
    big, sub = root / "big", root / "sub"
    for d in (
        big / "images" / "val",
        big / "labels" / "val",
        sub / "images" / "test",
        sub / "labels" / "test",
    ):
        d.mkdir(parents=True)
    for img in fixture_images:
        shutil.copyfile(img, big / "images" / "val" / img.name)
        lab = img.parents[2] / "labels" / "fixture" / f"{img.stem}.txt"
        lines = [ln.split() for ln in lab.read_text().splitlines() if ln.strip()]
        (big / "labels" / "val" / lab.name).write_text(
            "".join(f"{7 - int(t[0])} {' '.join(t[1:])}\n" for t in lines)
        )  # other labels behind the link
        shutil.copyfile(lab, sub / "labels" / "test" / lab.name)
        os.symlink(big / "images" / "val" / img.name, sub / "images" / "test" / img.name)
    yml = sub / "data.yaml"
    yml.write_text(
        f"path: {sub}\ntrain: images/test\nval: images/test\ncalib: images/test\ntest: "
        "images/test\n"
        f"names: {json.dumps(NAMES)}\n"
    )
    return yml, big


@pytest.mark.slow
def test_symlinked_subset_val_reads_the_subsets_labels(
    symlinked_subset, demo_model_path, fixture_yaml, tmp_path
):
    yml, big = symlinked_subset
    before, before_sub = _tree(big), _tree(yml.parent)
    ds = load_data_yaml(yml)
    split = load_split(ds, "test")
    fixture = load_split(load_data_yaml(fixture_yaml), "fixture")
    # det_calib's own reader: the subset's labels, not those behind the symlinks
    assert split.gt["cls"].to_list() == fixture.gt["cls"].to_list()
    assert all(p.is_symlink() for p in split.images)

    run = calibrate(
        demo_model_path, yml, fit_split="calib", eval_split="test", out=tmp_path / "run", **RUN
    )
    uv = run.result.results["nms"].ultralytics_val
    assert uv.verified is True and uv.images_seen == 12 and uv.instances_seen == fixture.gt.height
    assert uv.skipped == []
    assert _tree(big) == before, "a file was written into the folder behind the symlinks"
    assert _tree(yml.parent) == before_sub, "the run wrote into the user's dataset (a label cache?)"

    from ultralytics import YOLO

    plain = YOLO(str(demo_model_path)).val(
        data=str(yml),
        split="test",
        plots=False,
        verbose=False,
        project=str(tmp_path / "plain"),
        name="val",
    )
    assert uv.original.map50_95 == pytest.approx(float(plain.box.map), abs=1e-6)
    assert uv.original.map50 == pytest.approx(float(plain.box.map50), abs=1e-6)
    text = (tmp_path / "run" / "summary.txt").read_text()
    assert "val read the run's 12 images" in text and "NOT verified" not in text


@pytest.mark.slow
def test_val_that_reads_fewer_images_is_not_verified(
    symlinked_subset, demo_model_path, tmp_path, monkeypatch
):
    yml, _ = symlinked_subset
    real = ultralytics_checks.write_split_yaml

    def one_label_unreadable_to_val(data, split, folder):  # plants a label file only val reads
        out = real(data, split, folder)
        first = sorted((Path(folder) / "labels").iterdir())[0]
        first.write_text("3 0.5 0.5\n")  # three values: Ultralytics drops the image as corrupt
        return out

    monkeypatch.setattr(ultralytics_checks, "write_split_yaml", one_label_unreadable_to_val)
    run = calibrate(
        demo_model_path, yml, fit_split="calib", eval_split="test", out=tmp_path / "run", **RUN
    )
    uv = run.result.results["nms"].ultralytics_val
    assert (
        uv.verified is False and not uv.ran
    )  # no mAP kept from a pass that measured another split
    assert (uv.images_seen, uv.images_expected) == (11, 12)
    assert uv.instances_seen < uv.instances_expected
    assert len(uv.skipped) == 1 and uv.skipped[0].startswith(
        str(load_split(load_data_yaml(yml), "test").images[0])
    )
    text = (tmp_path / "run" / "summary.txt").read_text()
    assert "NOT verified: Ultralytics val saw 11 of 12 images" in text
    rec = json.loads((tmp_path / "run" / "calibration.json").read_text())["ultralytics_val"]["nms"]
    assert rec["verified"] is False and rec["images_seen"] == 11 and rec["original"] is None
    assert "NOT verified" in rec["note"]


def _ultralytics_split(yml: Path, split: str) -> tuple[list[str], list[str], np.ndarray]:
    """Images, label files and instances per class of ``split`` as plain Ultralytics val reads them."""
    from ultralytics.cfg import get_cfg
    from ultralytics.data.build import build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset

    data = check_det_dataset(str(yml))
    ds = build_yolo_dataset(get_cfg(overrides={"imgsz": 64}), data[split], 1, data, mode="val")
    cls = np.concatenate([lab["cls"].reshape(-1) for lab in ds.labels]).astype(int)
    return list(ds.im_files), list(ds.label_files), np.bincount(cls, minlength=len(NAMES))


def _layout(root: Path, fixture_images: list[Path]) -> dict[str, Path]:
    """The fixture laid out the other ways users lay out splits; name -> data.yaml."""
    src_labels = fixture_images[0].parents[2] / "labels" / "fixture"

    def put(img: Path, image_dir: Path, label_dir: Path, name: str | None = None) -> None:
        image_dir.mkdir(parents=True, exist_ok=True)
        label_dir.mkdir(parents=True, exist_ok=True)
        name = name or img.name
        shutil.copyfile(img, image_dir / name)
        shutil.copyfile(src_labels / f"{img.stem}.txt", label_dir / f"{Path(name).stem}.txt")

    out = {}
    # nested folders, upper-case extensions
    for i, img in enumerate(fixture_images):
        sub = f"part{i % 3}/deeper" if i % 2 else f"part{i % 3}"
        put(
            img,
            root / "nested" / "images" / "val" / sub,
            root / "nested" / "labels" / "val" / sub,
            img.stem + (".JPG" if i % 4 == 0 else ".jpg"),
        )
    out["nested"] = root / "nested"
    # images beside their labels (no images/ folder)
    for img in fixture_images:
        put(img, root / "beside" / "val", root / "beside" / "val")
    out["beside"] = root / "beside"
    # a list of folders
    for i, img in enumerate(fixture_images):
        part = "a" if i < 6 else "b"
        put(img, root / "folders" / "images" / part, root / "folders" / "labels" / part)
    out["folders"] = root / "folders"
    # .txt lists: absolute, ./-relative (to the list) and relative (to the current folder) lines
    for img in fixture_images:
        put(img, root / "listed" / "images" / "all", root / "listed" / "labels" / "all")
    imgs = sorted((root / "listed" / "images" / "all").iterdir())
    lines = [
        str(p) if i % 3 == 0 else f"./images/all/{p.name}" if i % 3 == 1 else os.path.relpath(p)
        for i, p in enumerate(imgs)
    ]
    (root / "listed" / "val.txt").write_text("\n".join(lines) + "\n")
    out["listed"] = root / "listed"
    vals = {
        "nested": "images/val",
        "beside": "val",
        "folders": "[images/a, images/b]",
        "listed": "val.txt",
    }
    yamls = {}
    for name, folder in out.items():
        y = folder / "data.yaml"
        y.write_text(
            f"path: {folder}\ntrain: {vals[name]}\nval: {vals[name]}\nnames: {json.dumps(NAMES)}\n"
        )
        yamls[name] = y
    return yamls


@pytest.mark.fast
@pytest.mark.parametrize("layout", ["nested", "beside", "folders", "listed"])
def test_split_layouts_read_alike_by_det_calib_and_val(
    layout, tmp_path, fixture_images, monkeypatch
):
    monkeypatch.chdir(
        tmp_path
    )  # bare relative lines of a .txt list are relative to the current folder
    yml = _layout(tmp_path / "data", fixture_images)[layout]
    ds = load_data_yaml(yml)
    split = load_split(ds, "val")
    images, labels, instances = _ultralytics_split(yml, "val")
    assert [str(p) for p in split.images] == [os.path.abspath(p) for p in images]
    from det_calib.data.ground_truth import label_path

    assert [str(label_path(p)) for p in split.images] == [os.path.abspath(p) for p in labels]
    assert np.array_equal(np.bincount(split.gt["cls"].to_numpy(), minlength=len(NAMES)), instances)
    if layout == "nested":
        assert sum(p.suffix == ".JPG" for p in split.images) == 3
    # the view val reads holds the same images and instances
    view = tmp_path / "view"
    v_images, _, v_instances = _ultralytics_split(write_split_yaml(ds, split, view), "val")
    assert len(v_images) == len(images) and np.array_equal(v_instances, instances)
    assert all(Path(p).resolve() == q.resolve() for p, q in zip(v_images, split.images))
