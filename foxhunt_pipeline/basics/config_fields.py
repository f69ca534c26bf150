"""Reading a config dataclass back from a dict: an unknown key is an error, never ignored.

A saved config with a key the code no longer knows (a renamed or dropped field) would
otherwise load silently with that setting lost; every ``from_dict`` checks through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any


def check_known_fields(cls: type, d: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming every key of ``d`` that is not a field of dataclass ``cls``."""
    unknown = sorted(set(d) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"{cls.__name__}.from_dict: unknown field(s) {unknown}")
