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

A module's copy is kept under ``--work`` (``/tmp/det_calib_mutation/<module>``): rerunning
reuses mutmut's cache there, and ``cd /tmp/det_calib_mutation/<module> && python3 -m mutmut
show <name>`` shows one mutant. ``--fresh`` starts over. CPU-heavy: the pipeline and fold runs
take tens of minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import shutil
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
    "fold": ["tests/test_fold.py", "tests/test_promises.py::test_fold_into_a_legacy_head"],
    "pipeline": ["tests/test_figures.py", "tests/test_pipeline.py"],
}
DEFAULT = ["matching", "metrics", "thresholds", "calibrators", "fold", "pipeline"]
# statements starting on lines that match these (regex) are not mutated
SKIP_PATTERNS = [r"^\s*raise \w+(Error|Exception)\(", r"^\s*log\.(debug|info|warning)\(", r"^\s*warnings\.warn\("]


def _copy_tree(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for rel in files:
        src = REPO / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def _configure(dst: Path, module: str, tests: list[str]) -> None:
    def toml_list(xs):
        return "[" + ", ".join('"' + x.replace("\\", "\\\\") + '"' for x in xs) + "]"

    text = (dst / "pyproject.toml").read_text()
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
    (dst / "pyproject.toml").write_text(text)


def run_module(module: str, work: Path, *, max_children: int, fresh: bool, run: bool = True) -> dict[str, list[str]]:
    dst = work / module
    if fresh and dst.exists():
        shutil.rmtree(dst)
    if not dst.exists():
        dst.mkdir(parents=True)
        _copy_tree(dst)
        _configure(dst, module, TESTS[module])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(YOLO_OFFLINE="1", YOLO_VERBOSE="False", OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    t0 = time.time()
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)]
    r = subprocess.run(cmd if run else ["true"], cwd=dst, env=env, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"mutmut run failed for {module} (exit {r.returncode})")
    by_status = _statuses(dst / "mutants" / "det_calib" / f"{module}.py.meta")
    counts = ", ".join(f"{k} {len(v)}" for k, v in sorted(by_status.items()))
    print(f"\n=== {module}: {sum(map(len, by_status.values()))} mutants ({counts}) in {time.time() - t0:.0f} s")
    functions = _mutant_sources(dst / "mutants" / "det_calib" / f"{module}.py")
    for status in ("survived", "no tests", "timeout", "suspicious"):
        for name in by_status.get(status, []):
            fn = name.rsplit(".", 1)[-1]
            orig = functions.get(fn.rsplit("__mutmut_", 1)[0] + "__mutmut_orig", "")
            diff = difflib.unified_diff(orig.splitlines(), functions.get(fn, "").splitlines(), lineterm="", n=0)
            body = [ln for ln in diff if ln[:1] in "+-" and not ln.startswith(("+++", "---", "+def ", "-def "))]
            print(f"--- [{status}] {name}\n    " + "\n    ".join(body))
    return by_status


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
    ap.add_argument("--results-only", action="store_true",
                    help="only list the results so far (of a run that was stopped: mutants not yet run show as "
                         "`not checked`)")
    args = ap.parse_args(argv)
    try:
        import mutmut  # noqa: F401
    except ImportError:
        raise SystemExit("mutmut is not installed: pip install mutmut") from None
    summary = {}
    for module in args.modules:
        by_status = run_module(module, args.work, max_children=args.max_children, fresh=args.fresh,
                               run=not args.results_only)
        summary[module] = {k: len(v) for k, v in by_status.items()}
    print("\nsurvivors per module:", {m: s.get("survived", 0) for m, s in summary.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
