"""Atomic output: nothing is ever half-written under its final name, and an output folder is
replaced whole (:func:`staged_output`)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from det_calib.errors import InputError


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``.

    On any exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(path: str | Path, text: str) -> Path:
    """Write text atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write bytes atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def to_json(obj: Any) -> str:
    """JSON text with numpy scalars and paths converted; NaN written as null."""
    return json.dumps(_nan_to_none(obj), indent=2, default=_json_default, allow_nan=False) + "\n"


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nan_to_none(v) for v in obj]
    try:
        import numpy as np

        if isinstance(obj, np.floating) and np.isnan(obj):
            return None
    except ImportError:  # pragma: no cover
        pass
    return obj


def write_json(path: str | Path, obj: Any) -> Path:
    """Write JSON atomically."""
    return write_text(path, to_json(obj))


# ------------------------------------------------------------------------------ output folder
#
# det_calib owns the folder given as ``--out``. A run builds its complete output in a staging
# folder beside it (same parent, so the same file system) and publishes it with one directory
# swap: Linux ``renameat2(RENAME_EXCHANGE)`` exchanges the two names atomically, so a reader, or a
# run killed at any instant, sees either the whole previous output or the whole new one. Where the
# exchange is unavailable (another OS, a file system without it) the swap is two renames (old
# folder aside, new folder in); a kill between them leaves no folder under the final name for a
# moment, and the next run puts the previous output back before doing anything else.
#
# Leftovers of killed runs (staging folders, a folder moved aside) carry the id of the process
# that made them; the next run removes those whose process is gone.
#
# Files in the folder that det_calib did not write are kept: the manifest lists what the last
# run wrote, det_calib's own file names are always its own, and everything else is carried into
# the new folder (hard links, or copies where a
# link is impossible). A folder that holds files but is not a det_calib output is refused, so that
# `--out ~` cannot turn a home folder into a det_calib output.

_MANIFEST = ".det_calib-files.json"
_STAGE_TAG = ".det_calib-staging-"
_ASIDE_TAG = ".det_calib-old-"
_LEGACY_STAGE = ".det_calib-staging-"  # earlier versions staged inside the output folder
# the names det_calib writes: an earlier version's folder (no manifest) is recognised and
# replaced by them, and they are never taken for a user's files
_LEGACY_FILES = (
    "calibration.json",
    "boxes.parquet",
    "calibrated.pt",
    "summary.txt",
    "report.html",
    "report.md",
    "figures",
    "thresholds.json",
)


def _sibling_prefix(out: Path, tag: str) -> str:
    return f".{out.name}{tag}"


def _pid_alive(pid: int) -> bool:
    if os.name != "posix":  # os.kill(pid, 0) would end the process on Windows: never judge it dead
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _leftovers(out: Path, tag: str) -> list[tuple[Path, int | None]]:
    """Sibling folders ``.{name}{tag}{pid}-{random}`` of ``out``, with the pid (None if unreadable)."""
    prefix = _sibling_prefix(out, tag)
    found = []
    if out.parent.is_dir():
        for p in out.parent.iterdir():
            if p.name.startswith(prefix) and p.is_dir() and not p.is_symlink():
                head = p.name[len(prefix) :].split("-", 1)[0]
                found.append((p, int(head) if head.isdigit() else None))
    return sorted(found, key=lambda e: e[0].stat().st_mtime)


def _stale(pid: int | None) -> bool:
    return pid is None or (pid != os.getpid() and not _pid_alive(pid))


def _recover_output_dir(out: str | Path) -> list[Path]:
    """Repair what a killed run left around ``out``; return the folders removed.

    * no folder under ``out`` but a folder moved aside by an interrupted two-rename swap: it is
      put back (the previous output, complete);
    * staging folders and moved-aside folders of runs that are no longer running: removed;
    * staging folders that earlier versions kept inside ``out``: removed.
    """
    out = _resolve(out)
    asides = [(p, pid) for p, pid in _leftovers(out, _ASIDE_TAG) if _stale(pid)]
    if not os.path.lexists(out) and asides:
        previous = asides.pop()[0]  # the most recent
        os.rename(previous, out)
        logging.getLogger(__name__).warning("restored %s from an interrupted run", out)
    removed = []
    for p, _pid in asides + [(p, pid) for p, pid in _leftovers(out, _STAGE_TAG) if _stale(pid)]:
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    if out.is_dir() and _owned(out) is not None:
        for p in out.glob(_LEGACY_STAGE + "*"):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    if removed:
        logging.getLogger(__name__).info(
            "removed %d leftover staging folder(s) of interrupted runs beside %s", len(removed), out
        )
    return removed


def _resolve(out: str | Path) -> Path:
    """``out`` with symlinks resolved (the swap renames the real folder, not a link to it)."""
    return Path(os.path.realpath(out))


