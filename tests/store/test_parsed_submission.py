"""A job row parses its stored submission once, and its Slurm part without the rest."""

from __future__ import annotations

import dataclasses
from typing import Any

from phalanx.model import JobSubmission, SlurmRequest
from phalanx.store import JobRow
from tests.model.test_slurmrequest import STORED


def _row(submission: dict[str, Any]) -> JobRow:
    return JobRow(
        1, "train", "ml", "u", None, "gpu", "high", None, "PENDING", "", "", None, [], 16,
        submission, None, 0.0, None, None, None, None, False, 0,
    )  # fmt: skip


def test_the_submission_is_parsed_once_per_row() -> None:
    row = _row(STORED)
    sub = row.parsed_submission
    assert isinstance(sub, JobSubmission)
    assert row.parsed_submission is sub
    assert row.slurm_request is sub.slurm
    assert sub.to_dict() == row.submission
    # A changed row is a new record: it parses its own submission.
    renamed = dataclasses.replace(row, submission={**STORED, "name": "other"})
    assert renamed.parsed_submission.name == "other"
    assert row.parsed_submission.name == "train"


def test_the_slurm_part_alone() -> None:
    row = _row(STORED)
    slurm = row.slurm_request
    assert isinstance(slurm, SlurmRequest) and slurm.ntasks_per_node == 4
    assert _row({k: v for k, v in STORED.items() if k != "slurm"}).slurm_request is None


def test_the_cache_is_not_a_column_nor_part_of_equality() -> None:
    assert "_parsed" not in {f.name for f in dataclasses.fields(JobRow)}
    row = _row(STORED)
    other = _row(STORED)
    row.parsed_submission  # noqa: B018
    assert row == other
    assert "_parsed" not in repr(row)
