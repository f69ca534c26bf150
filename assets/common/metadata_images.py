"""Images inside asset metadata: Dagster shows a markdown value's ``data:`` PNG inline, so a
plot reads on the asset page instead of being a path to a file on some machine."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

MAX_INLINE_BYTES = 400_000  # the event log stores metadata; a bigger image stays a link


def image_md(path: Path, alt: str, caption: str = "") -> dg.MetadataValue:
    """The PNG at ``path`` inline (base64), with an optional caption line below."""
    data = Path(path).read_bytes()
    if len(data) > MAX_INLINE_BYTES:
        return dg.MetadataValue.md(f"_{alt}: {len(data) // 1000} kB, see `{path}`_")
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return dg.MetadataValue.md(f"![{alt}]({uri})" + (f"\n\n{caption}" if caption else ""))


def pngs_md(plots: Mapping[str, Path]) -> str:
    """Several PNGs inline, each under its name in bold (no size limit: evaluation and
    tuning plots are small)."""
    parts = []
    for name, path in plots.items():
        data = base64.b64encode(Path(path).read_bytes()).decode()
        parts.append(f"**{name}**\n\n![{name}](data:image/png;base64,{data})")
    return "\n\n".join(parts)
