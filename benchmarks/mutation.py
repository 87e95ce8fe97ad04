"""Mutation testing: plant small bugs in one module at a time and list the ones no test notices.

Runs `mutmut <https://pypi.org/project/mutmut/>`_ (3.x; ``pip install mutmut``, a dev tool, not
a dependency of the project) over the modules named on the command line, each in its own copy
of the working tree (so the checkout is never touched), with a fast test selection per module.
mutmut maps every test to the functions it runs, so a mutant only reruns the tests that reach
it. Prints, per module, the mutant counts by outcome and every survivor with its diff.

Usage (from the repository root; a module is named by its path under ``det_calib/``, or by its
file name where that is unique)::

    python3 benchmarks/mutation.py                                 # the default modules below
    python3 benchmarks/mutation.py coco_engine --sample 120 --record   # 120 mutants, into MUTATION.md
    python3 benchmarks/mutation.py matching/one_to_one metrics/calibration --max-children 2 --work /tmp/mut
    python3 benchmarks/mutation.py run/head_figures --only _thresholded --only '_map_*'   # some functions
    python3 benchmarks/mutation.py affine --only 'PlattScaler.*'                   # methods: Class.method
    python3 benchmarks/mutation.py fold --budget 600                               # stop after 10 min

``--sample N`` checks N mutants spread evenly over the module's functions (the first call runs
each function's first mutant, which makes mutmut generate them all); ``--record`` writes each
module's counts and survivors into a block of ``benchmarks/MUTATION.md`` that a later run
replaces (the explanations written around the blocks stay).
``--only GLOB`` (repeatable) mutates only the functions whose name matches (``Class.method`` for a
method); the other mutants stay ``not checked`` and are listed by function at the end, so a
partial run says what it left out. Each run first copies the worktree's current ``tests/`` into
the module's copy (new tests are picked up by mutmut, which then reruns its test mapping for
them); a copy whose ``det_calib/`` differs from the worktree's is started over, as its cached
results no longer describe the code.

A module's copy is kept under ``--work`` (``/tmp/det_calib_mutation/<stage>.<module>``): rerunning
reuses mutmut's cache there, and ``cd /tmp/det_calib_mutation/<stage>.<module> && python3 -m
mutmut show <name>`` shows one mutant. ``--fresh`` starts over. CPU-heavy: the pipeline and fold runs
take tens of minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# module (its path under det_calib/, without .py) -> the tests that exercise it (fast ones;
# mutmut runs only those that reach a mutant)
TESTS: dict[str, list[str]] = {
    "matching/one_to_one": ["tests/matching/test_one_to_one.py", "tests/system/test_boundaries.py"],
    "metrics/calibration": ["tests/metrics/test_calibration.py", "tests/system/test_boundaries.py"],
    "evaluation/kept_set": ["tests/evaluation/test_kept_set.py", "tests/system/test_boundaries.py"],
    "calibrators/temperature": [
        "tests/calibrators/test_temperature.py",
        "tests/calibrators/test_temperature_persistence.py",
    ],
    "calibrators/affine": ["tests/calibrators/test_affine.py"],
    "deploy/fold": [
        "tests/deploy/test_fold.py",
        "tests/deploy/test_fold_calibrators.py",
        "tests/system/test_promises.py::test_fold_into_a_legacy_head",
    ],
    "metrics/operating_point": ["tests/metrics/test_operating_point.py"],
    # the fast selection tests (the four planted-map tests take 3-4 s each and reach every
    # mutant of select_calibrator)
    "selection/cross_validation": [
        "tests/selection/test_cross_validation.py::test_planted_nonlinear_map_picks_isotonic",
        "tests/selection/test_cross_validation.py::test_selection_result_is_json_and_the_calibrator_round_trips",
        "tests/selection/test_cross_validation.py::test_repeats_are_fresh_fold_assignments_scored_fold_by_fold",
        "tests/selection/test_cross_validation.py::test_one_se_rule_uses_the_standard_error_of_the_cv_estimate",
        "tests/selection/test_cross_validation.py::test_selection_bad_input",
        "tests/selection/test_cross_validation.py::test_fit_calibrator_uses_only_its_fit_range",
    ],
    # each of these runs a real calibration (tens of seconds): the two that recompute every figure
    # of calibration.json, the second with thresholds exactly on a score
    "run/head_figures": [
        "tests/pipeline/test_head_figures.py::test_every_figure_of_the_default_run",
        "tests/pipeline/test_head_figures.py::test_figures_with_thresholds_exactly_on_scores",
    ],
    # the planted sets and known answers against pycocotools (the fixture and demo-split captures
    # and the calibration run are left out: seconds to minutes a mutant, and they reach the same code)
    "evaluation/coco_engine": [
        "tests/evaluation/test_coco_engine.py::test_planted_sets_equal_pycocotools",
        "tests/evaluation/test_coco_engine.py::test_area_range_boundaries_equal_pycocotools",
        "tests/evaluation/test_coco_engine.py::test_area_bounds_are_closed",
        "tests/evaluation/test_coco_engine.py::test_annotation_area_field_equals_pycocotools",
        "tests/evaluation/test_coco_engine.py::test_result_carries_its_parameters",
        "tests/evaluation/test_coco_engine.py::test_table_maps_equal_pycocotools_on_box_tables",
        "tests/evaluation/test_coco_engine.py::test_known_answers",
        "tests/evaluation/test_coco_engine.py::test_matches_equal_pycocotools_dtmatches",
    ],
    "ensemble/fusion": ["tests/ensemble/test_fusion.py"],
    # the tests of the statistical tests (the rest of check/test_run_check.py runs `det-calib check` on the demo)
    "check/drift_tests": [
        "tests/check/test_drift_tests.py",
        "tests/check/test_run_check.py::test_p_values_match_scipy",
        "tests/check/test_run_check.py::test_calibration_in_the_large_false_alarm_and_power",
        "tests/check/test_run_check.py::test_clustered_images_do_not_read_as_drift",
        "tests/check/test_run_check.py::test_hosmer_lemeshow_known_answers",
        "tests/check/test_run_check.py::test_change_tests_false_alarm_and_power",
        "tests/check/test_run_check.py::test_ratio_test_and_permutation_tests",
    ],
    # the threshold and the graphs on small hand-made exports (deploy/test_exported_engines.py: real exports, minutes)
    "deploy/calibrated_export": [
        "tests/deploy/test_equivalent_threshold.py",
        "tests/deploy/test_calibrated_export_graph.py",
    ],
    "calibrators/spline": ["tests/calibrators/test_spline.py"],
    "calibrators/isotonic": ["tests/calibrators/test_isotonic.py"],
}
DEFAULT = [
    "evaluation/coco_engine",
    "ensemble/fusion",
    "check/drift_tests",
    "deploy/calibrated_export",
    "calibrators/spline",
    "calibrators/isotonic",
]
# statements starting on lines that match these (regex) are not mutated
SKIP_PATTERNS = [
    r"^\s*raise \w+(Error|Exception)\(",
    r"^\s*(log|logger)\.(debug|info|warning)\(",
    r"^\s*warnings\.warn\(",
]


def _copy_tree(dst: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for rel in files:
        src = REPO / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def _configure(dst: Path, module: str, tests: list[str]) -> None:
    (dst / "pyproject.toml").write_text(_config_text(module, tests))


def _config_text(module: str, tests: list[str]) -> str:
    def toml_list(xs):
        return "[" + ", ".join('"' + x.replace("\\", "\\\\") + '"' for x in xs) + "]"

    text = (REPO / "pyproject.toml").read_text()
    # mutmut runs the selected test files only; the doctest collection of the suite stays off
    text = text.replace('addopts = "-ra --doctest-modules"', 'addopts = "-ra"')
    text += "\n[tool.mutmut]\n"
    text += 'source_paths = ["det_calib"]\n'
    text += f'only_mutate = ["det_calib/{module}.py"]\n'
    text += 'also_copy = ["datasets", "benchmarks"]\n'
    text += f"pytest_add_cli_args_test_selection = {toml_list(tests)}\n"
    text += 'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]\n'
    # polars' thread pool deadlocks in a child forked from a process that used it: fork every
    # worker from a clean server process instead of from the one that collected the stats
    text += 'process_isolation = "forkserver"\n'
    # error messages, logging and warnings: a mutant there changes wording, not a number
    text += f"do_not_mutate_patterns = {toml_list(SKIP_PATTERNS)}\n"
    return text


def _stale(dst: Path) -> list[str]:
    """The package files whose copy under ``dst`` differs from the worktree's."""
    return sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "det_calib").rglob("*.py")
        if not (dst / p.relative_to(REPO)).is_file()
        or (dst / p.relative_to(REPO)).read_bytes() != p.read_bytes()
    )


