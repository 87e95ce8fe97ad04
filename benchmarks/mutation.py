"""Mutation testing: plant small bugs in one module at a time and list the ones no test notices.

Runs `mutmut <https://pypi.org/project/mutmut/>`_ (3.x; ``pip install mutmut``, a dev tool, not
a dependency of the project) over the modules named on the command line, each in its own copy
of the working tree (so the checkout is never touched), with a fast test selection per module.
mutmut maps every test to the functions it runs, so a mutant only reruns the tests that reach
it. Prints, per module, the mutant counts by outcome and every survivor with its diff.

Usage (from the repository root)::

    python3 benchmarks/mutation.py                         # the default modules below
    python3 benchmarks/mutation.py matching thresholds     # some of them
    python3 benchmarks/mutation.py metrics --max-children 2 --work /tmp/mut
    python3 benchmarks/mutation.py pipeline --only _thresholded --only '_map_*'   # some functions
    python3 benchmarks/mutation.py scaling --only 'PlattScaler.*'                 # methods: Class.method
    python3 benchmarks/mutation.py fold --budget 600                               # stop after 10 min

``--only GLOB`` (repeatable) mutates only the functions whose name matches (``Class.method`` for a
method); the other mutants stay ``not checked`` and are listed by function at the end, so a
partial run says what it left out. Each run first copies the worktree's current ``tests/`` into
the module's copy (new tests are picked up by mutmut, which then reruns its test mapping for
them); a copy whose ``det_calib/`` differs from the worktree's is started over, as its cached
results no longer describe the code.

A module's copy is kept under ``--work`` (``/tmp/det_calib_mutation/<module>``): rerunning
reuses mutmut's cache there, and ``cd /tmp/det_calib_mutation/<module> && python3 -m mutmut
show <name>`` shows one mutant. ``--fresh`` starts over. CPU-heavy: the pipeline and fold runs
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

# module -> the tests that exercise it (fast ones; mutmut runs only those that reach a mutant)
TESTS: dict[str, list[str]] = {
    "matching": ["tests/test_matching.py", "tests/test_boundaries.py"],
    "metrics": ["tests/test_metrics.py", "tests/test_boundaries.py"],
    "thresholds": ["tests/test_thresholds.py", "tests/test_boundaries.py"],
    "calibrators": ["tests/test_calibrators.py", "tests/test_calibrators_persistence.py"],
    "scaling": ["tests/test_scaling.py"],
    "fold": ["tests/test_fold.py", "tests/test_fold_calibrators.py",
             "tests/test_promises.py::test_fold_into_a_legacy_head"],
    "operating": ["tests/test_operating.py"],
    # the fast selection tests (the four planted-map tests take 3-4 s each and reach every
    # mutant of select_calibrator)
    "selection": ["tests/test_selection.py::test_planted_nonlinear_map_picks_isotonic",
                  "tests/test_selection.py::test_selection_result_is_json_and_the_calibrator_round_trips",
                  "tests/test_selection.py::test_repeats_are_fresh_fold_assignments_scored_fold_by_fold",
                  "tests/test_selection.py::test_one_se_rule_uses_the_standard_error_of_the_cv_estimate",
                  "tests/test_selection.py::test_selection_bad_input",
                  "tests/test_selection.py::test_fit_calibrator_uses_only_its_fit_range"],
    # each pipeline test runs a real calibration (tens of seconds): the two that recompute every
    # figure of calibration.json, the second with thresholds exactly on a score
    "pipeline": ["tests/test_figures.py::test_every_figure_of_the_default_run",
                 "tests/test_figures.py::test_figures_with_thresholds_exactly_on_scores"],
}
DEFAULT = ["matching", "metrics", "thresholds", "calibrators", "scaling", "fold", "pipeline"]
# statements starting on lines that match these (regex) are not mutated
SKIP_PATTERNS = [r"^\s*raise \w+(Error|Exception)\(", r"^\s*(log|logger)\.(debug|info|warning)\(",
                 r"^\s*warnings\.warn\("]


def _copy_tree(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.splitlines()
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
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "det_calib").rglob("*.py")
                  if not (dst / p.relative_to(REPO)).is_file()
                  or (dst / p.relative_to(REPO)).read_bytes() != p.read_bytes())


def _sync_tests(dst: Path) -> None:
    for p in (REPO / "tests").rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts:
            (dst / p.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst / p.relative_to(REPO))


def _patterns(module: str, only: list[str]) -> list[str]:
    """mutmut's mutant-name globs for function-name globs (``Class.method`` for a method)."""
    out = []
    for g in only:
        if "." in g:
            cls, meth = g.split(".", 1)
            out.append(f"det_calib.{module}.x\u01c1{cls}\u01c1{meth}__mutmut_*")
        else:
            out.append(f"det_calib.{module}.x_{g}__mutmut_*")
    return out


