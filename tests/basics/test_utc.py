"""foxhunt_pipeline.basics.utc.iso_utc, the one ns -> ISO 8601 formatting (issue 26), writes each form as the
code it replaced did: pandas' ``isoformat()`` (ingest messages, model cards), Python's
``str(datetime)`` (a dataset's split metadata) and the ``Z`` form of the test periods."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from foxhunt_pipeline.basics.utc import UTC_OFFSET, iso_utc

STAMPS = [0, -1, 1, 1_000, 1_704_236_400 * 10**9, 1_704_236_400_500_000_000,
          1_704_236_400_123_456_789, 1_704_236_400_123_456_000, 2**63 - 1]


@pytest.mark.parametrize("ns", STAMPS)
def test_the_offset_form_is_pandas_isoformat(ns: int) -> None:
    assert iso_utc(ns, zone=UTC_OFFSET) == pd.Timestamp(ns, unit="ns", tz="UTC").isoformat()


@pytest.mark.parametrize("ns", [s for s in STAMPS if s % 1_000 == 0 and s < 2**62])
def test_the_spaced_form_is_str_of_a_datetime(ns: int) -> None:
    as_datetime = datetime(1970, 1, 1, tzinfo=UTC) + pd.Timedelta(ns, "ns").to_pytimedelta()
    assert iso_utc(ns, sep=" ", zone=UTC_OFFSET) == str(as_datetime)


def test_the_default_is_the_z_form_to_the_second() -> None:
    assert iso_utc(86_400 * 10**9) == "1970-01-02T00:00:00Z"
    assert iso_utc(np.int64(1_704_236_400 * 10**9)) == "2024-01-02T23:00:00Z"
