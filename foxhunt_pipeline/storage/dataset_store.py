"""The training dataset on the warehouse root, local or on object storage.

Two layouts, one reader (``local_dir`` / ``load``):

* arrays (``save``, the layout of before issue 25 and of ``TrainingData.save``): ``meta.json``
  and one matrix per split. Locally ``<warehouse>/training_dataset/`` (swapped in
  atomically); on a store each save is a new version under
  ``training_dataset/versions/<id>/`` named by ``training_dataset/current.json``.
* blocks (``features.dataset_dates``): one immutable block per trade date under
  ``training_dataset/blocks/<name>/`` holding that date's raw features files (hard links
  locally, so a rebuilt features date never changes a block) and ``summary.npz`` (its row
  index and running sums). ``meta.json`` (locally in place of the arrays' one; on a store a
  new version) names them in its ``layout`` with the split, embargo and normalisation to
  apply. A new trade date adds one block and a new ``meta.json``, nothing else.

A reader gets a local directory of the arrays layout either way: a blocks dataset is
materialised (split, embargo, normalisation applied) once per version into the cache and
memory-mapped from there, so every reader sees the arrays it always did.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tempfile
import uuid
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import filelock
import numpy as np
import polars as pl
from upath import UPath

from foxhunt_pipeline.basics.atomic import atomic_replace_dir, atomic_write, temp_sibling
from foxhunt_pipeline.storage import artifact_sync as sync
from foxhunt_pipeline.storage import object_store
from models.windows import LAYOUT, SPLITS, SplitArrays, TrainingData, valid_window_starts

DATASET_DIR = "training_dataset"
BLOCKS = "blocks"
META = "meta.json"
SUMMARY = "summary.npz"
SOURCE_KEY = "_source"  # in a features summary: the source_stamp of the file it summarises
MATERIALIZED = "materialized"
KEEP_MATERIALIZED = 2  # versions kept in a cache: the current one and the one a reader may still map
CHUNK_ROWS = 50_000


def save(data: TrainingData, root: UPath, scratch: Path) -> str:
    """Store ``data`` as the current dataset (arrays layout); returns where it lives."""
    local = sync.local_path(root)
    if local is not None:
        return str(data.save(local / DATASET_DIR))
    Path(scratch).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="dataset-", dir=scratch))
    try:
        data.save(tmp / DATASET_DIR)
        return str(sync.publish_version(tmp / DATASET_DIR, root, DATASET_DIR))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def local_dir(root: UPath, cache: Path) -> Path:
    """A local directory holding the current dataset in the arrays layout (FileNotFoundError
    when there is none); a blocks dataset is materialised into ``cache`` first."""
    meta = current_meta(root)
    if meta is None:
        raise FileNotFoundError(f"{_base(root)} has no training dataset")
    if LAYOUT in meta:
        return materialize(root, meta, Path(cache) / DATASET_DIR / MATERIALIZED)
    local = sync.local_path(root)
    if local is None:
        return sync.fetch_current_version(root, DATASET_DIR, Path(cache))
    return local / DATASET_DIR


def load(root: UPath, cache: Path, mmap: bool = True) -> TrainingData:
    return TrainingData.load(local_dir(root, cache), mmap=mmap)


# --- blocks ---------------------------------------------------------------------------


def _base(root: UPath) -> UPath:
    return root / DATASET_DIR


def block_dir(root: UPath, name: str) -> UPath:
    return _base(root) / BLOCKS / name


def block_names(root: UPath) -> set[str]:
    base = _base(root) / BLOCKS
    return {p.name for p in base.iterdir() if not p.name.startswith(".")} if base.is_dir() else set()


def source_stamp(paths: Sequence[UPath]) -> str:
    """What identifies these files' contents without reading them: name, size and
    modification time (a features date rewritten is a new file, so a new stamp)."""
    parts = []
    for p in paths:
        local = sync.local_path(p)
        if local is not None:
            st = local.stat()
            parts.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}")
        else:
            info = p.fs.info(p.path)
            parts.append(f"{p.name}:{info.get('size')}:{info.get('ETag') or info.get('mtime') or info.get('LastModified')}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def add_block(root: UPath, name: str, sources: Sequence[UPath], summary: Mapping[str, np.ndarray]) -> None:
    """Store block ``name``: ``sources`` as ``features-<i>.parquet`` (hard links on a local
    root, so a later rewrite of a source never changes the block; copies on a store) and
    ``summary``. All or nothing; a block that already exists is kept."""
    buffer = io.BytesIO()
    np.savez(buffer, **summary)
    dest = block_dir(root, name)
    local = sync.local_path(dest)
    if local is not None:
        def build(tmp: Path) -> None:
            for i, src in enumerate(sources):
                try:
                    os.link(src.path, tmp / f"features-{i}.parquet")
                except OSError:  # another file system: a copy is as good, only slower
                    shutil.copyfile(src.path, tmp / f"features-{i}.parquet")
            (tmp / SUMMARY).write_bytes(buffer.getvalue())

        local.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            atomic_replace_dir(local, build, overwrite=False)
        return
    for i, src in enumerate(sources):
        src.fs.copy(src.path, (dest / f"features-{i}.parquet").path)
    (dest / SUMMARY).write_bytes(buffer.getvalue())  # last: a block without it is incomplete


def features_summary_path(features: UPath) -> UPath:
    """Where the features writer keeps a features file's summary: beside it (``data.parquet``
    -> ``data.summary.npz``; readers of the table glob ``*.parquet`` only)."""
    return features.with_name(f"{features.name.removesuffix('.parquet')}.{SUMMARY}")


def store_features_summary(features: UPath, summary: Mapping[str, np.ndarray]) -> None:
    """Keep ``summary`` (``features.dataset_dates.summarise_features`` of the file's rows)
    beside the features file just written, stamped with the file's ``source_stamp``: the
    dataset step uses it instead of reading the file back, for as long as the file is the
    one it was computed from."""
    buffer = io.BytesIO()
    np.savez(buffer, **summary, **{SOURCE_KEY: np.asarray(source_stamp([features]))})
    dest = features_summary_path(features)
    local = sync.local_path(dest)
    if local is None:
        dest.write_bytes(buffer.getvalue())
        return
    # renamed into place but not fsynced (two fsyncs a date were a tenth of the features
    # step): one lost or torn in a power cut fails its load or its stamp, and the dataset
    # step reads the features file instead
    tmp = temp_sibling(local)
    try:
        tmp.write_bytes(buffer.getvalue())
        os.replace(tmp, local)
    finally:
        tmp.unlink(missing_ok=True)


def features_summary(features: UPath) -> dict[str, np.ndarray] | None:
    """The writer's summary of this features file, or None where there is none (a home
    written before the writer kept them) or it was computed from another version of it."""
    path = features_summary_path(features)
    try:
        local = sync.local_path(path)
        raw = local.read_bytes() if local is not None else path.read_bytes()
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        return None
    stamp = out.pop(SOURCE_KEY, None)
    if stamp is None or str(stamp) != source_stamp([features]):
        return None
    return out


def has_block(root: UPath, name: str) -> bool:
    return (block_dir(root, name) / SUMMARY).is_file()


def read_summary(root: UPath, name: str) -> dict[str, np.ndarray]:
    local = sync.local_path(block_dir(root, name) / SUMMARY)
    raw = local.read_bytes() if local is not None else (block_dir(root, name) / SUMMARY).read_bytes()
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def block_features(root: UPath, name: str, columns: list[str] | None = None) -> pl.DataFrame | None:
    """The block's features rows in canonical order (``canonical``), or None if it has none."""
    files = sorted((p for p in block_dir(root, name).iterdir() if p.name.startswith("features-")),
                   key=lambda p: int(p.name.split("-")[1].split(".")[0]))
    if not files:
        return None
    frames = [object_store.read_parquet(p, columns=columns) for p in files]
    return canonical(pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0])


