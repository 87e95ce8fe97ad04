"""Not a test: what ``tests/test_layout.py::test_no_stage_calls_back_into_the_job`` must find (three
callbacks into stages after the job), parsed, never imported."""

import functools

from det_calib.report.run_report import write_report


def finished():
    return None


def job(stage, record):
    write_report(stage, finished=finished)
    write_report(stage, finished=lambda: record)
    write_report(stage, finished=functools.partial(finished))
    write_report(stage, boxes=record)  # data: not a callback