def _owned(out: Path) -> set[str] | None:
    """Top-level names det_calib wrote in ``out`` (manifest or an earlier version's files); None if
    ``out`` is not a det_calib output."""
    manifest = out / _MANIFEST
    if manifest.is_file():
        try:
            files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
            # det_calib's own names count as its own even when another command (re)wrote them
            # after the run (`det-calib report RUN` rewrites report.html and figures/ in place)
            return {str(f).split("/", 1)[0] for f in files} | {_MANIFEST, *_LEGACY_FILES}
        except (ValueError, KeyError, TypeError):
            return None
    legacy = out / "calibration.json"
    if legacy.is_file():
        try:
            if "det_calib_version" in json.loads(legacy.read_text(encoding="utf-8")):
                return set(_LEGACY_FILES)
        except ValueError:
            return None
    return None


def check_output_dir(out: str | Path) -> None:
    """Raise :class:`~det_calib.errors.InputError` unless ``out`` can take a det_calib output.

    It can when it does not exist, is an empty folder, or is a folder a det_calib run wrote.
    """

    path = _resolve(out)
    if not os.path.lexists(path):
        if path.parent.exists() and not path.parent.is_dir():
            raise InputError(f"`out` {out}: {path.parent} is not a folder", param="out")
        return
    if not path.is_dir():
        raise InputError(f"`out` {out} exists and is not a folder", param="out")
    if (
        any(True for p in path.iterdir() if not p.name.startswith(_LEGACY_STAGE))
        and _owned(path) is None
    ):
        raise InputError(
            f"`out` {out} is a folder with files that det_calib did not write (no {_MANIFEST}): "
            "choose an empty or new folder, or a previous det_calib output",
            param="out",
        )


def read_manifest(out: str | Path) -> list[str]:
    """The files (relative paths) the last det_calib run wrote in ``out``."""
    return list(json.loads((Path(out) / _MANIFEST).read_text(encoding="utf-8"))["files"])


@contextlib.contextmanager
def staged_output(out: str | Path) -> Iterator[Path]:
    """Yield an empty staging folder; on success it replaces ``out`` in one swap.

    Before staging, leftovers of killed runs are cleared (:func:`_recover_output_dir`) and ``out``
    is checked (:func:`check_output_dir`). On an exception the staging folder is removed and
    ``out`` is untouched. While staging, log messages that name a path in the staging folder
    name the same path under ``out`` instead.

    Examples:
        >>> with staged_output("runs/demo") as stage:  # doctest: +SKIP
        ...     write_text(stage / "summary.txt", "...")
    """
    shown = Path(out)
    out = _resolve(out)
    _recover_output_dir(out)
    check_output_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(
        tempfile.mkdtemp(prefix=f"{_sibling_prefix(out, _STAGE_TAG)}{os.getpid()}-", dir=out.parent)
    )
    try:
        with logged_as(stage, shown):
            yield stage
        _publish(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    logging.getLogger(__name__).debug("replaced %s with the new output", shown)


@contextlib.contextmanager
def logged_as(path: str | Path, shown: str | Path) -> Iterator[None]:
    """While in the block, log messages that name ``path`` (a folder being staged) name ``shown`` (where
    its files will be) instead."""
    old_factory = logging.getLogRecordFactory()
    staged, final = str(path), str(shown)

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = old_factory(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is the logging module's business
            return record
        if staged in message:
            record.msg, record.args = message.replace(staged, final), None
        return record

    logging.setLogRecordFactory(factory)
    try:
        yield
    finally:
        logging.setLogRecordFactory(old_factory)


def _publish(stage: str | Path, out: str | Path) -> None:
    """Make the complete folder ``stage`` the folder ``out`` (see the notes above this function).

    Writes the manifest (the files of ``stage``), carries over the files of the current ``out``
    that det_calib did not write, then swaps. ``stage`` is consumed.
    """
    stage, out = Path(stage), _resolve(out)
    files = sorted(
        p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file() or p.is_symlink()
    )
    write_text(
        stage / _MANIFEST, json.dumps({"written_by": "det_calib", "files": files}, indent=1) + "\n"
    )
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(stage, 0o777 & ~umask)  # mkdtemp makes 0700
    if not os.path.lexists(out):
        os.rename(stage, out)
        return
    check_output_dir(out)
    owned = _owned(out) or set()
    for p in out.iterdir():
        if p.name in owned or p.name.startswith(_LEGACY_STAGE) or os.path.lexists(stage / p.name):
            continue
        _carry(p, stage / p.name)
    if _exchange(stage, out):
        shutil.rmtree(stage)  # now the previous output
        return
    aside = out.parent / f"{_sibling_prefix(out, _ASIDE_TAG)}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.rename(out, aside)
    os.rename(stage, out)
    shutil.rmtree(aside)


def _carry(src: Path, dst: Path) -> None:
    """Hard-link ``src`` (a file, link or folder tree) to ``dst``; copy where linking fails."""

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, copy_function=link)
    elif src.is_symlink():
        os.symlink(os.readlink(src), dst)
    else:
        link(str(src), str(dst))


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange the names ``a`` and ``b`` (Linux renameat2); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc < 2.28, musl
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))
