"""Training progress in words for the run's log lines (how far, how long left)."""

from __future__ import annotations


def progress_note(done: float, total: float, elapsed_s: float) -> str:
    """``, 40% done, ~1m30s left`` (at most the whole budget: early stopping can end sooner)."""
    if total <= 0 or done <= 0:
        return ""
    left = elapsed_s * max(total - done, 0) / done
    return f", {min(done / total, 1.0):.0%} done, ~{_duration(left)} left"


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")