def canonical(frame: pl.DataFrame) -> pl.DataFrame:
    """A date's features rows by root, then time: the order a block's row numbers refer to
    (one file per date is written so already; older per-root files are concatenated)."""
    keys = frame.select("root", "ts_event")
    ordered = keys.select(((pl.col("root") > pl.col("root").shift(1))
                           | ((pl.col("root") == pl.col("root").shift(1))
                              & (pl.col("ts_event") > pl.col("ts_event").shift(1)))).fill_null(True).all()).item()
    return frame if ordered else frame.sort("root", "ts_event", maintain_order=True)


# --- publishing -----------------------------------------------------------------------


@contextlib.contextmanager
def updating(root: UPath) -> Iterator[None]:
    """One dataset update at a time on a local root (a second waits): an update adds blocks
    and removes the ones no dataset uses any more, so two at once could remove each other's."""
    local = sync.local_path(root)
    if local is None:
        yield
        return
    (local / "_state").mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(local / "_state" / f"{DATASET_DIR}.lock")):
        yield


def current_meta(root: UPath) -> dict[str, Any] | None:
    """The stored ``meta.json`` of the current dataset (either layout), or None."""
    local = sync.local_path(root)
    if local is not None:
        path = local / DATASET_DIR / META
        return json.loads(path.read_text()) if path.is_file() else None
    pointer = _base(root) / "current.json"
    if not pointer.is_file():
        return None
    meta = _base(root) / "versions" / sync.read_json(pointer)["version"] / META
    return json.loads(meta.read_text()) if meta.is_file() else None