def _sync_tests(dst: Path) -> None:
    for p in (REPO / "tests").rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts:
            (dst / p.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst / p.relative_to(REPO))


def _dotted(module: str) -> str:
    """The module's import name: ``evaluation/coco_engine`` -> ``det_calib.evaluation.coco_engine``."""
    return "det_calib." + module.replace("/", ".")


def _copy_dir(work: Path, module: str) -> Path:
    """The module's copy of the worktree: ``WORK/evaluation.coco_engine``."""
    return work / module.replace("/", ".")


def module_name(name: str) -> str:
    """A module of :data:`TESTS` by its path under det_calib/ (``evaluation/coco_engine``), or by its
    file name alone where that is unique (``coco_engine``)."""
    if name in TESTS:
        return name
    hits = [m for m in TESTS if m.rsplit("/", 1)[-1] == name.removesuffix(".py")]
    if len(hits) != 1:
        raise argparse.ArgumentTypeError(
            f"{name!r} is not one of the modules: {', '.join(sorted(TESTS))}"
        )
    return hits[0]


def _patterns(module: str, only: list[str]) -> list[str]:
    """mutmut's mutant-name globs for function-name globs (``Class.method`` for a method)."""
    out = []
    for g in only:
        if "." in g:
            cls, meth = g.split(".", 1)
            out.append(f"{_dotted(module)}.x\u01c1{cls}\u01c1{meth}__mutmut_*")
        else:
            out.append(f"{_dotted(module)}.x_{g}__mutmut_*")
    return out


