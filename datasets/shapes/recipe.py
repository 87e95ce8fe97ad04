"""The Ultralytics training settings every demo model shares: on the CPU, reproducible, nothing downloaded.

Each training script here (``train.py``, ``train_task.py``, ``train_classify.py``, ``train_rtdetr.py``)
passes :func:`cpu_recipe`'s arguments to ``model.train`` beside its own (data, epochs, image size,
augmentation, warm-up).
"""

from __future__ import annotations


def cpu_recipe(*, batch: int, lr0: float, seed: int, project: str, name: str) -> dict:
    """The ``model.train`` keyword arguments the demo models are all trained with."""
    return dict(
        batch=batch,
        # nominal batch = batch: one optimiser step per batch. Ultralytics' default (64) would
        # accumulate 4 batches per step, a quarter of the updates, too few on a short schedule
        nbs=batch,
        # from scratch on a short schedule: Ultralytics' automatic choice (AdamW at 8e-4, meant
        # for fine-tuning pretrained weights) learns too slowly here
        optimizer="AdamW",
        lr0=lr0,
        cache="ram",  # decoded once: PNG decoding would otherwise share the 2 cores with training
        seed=seed,
        deterministic=True,
        device="cpu",
        workers=2,
        plots=False,  # plotting would try to download a font
        amp=False,
        project=project,
        name=name,
        exist_ok=True,
    )