def _blocks_of(meta: Mapping[str, Any] | None) -> set[str]:
    return set(((meta or {}).get(LAYOUT) or {}).get("blocks", []))


def publish(root: UPath, meta: Mapping[str, Any]) -> str:
    """Make ``meta`` (with its layout over stored blocks) the current dataset, atomically;
    then remove the blocks neither it nor the dataset it replaces uses, and the arrays of a
    dataset two versions back (a reader of the previous one may still be opening them).
    Returns where it lives."""
    previous = current_meta(root)
    text = json.dumps(meta)
    local = sync.local_path(root)
    if local is None:
        version = uuid.uuid4().hex
        where: UPath | Path = _base(root) / "versions" / version
        (where / META).write_text(text)
        sync.write_json(_base(root) / "current.json", {"version": version, "url": str(where)})
    else:
        where = local / DATASET_DIR
        where.mkdir(parents=True, exist_ok=True)
        atomic_write(where / META, lambda tmp: tmp.write_text(text))
    keep = _blocks_of(meta) | _blocks_of(previous)
    for name in block_names(root) - keep:
        path = block_dir(root, name)
        if sync.local_path(path) is not None:
            shutil.rmtree(sync.local_path(path), ignore_errors=True)
        else:
            path.fs.rm(path.path, recursive=True)
    if local is not None and previous is not None and LAYOUT in previous:
        for split in SPLITS:  # arrays saved before the blocks took over, now two versions back
            shutil.rmtree(local / DATASET_DIR / split, ignore_errors=True)
    return str(where)


# --- reading: split, embargo and normalisation applied --------------------------------


def version_of(meta: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:20]


def materialize(root: UPath, meta: Mapping[str, Any], cache: Path) -> Path:
    """The arrays layout of a blocks dataset, built once per version in ``cache`` (each
    block's features read once, observed features normalised as the arrays builder does:
    float64, clipped, float32) and reused by every later reader of that version."""
    dest = Path(cache) / version_of(meta)
    if (dest / META).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(dest.parent / ".lock")):
        if not (dest / META).is_file():
            atomic_replace_dir(dest, lambda tmp: _write_arrays(root, meta, tmp), overwrite=False)
        old = sorted((p for p in dest.parent.iterdir() if p.is_dir() and not p.name.startswith(".")
                      and p != dest), key=lambda p: p.stat().st_mtime)
        for p in old[:max(len(old) - (KEEP_MATERIALIZED - 1), 0)]:
            shutil.rmtree(p, ignore_errors=True)  # a reader mapping it keeps its open files
    return dest