def _select(dst: Path, module: str, only: list[str], rerun_survivors: bool) -> list[str] | None:
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
        return patterns or None
    if not patterns and not rerun_survivors:
        return None
    from mutmut.stats import status_by_exit_code

    codes = json.loads(meta.read_text())["exit_code_by_key"]
    mapped = json.loads((dst / "mutants" / "mutmut-stats.json").read_text())["tests_by_mangled_function_name"]
    again = {"survived", "no tests", "timeout", "suspicious"} if rerun_survivors else set()
    out: list[str] = []
    for name, code in codes.items():
        if code is None:
            if not (patterns and any(fnmatch.fnmatchcase(name, p) for p in patterns)):
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


def run_module(module: str, work: Path, *, max_children: int, fresh: bool, run: bool = True,
               only: list[str] | None = None, budget: float | None = None,
               rerun_survivors: bool = False) -> dict[str, list[str]]:
    dst = work / module
    if dst.exists() and not fresh and run and (stale := _stale(dst)):
        print(f"{module}: the copy's {', '.join(stale[:3])}{' ...' if len(stale) > 3 else ''} differ(s) from the "
              "worktree: starting over", file=sys.stderr)
        fresh = True
    if (dst.exists() and not fresh and run
            and (dst / "pyproject.toml").read_text() != _config_text(module, TESTS[module])):
        print(f"{module}: the test selection or mutmut settings changed: starting over", file=sys.stderr)
        fresh = True
    if fresh and dst.exists():
        shutil.rmtree(dst)
    if not dst.exists():
        dst.mkdir(parents=True)
        _copy_tree(dst)
        _configure(dst, module, TESTS[module])
    elif run:
        _sync_tests(dst)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(YOLO_OFFLINE="1", YOLO_VERBOSE="False", OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    t0 = time.time()
    names = _select(dst, module, only or [], rerun_survivors)
    if names == []:
        print(f"{module}: nothing left to run", file=sys.stderr)
        run = False
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *(names or [])]
    proc = subprocess.Popen(cmd if run else ["true"], cwd=dst, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
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
        print(f"{module}: stopped after the budget of {budget:.0f} s", file=sys.stderr)
    else:
        if proc.returncode != 0:
            print(out[-3000:], file=sys.stderr)
            raise SystemExit(f"mutmut run failed for {module} (exit {proc.returncode})")
    by_status = _statuses(dst / "mutants" / "det_calib" / f"{module}.py.meta")
    counts = ", ".join(f"{k} {len(v)}" for k, v in sorted(by_status.items()))
    print(f"\n=== {module}: {sum(map(len, by_status.values()))} mutants ({counts}) in {time.time() - t0:.0f} s")
    functions = _mutant_sources(dst / "mutants" / "det_calib" / f"{module}.py")
    for status in ("survived", "no tests", "timeout", "suspicious"):
        for name in by_status.get(status, []):
            fn = name.rsplit(".", 1)[-1]
            orig_name = fn.rsplit("__mutmut_", 1)[0] + "__mutmut_orig"
            orig = functions.get(orig_name, "")
            mutant = functions.get(fn, "").replace(fn + "(", orig_name + "(", 1)  # only real changes differ
            diff = difflib.unified_diff(orig.splitlines(), mutant.splitlines(), lineterm="", n=0)
            body = [ln for ln in diff if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
            print(f"--- [{status}] {name}\n    " + "\n    ".join(body))
    unchecked: dict[str, int] = {}
    for name in by_status.get("not checked", []):
        unchecked[_function_of(name)] = unchecked.get(_function_of(name), 0) + 1
    if unchecked:
        print(f"not checked ({sum(unchecked.values())}): "
              + ", ".join(f"{fn} {n}" for fn, n in sorted(unchecked.items())))
    return by_status


def check_with(module: str, work: Path, tests: list[str]) -> dict[str, list[str]]:
    """Run ``tests`` (pytest node ids) against every survivor of ``module`` in its copy, one
    mutant at a time, outside mutmut (its results are left as they are).

    For tests outside the module's selection (``TESTS``), e.g. a new test of a slow module whose
    selection mutmut would otherwise recollect from scratch. mutmut's mutated package picks the
    active mutant from ``MUTANT_UNDER_TEST``.
    """
    dst = work / module
    mutants = dst / "mutants"
    by_status = _statuses(mutants / "det_calib" / f"{module}.py.meta")
    survivors = [n for st in ("survived", "no tests") for n in by_status.get(st, [])]
    for p in (REPO / "tests").rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts:
            shutil.copy2(p, mutants / p.relative_to(REPO))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(YOLO_OFFLINE="1", YOLO_VERBOSE="False", OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests]
    if subprocess.run(cmd, cwd=mutants, env={**env, "MUTANT_UNDER_TEST": ""}, capture_output=True).returncode:
        raise SystemExit(f"{module}: {tests} fail without a mutant")
    out: dict[str, list[str]] = {"killed": [], "survived": []}
    for name in survivors:
        r = subprocess.run(cmd, cwd=mutants, env={**env, "MUTANT_UNDER_TEST": name}, capture_output=True)
        out["killed" if r.returncode else "survived"].append(name)
        print(f"{'killed  ' if r.returncode else 'survived'} {name}")
    print(f"\n=== {module}: of {len(survivors)} survivors, {len(out['killed'])} killed by {' '.join(tests)}")
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
    ap.add_argument("modules", nargs="*", default=DEFAULT, choices=sorted(TESTS))
    ap.add_argument("--work", type=Path, default=Path("/tmp/det_calib_mutation"))
    ap.add_argument("--max-children", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--fresh", action="store_true", help="delete the module's previous copy and results")
    ap.add_argument("--budget", type=float, metavar="SECONDS",
                    help="stop each module's run after this long (its remaining mutants: `not checked`)")
    ap.add_argument("--only", action="append", metavar="GLOB",
                    help="mutate only the functions matching GLOB (Class.method for a method); repeatable")
    ap.add_argument("--rerun-survivors", action="store_true",
                    help="run the survivors (and the mutants without tests) again, e.g. after adding tests")
    ap.add_argument("--check-with", action="append", metavar="NODEID",
                    help="run these tests (pytest node ids, repeatable) against each survivor, outside mutmut")
    ap.add_argument("--results-only", action="store_true",
                    help="only list the results so far (of a run that was stopped: mutants not yet run show as "
                         "`not checked`)")
    args = ap.parse_args(argv)
    try:
        import mutmut  # noqa: F401
    except ImportError:
        raise SystemExit("mutmut is not installed: pip install mutmut") from None
    if args.check_with:
        for module in args.modules:
            check_with(module, args.work, args.check_with)
        return 0
    summary = {}
    for module in args.modules:
        by_status = run_module(module, args.work, max_children=args.max_children, fresh=args.fresh,
                               run=not args.results_only, only=args.only, budget=args.budget,
                               rerun_survivors=args.rerun_survivors)
        summary[module] = {k: len(v) for k, v in by_status.items()}
    print("\nsurvivors per module:", {m: s.get("survived", 0) for m, s in summary.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
