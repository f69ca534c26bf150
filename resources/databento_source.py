"""Databento Historical download into the landing zone; the key comes only from the environment."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import dagster as dg
import databento as db

from foxhunt_pipeline.basics.atomic import atomic_write


class MissingApiKeyError(RuntimeError):
    pass


def landed_name(dataset: str, schema: str, start: str, end: str) -> str:
    """The landed file name of one downloaded range (the partition key it will get)."""
    return (f"{dataset.lower().replace('.', '-')}-{start[:10].replace('-', '')}-"
            f"{end[:10].replace('-', '')}.{schema}.dbn.zst")


def download_to_landing(
    landing: Path,
    *,
    dataset: str,
    symbols: list[str],
    schema: str,
    start: str,
    end: str,
    stype_in: str = "parent",
    api_key_env: str = "DATABENTO_API_KEY",
) -> Path:
    """Downloads one range as a single zstd DBN file. The key is read from ``api_key_env``
    and never printed; a missing key is a clear error before any network call."""
    key = os.environ.get(api_key_env, "").strip()
    if not key:
        raise MissingApiKeyError(
            f"{api_key_env} is not set: export your Databento API key in that variable "
            "(it is read from the environment only and never logged)"
        )
    date.fromisoformat(start[:10])
    date.fromisoformat(end[:10])

    landing.mkdir(parents=True, exist_ok=True)
    name = landed_name(dataset, schema, start, end)
    dest = landing / name
    if dest.exists():
        raise FileExistsError(f"{dest} already landed; landed files are never overwritten")
    client = db.Historical(key)
    return atomic_write(dest, lambda tmp: client.timeseries.get_range(
        dataset=dataset, symbols=symbols, schema=schema, start=start, end=end, stype_in=stype_in,
        path=tmp), overwrite=False)


class DatabentoSource(dg.ConfigurableResource):
    dataset: str = "GLBX.MDP3"
    api_key_env: str = "DATABENTO_API_KEY"

    def download(self, landing: Path, symbols: list[str], schema: str, start: str, end: str) -> Path:
        return download_to_landing(
            landing, dataset=self.dataset, symbols=symbols, schema=schema, start=start, end=end,
            api_key_env=self.api_key_env,
        )