def _write_arrays(root: UPath, meta: Mapping[str, Any], out: Path) -> None:
    layout = meta[LAYOUT]
    plain = {k: v for k, v in meta.items() if k != LAYOUT}
    cols = {k: list(meta[f"{k}_names"]) for k in ("observed", "known", "static", "target")}
    norm = meta["normalization"]
    mean, std = np.asarray(norm["mean"], np.float64), np.asarray(norm["std"], np.float64)
    clip = norm.get("clip_sigma")
    wide = {"observed": "observed", "known": "known", "static": "static", "targets": "target"}
    arrays: dict[str, dict[str, np.ndarray]] = {}
    todo: dict[int, list[tuple[str, int, Sequence[int]]]] = {}
    for name in SPLITS:
        split = layout["splits"][name]
        n = int(split["rows"])
        (out / name).mkdir(parents=True)
        a: dict[str, np.ndarray] = {
            k: np.lib.format.open_memmap(out / name / f"{k}.npy", mode="w+", dtype=np.float32,
                                         shape=(n, len(cols[c])))
            for k, c in wide.items()}
        a.update(ts_event=np.empty(n, np.int64), segment=np.empty(n, np.int32),
                 root_index=np.empty(n, np.int16))
        arrays[name] = a
        at = 0
        for piece in split["pieces"]:
            todo.setdefault(int(piece[0]), []).append((name, at, piece))
            at += int(piece[2]) - int(piece[1])
        if at != n:
            raise ValueError(f"{META}: split {name!r} has {n} rows but its pieces hold {at}")
    wanted = ["root", "ts_event", *cols["observed"], *cols["known"], *cols["static"], *cols["target"]]
    for index, pieces in sorted(todo.items()):
        frame = block_features(root, layout["blocks"][index], wanted)
        if frame is None:
            raise FileNotFoundError(f"block {layout['blocks'][index]} has no features")
        for name, at, (_, lo, hi, root_index, segment) in pieces:
            a = arrays[name]
            for start in range(lo, hi, CHUNK_ROWS):
                part = frame.slice(start, min(CHUNK_ROWS, hi - start))
                rows = slice(at + start - lo, at + start - lo + part.height)
                x = (part.select(cols["observed"]).to_numpy().astype(np.float64, copy=False) - mean) / std
                a["observed"][rows] = x if clip is None else np.clip(x, -clip, clip)
                for k in ("known", "static", "targets"):
                    if cols[wide[k]]:
                        a[k][rows] = part.select(pl.col(cols[wide[k]]).cast(pl.Float32)).to_numpy()
                a["ts_event"][rows] = part.get_column("ts_event").dt.epoch("ns").to_numpy()
                a["segment"][rows] = segment
                a["root_index"][rows] = root_index
    lookback, horizon = int(meta["lookback"]), int(meta["horizon"])
    for name, a in arrays.items():
        for k in wide:
            a[k].flush()
        a["window_starts"] = valid_window_starts(a["segment"], a["targets"], lookback, horizon)
        for k in ("ts_event", "segment", "root_index", "window_starts"):
            np.save(out / name / f"{k}.npy", a[k], allow_pickle=False)
        for k in wide:
            del a[k]
    (out / META).write_text(json.dumps(plain, indent=2))


def shape_only(rows: int, widths: Mapping[str, int], ts_event: np.ndarray, segment: np.ndarray,
               root_index: np.ndarray, window_starts: np.ndarray) -> SplitArrays:
    """A split's narrow arrays with its wide ones as zero-copy stand-ins of the right shape
    (what the asset's metadata and warnings read; nothing reads their values)."""
    zero = np.float32(0)
    return SplitArrays(
        observed=np.broadcast_to(zero, (rows, widths["observed"])),
        known=np.broadcast_to(zero, (rows, widths["known"])),
        static=np.broadcast_to(zero, (rows, widths["static"])),
        targets=np.broadcast_to(zero, (rows, widths["targets"])),
        ts_event=ts_event, segment=segment, root_index=root_index, window_starts=window_starts)


__all__ = ["DATASET_DIR", "add_block", "block_dir", "block_features", "block_names", "canonical", "current_meta",
           "features_summary", "features_summary_path", "has_block", "load", "local_dir", "materialize", "publish", "read_summary", "save", "shape_only",
           "source_stamp", "store_features_summary", "updating", "version_of"]
