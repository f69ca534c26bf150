"""Studies in an RDB storage: SQLite under ``FOXHUNT_HOME`` on one machine, the
deployment's PostgreSQL on Kubernetes. Several processes that open the same study name on
the same URL share its trials (Optuna's RDB storage is the coordination point), which is
how several workers run one study at once."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna
from sqlalchemy.engine import make_url

from models import families

#: MedianPruner: prune a trial whose intermediate value is worse than the median of the
#: earlier trials at the same step, once two trials have finished (so a 5-trial study can
#: prune) and from the first reported step (an epoch or an evaluation is already costly).
PRUNER_STARTUP_TRIALS = 2
SQLITE_BUSY_TIMEOUT_S = 60


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """The RDB storage at ``url``; for SQLite the directory is created and writers wait
    for the lock instead of failing, so concurrent workers on one file both finish."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        db = make_url(url).database
        if db:
            Path(db).parent.mkdir(parents=True, exist_ok=True)
        kwargs = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    for attempt in range(5):  # two workers creating the schema at once: one retries
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except Exception:  # sqlalchemy OperationalError "table already exists" / locked
            if attempt == 4:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def direction_of(family: str) -> str:
    """Forecasters minimise validation pinball loss; agents maximise validation reward."""
    return "minimize" if families.family(family).kind == "forecaster" else "maximize"


def new_study_name(family: str) -> str:
    return f"{family}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"


def open_study(url: str, name: str, family: str, *, seed: int | None = 0,
               attrs: dict[str, Any] | None = None) -> optuna.Study:
    """Create the study or join it if it exists (TPE sampler, median pruner). A joining
    worker must be tuning the same family."""
    study = optuna.create_study(
        storage=open_storage(url), study_name=name, direction=direction_of(family),
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=PRUNER_STARTUP_TRIALS,
                                           n_warmup_steps=0),
        load_if_exists=True,
    )
    have = study.user_attrs.get("family")
    if have is None:
        study.set_user_attr("family", family)
        study.set_user_attr("created_at", datetime.now(UTC).isoformat())
        for k, v in (attrs or {}).items():
            study.set_user_attr(k, v)
    elif have != family:
        raise ValueError(f"study {name!r} in {redact(url)} tunes {have!r}, not {family!r}")
    return study


@dataclass(frozen=True)
class BestParams:
    params: dict[str, Any]
    study: str
    trial: int
    value: float
    storage: str
    created_at: str

    def provenance(self) -> str:
        return (f"study {self.study} trial {self.trial} (value {self.value:.6g}) "
                f"in {self.storage}")


def newest_best(url: str, family: str) -> BestParams | None:
    """The best trial of the newest study of ``family`` that has a finished trial, or
    None (also when the SQLite file does not exist yet: reading never creates it)."""
    if url.startswith("sqlite"):
        db = make_url(url).database
        if not db or not Path(db).is_file():
            return None
    summaries = optuna.get_all_study_summaries(open_storage(url), include_best_trial=True)
    mine = [s for s in summaries
            if s.user_attrs.get("family") == family and s.best_trial is not None]
    if not mine:
        return None
    newest = max(mine, key=lambda s: (s.user_attrs.get("created_at", ""), s._study_id))
    best = newest.best_trial
    return BestParams(params=dict(best.params), study=newest.study_name, trial=best.number,
                      value=float(best.value), storage=redact(url),
                      created_at=newest.user_attrs.get("created_at", ""))


def redact(url: str) -> str:
    """The URL without its password (safe for metadata and logs)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def summary(study: optuna.Study) -> dict[str, Any]:
    states = [t.state for t in study.trials]
    count = {s.name.lower(): sum(1 for x in states if x == s) for s in optuna.trial.TrialState}
    out: dict[str, Any] = {"n_trials": len(states), **{f"n_{k}": v for k, v in count.items()}}
    if count["complete"]:
        out.update(best_value=float(study.best_value), best_params=dict(study.best_params),
                   best_trial=int(study.best_trial.number))
    return out


def save_plots(study: optuna.Study, out_dir: Path) -> dict[str, Path]:
    """Optimisation history, and parameter importances once two trials have completed
    (fANOVA needs a spread of values); PNGs through Optuna's matplotlib backend."""
    # local: pyplot picks a global backend when imported, so only a call that draws loads it,
    # headless (Agg) first
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    out_dir.mkdir(parents=True, exist_ok=True)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    plots: dict[str, Path] = {}
    makers = {"optimization_history": ovm.plot_optimization_history}
    if len(done) >= 2:
        makers["param_importances"] = ovm.plot_param_importances
    for name, make in makers.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                ax = make(study)
            except (ValueError, RuntimeError):  # e.g. every completed trial had one value
                continue
        fig = ax.figure
        fig.set_size_inches(7, 4)
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        plots[name] = path
    return plots