def _sampled(codes: dict, sample: int) -> set[str]:
    """``sample`` mutant names spread evenly over the module (mutmut's order: function by function,
    in file order), so a modest run still reaches every part of the module."""
    names = list(codes)
    if sample >= len(names):
        return set(names)
    return {names[(i * len(names)) // sample] for i in range(sample)}


def _select(
    dst: Path, module: str, only: list[str], rerun_survivors: bool, sample: int | None = None
) -> list[str] | None:
    """The mutant names (or globs) to hand to ``mutmut run``: None for all (mutmut itself skips
    the ones with a result), [] for nothing.

    mutmut reruns every mutant named on its command line, so with ``--only`` only the matching
    mutants without a result are named; ``rerun_survivors`` adds the survivors (and those without
    tests) of the whole module, to check that new tests kill them. A function missing from
    mutmut's test mapping is named by a glob (an exact name there would fail its lookup).
    """
    patterns = _patterns(module, only)
    meta = dst / "mutants" / "det_calib" / f"{module}.py.meta"
    if not meta.is_file():
        # with --sample, a first run of each function's first mutant generates the module's mutants
        return patterns or ([f"{_dotted(module)}.*__mutmut_1"] if sample else None)
    if not patterns and not rerun_survivors and not sample:
        return None
    from mutmut.stats import status_by_exit_code

    codes = json.loads(meta.read_text())["exit_code_by_key"]
    mapped = json.loads((dst / "mutants" / "mutmut-stats.json").read_text())[
        "tests_by_mangled_function_name"
    ]
    again = {"survived", "no tests", "timeout", "suspicious"} if rerun_survivors else set()
    out: list[str] = []
    chosen = _sampled(codes, sample) if sample else set()
    for name, code in codes.items():
        if code is None:
            if not (
                (patterns and any(fnmatch.fnmatchcase(name, p) for p in patterns)) or name in chosen
            ):
                continue
        elif status_by_exit_code[code] not in again:
            continue
        fn = name.partition("__mutmut_")[0]
        item = name if fn in mapped else fn + "__mutmut_*"
        if item not in out:
            out.append(item)
    return out


def _function_of(name: str) -> str:
    fn = name.rsplit(".", 1)[-1].rsplit("__mutmut_", 1)[0]
    return fn[2:] if fn.startswith("x_") else fn[1:].replace("\u01c1", ".").strip(".")


def _mutmut(dst: Path, names: list[str] | None, max_children: int, budget: float | None) -> None:
    """``mutmut run`` in the copy ``dst`` (all mutants without a result, or ``names``), stopped
    after ``budget`` seconds."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(YOLO_OFFLINE="1", YOLO_VERBOSE="False", OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    cmd = [
        sys.executable,
        "-m",
        "mutmut",
        "run",
        "--max-children",
        str(max_children),
        *(names or []),
    ]
    proc = subprocess.Popen(
        cmd, cwd=dst, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        out, _ = proc.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        # out of time: mutmut stops its workers on SIGINT and keeps the results so far; the
        # mutants it did not reach are listed as `not checked`, and a rerun continues from there
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        print(f"{dst.name}: stopped after the budget of {budget:.0f} s", file=sys.stderr)
    else:
        if proc.returncode != 0:
            print(out[-3000:], file=sys.stderr)
            raise SystemExit(f"mutmut run failed in {dst} (exit {proc.returncode})")


def run_module(
    module: str,
    work: Path,
    *,
    max_children: int,
    fresh: bool,
    run: bool = True,
    only: list[str] | None = None,
    budget: float | None = None,
    rerun_survivors: bool = False,
    sample: int | None = None,
) -> dict:
    """Run mutmut over one module (or with ``run=False`` only read its last results) and print
    the counts and every survivor with its diff. Returns ``{"by_status", "survivors", "unchecked",
    "seconds"}`` (survivors: ``(status, name, diff lines)``; unchecked: function -> count)."""
    dst = _copy_dir(work, module)
    if dst.exists() and not fresh and run and (stale := _stale(dst)):
        print(
            f"{module}: the copy's {', '.join(stale[:3])}{' ...' if len(stale) > 3 else ''} "
            "differ(s) from the "
            "worktree: starting over",
            file=sys.stderr,
        )
        fresh = True
    if (
        dst.exists()
        and not fresh
        and run
        and (dst / "pyproject.toml").read_text() != _config_text(module, TESTS[module])
    ):
        print(
            f"{module}: the test selection or mutmut settings changed: starting over",
            file=sys.stderr,
        )
        fresh = True
    if fresh and dst.exists():
        shutil.rmtree(dst)
    if not dst.exists():
        if not run:
            raise SystemExit(f"{module}: no results under {dst} (run it first)")
        dst.mkdir(parents=True)
        _copy_tree(dst)
        _configure(dst, module, TESTS[module])
    elif run:
        _sync_tests(dst)
    t0 = time.time()
    meta = dst / "mutants" / "det_calib" / f"{module}.py.meta"
    while run:
        generated = meta.is_file()
        names = _select(dst, module, only or [], rerun_survivors, sample)
        if names == []:
            print(f"{module}: nothing left to run", file=sys.stderr)
            break
        left = None if budget is None else budget - (time.time() - t0)
        if left is not None and left <= 0:
            break
        _mutmut(dst, names, max_children, left)
        if generated or not sample:  # with --sample, the first call only generated the mutants
            break
    by_status = _statuses(meta)
    seconds = time.time() - t0
    counts = ", ".join(f"{k} {len(v)}" for k, v in sorted(by_status.items()))
    print(
        f"\n=== {module}: {sum(map(len, by_status.values()))} mutants ({counts})"
        + (f" in {seconds:.0f} s" if run else "")
    )
    functions = _mutant_sources(dst / "mutants" / "det_calib" / f"{module}.py")
    killed_since = (
        json.loads((dst / CHECKED_WITH).read_text()) if (dst / CHECKED_WITH).is_file() else {}
    )
    survivors = []
    for outcome in ("survived", "no tests", "timeout", "suspicious"):
        for name in by_status.get(outcome, []):
            status = (
                "killed since by " + ", ".join(killed_since[name])
                if name in killed_since
                else outcome
            )
            fn = name.rsplit(".", 1)[-1]
            orig_name = fn.rsplit("__mutmut_", 1)[0] + "__mutmut_orig"
            orig = functions.get(orig_name, "")
            mutant = functions.get(fn, "").replace(
                fn + "(", orig_name + "(", 1
            )  # only real changes differ
            diff = difflib.unified_diff(orig.splitlines(), mutant.splitlines(), lineterm="", n=0)
            body = [ln for ln in diff if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
            survivors.append((status, name, body))
            print(f"--- [{status}] {name}\n    " + "\n    ".join(body))
    unchecked: dict[str, int] = {}
    for name in by_status.get("not checked", []):
        unchecked[_function_of(name)] = unchecked.get(_function_of(name), 0) + 1
    if unchecked:
        print(
            f"not checked ({sum(unchecked.values())}): "
            + ", ".join(f"{fn} {n}" for fn, n in sorted(unchecked.items()))
        )
    return {
        "by_status": by_status,
        "survivors": survivors,
        "unchecked": unchecked,
        "seconds": seconds if run else None,
    }


RECORD = REPO / "benchmarks" / "MUTATION.md"
_BEGIN, _END = "<!-- mutation.py: {} -->", "<!-- /mutation.py: {} -->"


def record_block(module: str, result: dict) -> str:
    """The module's results as the Markdown block :func:`write_record` keeps in MUTATION.md."""
    by_status = result["by_status"]
    total = sum(map(len, by_status.values()))
    checked = total - len(by_status.get("not checked", []))
    counts = ", ".join(f"{k} {len(v)}" for k, v in sorted(by_status.items()))
    since = sum(st.startswith("killed since") for st, _, _ in result["survivors"])
    left = len(result["survivors"]) - since
    lines = [
        _BEGIN.format(module),
        f"### {module}",
        "",
        f"`det_calib/{module}.py`, tests: " + ", ".join(f"`{t}`" for t in TESTS[module]) + ".",
        "",
        f"{total} mutants, {checked} checked: {counts}."
        + (
            f" Of the {since + left} left by mutmut, {since} killed since by new tests "
            "(`--check-with`), "
            f"{left} left."
            if since
            else ""
        ),
    ]
    if result["unchecked"]:
        lines += [
            "",
            "Not checked, by function: "
            + ", ".join(f"`{fn}` {n}" for fn, n in sorted(result["unchecked"].items()))
            + ".",
        ]
    no_tests: dict[str, int] = {}
    for status, name, _ in result["survivors"]:
        if status == "no tests":
            no_tests[_function_of(name)] = no_tests.get(_function_of(name), 0) + 1
    if no_tests:
        lines += [
            "",
            "No test of the selection reached them (at the run), by function: "
            + ", ".join(f"`{fn}` {n}" for fn, n in sorted(no_tests.items()))
            + ".",
        ]
    shown = [r for r in result["survivors"] if r[0] != "no tests"]
    if shown:
        lines += ["", "| mutant | outcome | change |", "|---|---|---|"]
        for status, name, body in shown:
            change = "<br>".join(
                "`" + ln.strip().replace("|", "\\|").replace("`", "'") + "`" for ln in body[:6]
            )
            lines.append(f"| `{name.removeprefix(_dotted(module) + '.')}` | {status} | {change} |")
    lines.append(_END.format(module))
    return "\n".join(lines)


def write_record(path: Path, blocks: dict[str, str]) -> None:
    """Put each module's block into ``path``, replacing that module's earlier block (the prose
    around the blocks, e.g. why a survivor is equivalent, is left as it is)."""
    text = path.read_text() if path.is_file() else "# Mutation testing\n"
    for module, block in blocks.items():
        begin, end = _BEGIN.format(module), _END.format(module)
        if begin in text and end in text:
            i, j = text.index(begin), text.index(end) + len(end)
            text = text[:i] + block + text[j:]
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


CHECKED_WITH = "checked_with.json"
"""In a module's copy: survivor -> the tests that ``--check-with`` found killing it."""


def check_with(
    module: str, work: Path, tests: list[str], *, no_tests: bool = True
) -> dict[str, list[str]]:
    """Run ``tests`` (pytest node ids) against every survivor of ``module`` in its copy, one
    mutant at a time, outside mutmut (its results are left as they are).

    For tests outside the module's selection (``TESTS``), e.g. a new test of a slow module whose
    selection mutmut would otherwise recollect from scratch. mutmut's mutated package picks the
    active mutant from ``MUTANT_UNDER_TEST``.
    """
    dst = _copy_dir(work, module)
    mutants = dst / "mutants"
    by_status = _statuses(mutants / "det_calib" / f"{module}.py.meta")
    survivors = [
        n for st in ("survived", "no tests")[: 2 if no_tests else 1] for n in by_status.get(st, [])
    ]
    for p in (REPO / "tests").rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts:
            (mutants / p.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, mutants / p.relative_to(REPO))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(YOLO_OFFLINE="1", YOLO_VERBOSE="False", OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        *tests,
    ]
    if subprocess.run(
        cmd, cwd=mutants, env={**env, "MUTANT_UNDER_TEST": ""}, capture_output=True
    ).returncode:
        raise SystemExit(f"{module}: {tests} fail without a mutant")
    out: dict[str, list[str]] = {"killed": [], "survived": []}
    for name in survivors:
        r = subprocess.run(
            cmd, cwd=mutants, env={**env, "MUTANT_UNDER_TEST": name}, capture_output=True
        )
        out["killed" if r.returncode else "survived"].append(name)
        print(f"{'killed  ' if r.returncode else 'survived'} {name}")
    print(
        f"\n=== {module}: of {len(survivors)} survivors, {len(out['killed'])} killed by "
        f"{' '.join(tests)}"
    )
    # remembered in the copy, so that the results and --record show these survivors as killed since
    record = dst / CHECKED_WITH
    killed = json.loads(record.read_text()) if record.is_file() else {}
    for name in out["killed"]:
        killed[name] = sorted(set(killed.get(name, [])) | {t.removeprefix("tests/") for t in tests})
    record.write_text(json.dumps(killed, indent=1))
    return out


def _statuses(meta: Path) -> dict[str, list[str]]:
    """Mutant names by outcome, from mutmut's result file (what ``mutmut results`` shows)."""
    from mutmut.stats import status_by_exit_code

    by_status: dict[str, list[str]] = {}
    for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
        by_status.setdefault(status_by_exit_code[code], []).append(name)
    return by_status


def _mutant_sources(path: Path) -> dict[str, str]:
    """Source of every function in mutmut's mutated copy of a module (``x_f__mutmut_orig``,
    ``x_f__mutmut_3``, methods as ``xǁClassǁmethod__mutmut_3``), by name (faster than ``mutmut show``)."""
    text = path.read_text()
    lines = text.splitlines()
    out = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "__mutmut_" in node.name:
            out[node.name] = "\n".join(lines[node.lineno - 1 : node.end_lineno])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "modules",
        nargs="*",
        type=module_name,
        default=DEFAULT,
        help="modules by their path under det_calib/ (or file name): " + ", ".join(sorted(TESTS)),
    )
    ap.add_argument("--work", type=Path, default=Path("/tmp/det_calib_mutation"))
    ap.add_argument("--max-children", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument(
        "--fresh", action="store_true", help="delete the module's previous copy and results"
    )
    ap.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="stop each module's run after this long (its remaining mutants: `not checked`)",
    )
    ap.add_argument(
        "--only",
        action="append",
        metavar="GLOB",
        help="mutate only the functions matching GLOB (Class.method for a method); repeatable",
    )
    ap.add_argument(
        "--rerun-survivors",
        action="store_true",
        help="run the survivors (and the mutants without tests) again, e.g. after adding tests",
    )
    ap.add_argument(
        "--check-with",
        action="append",
        metavar="NODEID",
        help="run these tests (pytest node ids, repeatable) against each survivor, outside mutmut",
    )
    ap.add_argument(
        "--sample",
        type=int,
        metavar="N",
        help="check N mutants of each module, spread evenly over its functions (a modest run)",
    )
    ap.add_argument(
        "--record",
        action="store_true",
        help=f"write each module's counts and survivors into {RECORD.relative_to(REPO)}",
    )
    ap.add_argument(
        "--survivors-only",
        action="store_true",
        help="with --check-with: only the mutants that survived their tests, not those without tests",
    )
    ap.add_argument(
        "--results-only",
        action="store_true",
        help="only list the results so far (of a run that was stopped: mutants not yet run show as "
        "`not checked`)",
    )
    args = ap.parse_args(argv)
    try:
        import mutmut  # noqa: F401
    except ImportError:
        raise SystemExit("mutmut is not installed: pip install mutmut") from None
    if args.check_with:
        for module in args.modules:
            check_with(module, args.work, args.check_with, no_tests=not args.survivors_only)
        return 0
    summary, blocks = {}, {}
    for module in args.modules:
        result = run_module(
            module,
            args.work,
            max_children=args.max_children,
            fresh=args.fresh,
            run=not args.results_only,
            only=args.only,
            budget=args.budget,
            rerun_survivors=args.rerun_survivors,
            sample=args.sample,
        )
        summary[module] = {k: len(v) for k, v in result["by_status"].items()}
        blocks[module] = record_block(module, result)
    print("\nsurvivors per module:", {m: s.get("survived", 0) for m, s in summary.items()})
    if args.record:
        write_record(RECORD, blocks)
        print(f"recorded in {RECORD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
