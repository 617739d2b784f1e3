"""Job ids in query parameters: only plain decimal ids are ids, anything else is one
clear error (never a 500 from ``int()``)."""

from __future__ import annotations

import pytest

from phalanx.api.deps import job_ids
from phalanx.api.jobs import _ids
from phalanx.errors import Invalid

BAD = ["¹", "٣", "1²", "9" * 5000, "9223372036854775808", "-1", "1.5", "0x10", "1e3"]


@pytest.mark.parametrize("text", BAD)
def test_what_is_not_a_job_id_is_a_clear_error(text: str) -> None:
    for parse in (job_ids, _ids):
        with pytest.raises(Invalid, match=r"^id \(query\): .* is not a job id$"):
            parse([text])


def test_job_ids_are_decimal_and_comma_separated() -> None:
    assert job_ids(["1,2", " 3 ", ""]) == [1, 2, 3]
    assert job_ids([]) is None
    assert _ids(["1,2", "9223372036854775807"]) == [1, 2, 2**63 - 1]
