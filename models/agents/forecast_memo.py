"""The forecasts of the same weights on the same rows, kept for the rest of the process.

Why: an agent's state is its forecasters' quantiles over a whole split, and within one run
the same fold's forecasters meet the same fold's rows again and again: the DQN and the PPO
walk-forwards each retrain their agents on the same folds, and each agent asset observes the
same production forecasters. Computing those forecasts was about a third of an agent
evaluation. Inference is deterministic (eval mode, no autograd), so a hit is exactly what the
forward pass would give. The key hashes everything the result depends on: the model's class,
config and every weight, the rows' inputs and segments, the window sizes, the batch size and
the device; a model whose weights cannot be hashed (quantized packed params) is not kept.

Within ``on_disk(directory)`` the forecasts are also kept as ``<key>.npy`` files there, so
separate processes share them: a forecaster's walk-forward forecasts every test row of each
fold (``models.evaluation.family_candidates``), and the ensemble's walk-forward and the
agents' (whose state is those forecasts) read them instead of running the same fold models
on the same rows again; each agent asset observes the same production forecasters (issue 41:
that state was most of an agent evaluation). A file is written atomically and only
ever read by its content hash, so a reader never sees a partial or stale entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import nn

from foxhunt_pipeline.basics.atomic import atomic_write
from models.windows import SplitArrays, hash_array

#: entries kept per process (one is ``[rows, H * Q]`` float32: ~3.5 MB for 20k rows)
MAX_ENTRIES = 32
#: and at most this many bytes in all (a fold's year-long test period is ~20 MB an entry;
#: within ``on_disk`` an entry dropped here is read back from its file); the newest entry is
#: always kept
MAX_BYTES = 64 * 2**20

#: a file not used for this long is dropped when another is written (the cache serves the
#: evaluations of one dataset version, not history)
KEEP_DAYS = 14.0

_kept: OrderedDict[bytes, np.ndarray] = OrderedDict()
_directory: Path | None = None


@contextmanager
def on_disk(directory: str | os.PathLike[str]) -> Iterator[Path]:
    """Keep (and look up) forecasts under ``directory`` too while the block runs."""
    global _directory
    before, _directory = _directory, Path(directory)
    _directory.mkdir(parents=True, exist_ok=True)
    try:
        yield _directory
    finally:
        _directory = before


def forecast_key(model: nn.Module, part: SplitArrays, lookback: int, horizon: int,
                 batch_size: int) -> bytes | None:
    """The hash of what ``forecasts(model, part, ...)`` depends on, or None if a weight is
    not a plain tensor."""
    h = hashlib.blake2b(digest_size=20)
    config = getattr(model, "config", None)
    described = config.to_dict() if hasattr(config, "to_dict") else repr(config)
    device = next(model.parameters()).device
    h.update(json.dumps([type(model).__module__, type(model).__qualname__, described, lookback,
                         horizon, batch_size, str(device), torch.__version__],
                        default=str).encode())
    try:
        for name, tensor in model.state_dict().items():
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy())
    except (AttributeError, RuntimeError, TypeError):
        return None
    for array in (part.static, part.observed, part.known, part.segment):
        h.update(str((np.dtype(array.dtype), tuple(array.shape))).encode())
        hash_array(h, array)
    return h.digest()


def memoized(key: bytes | None, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """The forecasts kept under ``key``, else ``compute()``'s, kept for the next caller."""
    kept = recall(key)
    if kept is not None:
        return kept
    out = compute()
    keep(key, out)
    return out


def recall(key: bytes | None) -> np.ndarray | None:
    """A copy of the forecasts kept under ``key`` (the caller may write into it)."""
    if key is None:
        return None
    if key not in _kept:
        found = _read(key)
        if found is None:
            return None
        _remember(key, found)
    _kept.move_to_end(key)
    return _kept[key].copy()


def keep(key: bytes | None, forecasts: np.ndarray) -> None:
    if key is None:
        return
    _remember(key, forecasts.copy())
    _write(key, forecasts)


def _remember(key: bytes, forecasts: np.ndarray) -> None:
    _kept[key] = forecasts
    _kept.move_to_end(key)
    while len(_kept) > 1 and (len(_kept) > MAX_ENTRIES
                              or sum(v.nbytes for v in _kept.values()) > MAX_BYTES):
        _kept.popitem(last=False)


def _file(key: bytes) -> Path | None:
    return None if _directory is None else _directory / f"{key.hex()}.npy"


def _read(key: bytes) -> np.ndarray | None:
    path = _file(key)
    if path is None or not path.is_file():
        return None
    try:
        found = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):  # unreadable: dropped, computed again, rewritten
        path.unlink(missing_ok=True)
        return None
    os.utime(path)  # used: not pruned
    return found


def _write(key: bytes, forecasts: np.ndarray) -> None:
    path = _file(key)
    if path is None or path.is_file():
        return
    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a handle: np.save would append ".npy" to a temp name
            np.save(f, forecasts, allow_pickle=False)

    atomic_write(path, save)
    _prune(path.parent)


def _prune(directory: Path) -> None:
    cutoff = time.time() - KEEP_DAYS * 86_400
    for entry in directory.glob("*.npy"):
        try:
            if entry.stat().st_mtime < cutoff:
                entry.unlink()
        except FileNotFoundError:  # another process pruned it first
            pass


def forget() -> None:
    """Drop every forecast kept in memory (tests; or to bound memory in a long-lived
    process); files on disk stay."""
    _kept.clear()
