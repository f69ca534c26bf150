"""Evaluation assets: every model and baseline under one walk-forward protocol (the same
folds, bars and costs; ``models.evaluation.walk_forward``); one row per fold plus a pooled
row per candidate in DuckDB ``model_evaluations``, pooled metrics in the model's MLflow run
and the asset's metadata. The production model's own test split gives the plots and the
running cost."""

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import torch

from assets.agents import AGENT_CONFIGS, agent_config
from assets.common import EAGER_AFTER_CHECKS, OWNERS, code_version_of, report_warnings
from assets.common.config_fields import delegated, sized
from assets.common.metadata_images import pngs_md
from assets.training import load_current_model, load_dataset, logged_train_config
from foxhunt_pipeline.basics.utc import iso_utc
from foxhunt_pipeline.features.coverage import fold_warnings
from foxhunt_pipeline.features.grid import trade_dates
from models import families
from models.agents import forecast_memo
from models.agents.policy import load_policy
from models.agents.saved_config import saved_agent_config
from models.agents.trading_env import EnvConfig, evaluate_positions
from models.ensemble.weights import sole_member
from models.evaluation.candidates import climatology_candidate, trading_baselines
from models.evaluation.family_candidates import production_candidate
from models.evaluation.row_pool import WalkForwardError, row_pool
from models.evaluation.walk_forward import WalkForwardConfig, protocol_id_for, walk_forward
from models.training.checkpoint import read_checkpoint_meta
from models.windows import recent_rows
from resources.mlflow_tracking import MLflowResource, TrackedRun
from resources.storage import BARS_TABLE, EVALUATIONS_TABLE, FoxhuntStorage
from resources.torch_device import TorchDevice

#: Float columns of model_evaluations (NULL where undefined); the full set is in metrics_json.
SUMMARY_METRICS = (
    "n_bars", "sharpe", "sharpe_ci_low", "sharpe_ci_high", "ci_level", "annual_log_return",
    "max_drawdown", "n_trades", "turnover", "turnover_per_year", "hit_rate", "exposure", "ic",
    "rank_ic", "icir", "ic_ci_low", "ic_ci_high", "win_rate_trades", "directional_accuracy",
    "directional_accuracy_ci_low", "directional_accuracy_ci_high", "q_risk_p50", "q_risk_p90",
    "coverage_80", "pinball_mean", "latency_ms_p50", "latency_ms_p95", "latency_ms_p99",
    "throughput_b32_per_s", "throughput_b256_per_s", "peak_memory_mb", "n_parameters",
    "checkpoint_mb",
)
#: String columns, in table order after the identity columns. ``equals``: the baseline a model
#: repeats on every test bar (pooled row; "baseline:climatology" for an ensemble whose weights
#: are all on the climatology), NULL when it is a model of its own.
TEXT_COLUMNS = ("protocol_id", "fold", "test_start", "test_end", "sharpe_by_root", "equals")


class EvaluationConfig(dg.Config):
    cost_multiplier: float = 1.0
    threshold_k: float = 1.0
    latency_calls: int = sized("evaluation", "latency_calls", 200, "Timed calls per model.")
    bootstrap: int = sized("evaluation", "bootstrap", 1000, "Bootstrap resamples per interval.")
    seed: int = 0
    folds: int = sized("walk_forward", "folds", 4, "Walk-forward folds (rolling origins).")
    test_days: int = sized("walk_forward", "test_days", 5, "Trade dates per test fold.")
    window: str = "expanding"  # or "sliding" (then train_days trade dates of train)
    train_days: int = 0
    validation_days: int = sized("walk_forward", "validation_days", 2,
                                 "Trade dates before the embargo kept for early stopping.")
    test_fraction: float = delegated(WalkForwardConfig, "test_fraction", "Share of the trade "
                                     "dates tested when more than folds x test_days (the "
                                     "evidence grows with the history, the retrainings do "
                                     "not).", section="walk_forward")
    max_test_days: int = delegated(WalkForwardConfig, "max_test_days", "Cap on all folds' "
                                   "test dates together.", section="walk_forward")
    report_rows: int = sized("evaluation", "report_rows", 0, "Most recent test-split rows "
                             "(all roots) the production model's own report scores (plots, "
                             "running cost, model card); the skill claim is the walk-forward. "
                             "0: the whole split.")


def walk_forward_config(config: EvaluationConfig) -> WalkForwardConfig:
    """The library's walk-forward protocol for the asset's Config."""
    return WalkForwardConfig(folds=config.folds, test_days=config.test_days,
                             window=config.window, train_days=config.train_days or None,
                             validation_days=config.validation_days,
                             test_fraction=config.test_fraction,
                             max_test_days=config.max_test_days)


def evaluation_rows(family: str, version: str, precision: str, result, context_run_id: str,
                    evaluated_at: datetime, extra: dict | None = None,
                    equals: str | None = None) -> pl.DataFrame:
    """Per candidate of a ``WalkForwardResult``: one row per fold and a ``pooled`` row, all
    with the protocol id; ``extra`` (running cost) goes to the model's pooled row, and
    ``equals`` (what the model is by construction, e.g. an ensemble weighted all on the
    climatology) unless the walk-forward found it repeats a baseline. Undefined metrics are
    NULL."""
    rows = []
    for name, cand in result.candidates.items():
        baseline = name.startswith("baseline:")
        ident = {"model": name, "family": "baseline" if baseline else family,
                 "evaluated_for": family, "version": "" if baseline else version,
                 "precision": precision, "evaluated_at": evaluated_at,
                 "dagster_run_id": context_run_id, "protocol_id": result.protocol_id}
        parts = [(str(f.fold.number), f.metrics, f.test_start_ns, f.test_end_ns) for f in cand.folds]
        parts.append(("pooled", {**cand.pooled, **({} if baseline else extra or {})},
                      min(f.test_start_ns for f in cand.folds), max(f.test_end_ns for f in cand.folds)))
        for fold, metrics, lo, hi in parts:
            roots = {k.removeprefix("sharpe_"): _float_or_none(v) for k, v in metrics.items()
                     if k.startswith("sharpe_") and k.removeprefix("sharpe_").isupper()}
            same = None if baseline or fold != "pooled" else (cand.equals or equals)
            row = {**ident, "fold": fold, "test_start": iso_utc(lo), "test_end": iso_utc(hi),
                   "sharpe_by_root": json.dumps(roots, sort_keys=True), "equals": same}
            row.update({k: _float_or_none(metrics.get(k)) for k in SUMMARY_METRICS})
            row["metrics_json"] = json.dumps({k: _float_or_none(v) for k, v in metrics.items()})
            rows.append(row)
    schema = {k: pl.Float64 for k in SUMMARY_METRICS} | {k: pl.String for k in TEXT_COLUMNS}
    return pl.DataFrame(rows, schema_overrides=schema | {"evaluated_at": pl.Datetime("us", "UTC")})


def composition_equals(family: str, checkpoint: Path) -> str | None:
    """What a model is by construction: a combination (the ensemble) with all its weight on
    one member is that member ("baseline:climatology", "foxhunt-mamba2")."""
    if not families.family(family).combines:
        return None
    meta = read_checkpoint_meta(checkpoint)
    member = sole_member(meta.get("extra", meta).get("weights") or {})
    if member is None:
        return None
    return ("baseline:climatology" if member == "climatology"
            else families.family(member).registered_name)



def _float_or_none(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f and abs(f) != float("inf") else None


def _meta_float(v) -> dg.MetadataValue:
    """A metric for asset metadata: the number, or "-" when it is undefined (never 0)."""
    f = _float_or_none(v)
    return dg.MetadataValue.float(f) if f is not None else dg.MetadataValue.text("-")


def baseline_candidates() -> list:
    """The naive baselines every model is scored beside and must beat: flat, buy-and-hold,
    momentum and the climatology (LightGBM is a family of its own)."""
    return [*trading_baselines((1,)), climatology_candidate()]


def _param_value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return {"True": True, "False": False, "None": None}.get(text, text)


def training_params(mlflow: MLflowResource, run_id: str, prefix: str) -> dict:
    """The ``prefix.*`` parameters the training asset logged (its effective config), nested."""
    params = mlflow.client().get_run(run_id).data.params
    out: dict = {}
    for key, text in params.items():
        if not key.startswith(prefix + "."):
            continue
        *path, leaf = key.removeprefix(prefix + ".").split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = _param_value(text)
    return out


def saved_train_config(checkpoint: Path) -> dict | None:
    """The ``TrainConfig`` a forecaster checkpoint carries (single-process training saves it
    since commit c3b1458), or ``None`` for a checkpoint without one (older, or from DDP)."""
    return read_checkpoint_meta(checkpoint).get("train_config")


def production_settings(family: str, storage: FoxhuntStorage, mlflow: MLflowResource,
                        run_id: str, checkpoint: Path, device: str):
    """What the family's walk-forward retrains per fold with that its checkpoint may not
    carry (``models.evaluation.family_candidates``): a forecaster's ``TrainConfig`` (logged to
    MLflow by older trainings), an agent's config, the ensemble's current members."""
    fam = families.family(family)
    if fam.combines:
        return ensemble_members(storage, mlflow, checkpoint)
    if fam.kind == "agent":
        return _agent_settings(family, mlflow, run_id, checkpoint, device)
    if fam.logged_params and saved_train_config(checkpoint) is None:
        return logged_train_config(family, training_params(mlflow, run_id, fam.logged_params))
    return None


def _agent_settings(family: str, mlflow: MLflowResource, run_id: str | None,
                    checkpoint: Path | None, device: str):
    """The agent's config as its training saved (or, before configs were saved, logged) it;
    the asset Config's defaults when neither is there."""
    fam = families.family(family)
    logged = saved_agent_config(checkpoint) if checkpoint else None
    if logged is None and run_id:
        logged = training_params(mlflow, run_id, fam.logged_params)
    if not logged:
        return agent_config(family, AGENT_CONFIGS[family](), device)
    logged = dict(logged)
    if isinstance(logged.get("env"), dict):
        logged["env"] = EnvConfig(**logged["env"])
    return fam.config_class().from_dict({**logged, "device": device})


def ensemble_members(storage: FoxhuntStorage, mlflow: MLflowResource, checkpoint: Path) -> dict:
    """What the ensemble's walk-forward retrains per fold: the current member forecasters with
    their training configs (logged ones only for checkpoints that carry none), and whether
    the climatology is a member (its weights)."""
    meta = read_checkpoint_meta(checkpoint)
    weights = dict(meta.get("extra", meta).get("weights") or {})
    members = {}
    for member in families.family("ensemble").members:
        if weights and member not in weights:
            continue
        try:
            pointer, ckpt, _ = storage.current_model(member)
        except FileNotFoundError:
            continue
        logged = families.family(member).logged_params
        train = (None if saved_train_config(ckpt) is not None or not logged else
                 logged_train_config(member, training_params(mlflow, pointer["mlflow_run_id"],
                                                             logged)))
        members[member] = (str(ckpt), train)
    return {"members": members, "include_climatology": "climatology" in weights}


def n_compared() -> int:
    """Models and baselines that make skill claims on one protocol (the Bonferroni count)."""
    return len(families.ALL) + len(baseline_candidates())


def run_walk_forward(family: str, checkpoint: Path, data, config: EvaluationConfig, device: str,
                     log=None, settings=None, scored: Callable[[str], set] | None = None,
                     cache_dir: Path | None = None):
    """Walk-forward of one family next to every baseline (used by the evaluation assets and
    by the leaderboard when it re-scores a champion on a newer protocol). ``scored(protocol)``
    names the baselines already in model_evaluations under that protocol: they are not
    scored again (they are deterministic). ``cache_dir`` keeps the forecasters' fold models
    for the ensemble's and the agents' walk-forwards."""

    def on_fold(fold, fold_data) -> None:
        if log is not None:
            d = fold.describe()
            log(f"{family} fold {fold.number}: train {d['train']}, validation {d['validation']}, "
                f"test {d['test']} ({fold_data.splits['test'].n_windows} test windows)")

    try:
        pool = row_pool(data, trade_dates)
        baselines = baseline_candidates()
        if scored is not None:
            done = scored(protocol_id_for(pool, walk_forward_config(config),
                                          n_compared=n_compared(),
                                          cost_multiplier=config.cost_multiplier,
                                          bootstrap=config.bootstrap,
                                          threshold_k=config.threshold_k))
            baselines = [b for b in baselines if b.name not in done]
        candidates = [production_candidate(family, checkpoint, settings, device=device,
                                           cache_dir=cache_dir), *baselines]
        return walk_forward(pool, candidates, walk_forward_config(config),
                            n_compared=n_compared(), cost_multiplier=config.cost_multiplier,
                            threshold_k=config.threshold_k, bootstrap=config.bootstrap,
                            seed=config.seed, on_fold=on_fold)
    except WalkForwardError as e:
        raise dg.Failure(f"{family} walk-forward evaluation: {e}") from e


def bars_frame(result, version: str) -> pl.DataFrame:
    """Every candidate's pooled walk-forward test bars: the family's named with ``version``
    (``models.evaluation.promotion.candidate_key``), the baselines by name."""
    frames = []
    for name, cand in result.candidates.items():
        b = cand.bars
        frames.append(pl.DataFrame({
            "model": name, "version": "" if name.startswith("baseline:") else str(version),
            "root": np.asarray(b.root, str), "ts_event": np.asarray(b.ts, np.int64),
            "position": np.asarray(b.positions, np.float64),
            "pnl": np.asarray(b.pnl, np.float64)}))
    return pl.concat(frames).with_columns(
        pl.col("ts_event").cast(pl.Datetime("ns", "UTC")),
        pl.lit(result.protocol_id).alias("protocol_id"),
        pl.lit(float(result.protocol["bars_per_year"])).alias("bars_per_year"))


def store_bars(storage: FoxhuntStorage, result, version: str, part: str) -> None:
    """Append the result's bars under its protocol (``BARS_TABLE/<protocol_id>/``)."""
    storage.write_part(f"{BARS_TABLE}/{result.protocol_id}", part, bars_frame(result, version))


def scored_baselines(storage: FoxhuntStorage, protocol_id: str) -> set[str]:
    """Baselines with a pooled row under ``protocol_id`` in model_evaluations."""
    df = storage.read_rows(EVALUATIONS_TABLE)
    if df.is_empty() or not {"protocol_id", "fold"} <= set(df.columns):
        return set()
    hit = df.filter((pl.col("protocol_id") == protocol_id) & (pl.col("fold") == "pooled")
                    & (pl.col("family") == "baseline"))
    return set(hit.get_column("model").to_list())


def folds_markdown(result) -> str:
    lines = ["| fold | train | validation | test |", "|---|---|---|---|"]
    for f in result.folds:
        d = f.describe()
        lines.append(f"| {f.number} | {d['train']} | {d['validation']} | {d['test']} |")
    return "\n".join(lines)


def walk_forward_markdown(result) -> str:
    """Pooled metrics of every candidate, "-" where undefined."""
    cols = ("sharpe", "sharpe_ci_low", "n_trades", "turnover", "hit_rate", "ic", "rank_ic",
            "icir", "ic_ci_low")
    lines = ["| model | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for name, c in result.candidates.items():
        cells = [("-" if (v := _float_or_none(c.pooled.get(k))) is None else f"{v:.4g}")
                 for k in cols]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    level = next(iter(result.candidates.values())).pooled.get("ci_level")
    return (f"Pooled over {len(result.folds)} folds; CI lower bounds at the "
            f"Bonferroni-adjusted level {level:.4f}.\n\n" + "\n".join(lines))


def walk_forward_chart(family: str, result, out_dir: Path) -> Path:
    """Equity of the family and every baseline over the walk-forward test folds, per root,
    each fold shaded."""
    # lazy: models.evaluation.plots imports matplotlib, which the code location does not need
    from models.evaluation.plots import walk_forward_equity

    return walk_forward_equity(
        out_dir / f"{family}_walk_forward_equity.png", result,
        title=f"foxhunt-{family} vs baselines, walk-forward test folds (one model per fold), "
              "net of costs")


def _evaluate(family: str, context: dg.AssetExecutionContext, config: EvaluationConfig,
              storage: FoxhuntStorage, mlflow: MLflowResource, torch_device: TorchDevice):
    """One evaluation asset: the production model's own test split (plots, running cost),
    then the walk-forward skill claim, stored in model_evaluations and the model's MLflow run."""
    data = load_dataset(storage)
    pointer, run_dir = load_current_model(storage, family)
    device = str(torch_device.choose().device)
    out_dir = run_dir / "evaluation"
    report = _production_report(family, pointer, data, config, out_dir, device)
    # the skill claim: walk-forward, one fresh model per fold
    checkpoint = Path(pointer["checkpoint"])
    name = families.family(family).registered_name
    result = run_walk_forward(family, checkpoint, data, config, device, context.log.info,
                              production_settings(family, storage, mlflow,
                                                  pointer["mlflow_run_id"], checkpoint, device),
                              scored=lambda protocol: scored_baselines(storage, protocol),
                              cache_dir=storage.fold_model_cache)
    store_bars(storage, result, pointer["version"], f"{family}-{context.run.run_id}")
    said = report_warnings(context, fold_warnings(result.folds, data.meta["roots"]))  # holes in folds
    figures = {**report.plots, "walk_forward_equity": walk_forward_chart(family, result, out_dir)}
    running = {k: v for k, v in report.metrics.items()
               if k.startswith(("latency_", "throughput_", "peak_memory", "n_parameters",
                                "checkpoint_mb"))}
    rows = evaluation_rows(family, pointer["version"], "fp32", result, context.run.run_id,
                           datetime.now(UTC), extra=running,
                           equals=composition_equals(family, checkpoint))
    equals = result.candidates[name].equals or composition_equals(family, checkpoint)
    storage.append_rows(EVALUATIONS_TABLE, rows, f"{family}-{context.run.run_id}")
    pooled = {**result.candidates[name].pooled, **running}
    _log_to_run(TrackedRun(mlflow.client(), pointer["mlflow_run_id"], mlflow), report, pooled,
                result.protocol_id, figures)
    storage.store_run_outputs(pointer, run_dir, out_dir)
    return dg.MaterializeResult(metadata={
        **_evaluation_metadata(pointer, result, pooled, equals, report),
        "plots": dg.MetadataValue.md(pngs_md(figures)),
        "mlflow_run_id": pointer["mlflow_run_id"],
        **said,
    })


def _production_report(family: str, pointer: dict, data, config: EvaluationConfig,
                       out_dir: Path, device: str):
    """The production model (trained on all data up to its test split) on its test split (its
    most recent ``report_rows``): plots and running cost."""
    data = recent_rows(data, {"test": config.report_rows or None})
    kwargs = dict(out_dir=out_dir, device=device, cost_multiplier=config.cost_multiplier,
                  latency_calls=config.latency_calls, bootstrap=config.bootstrap, seed=config.seed)
    if families.family(family).kind == "forecaster":
        return _evaluate_forecaster(family, pointer, data, config, kwargs)
    return _evaluate_agent(family, pointer, data, kwargs)


def _log_to_run(run: TrackedRun, report, pooled: dict, protocol_id: str,
                figures: dict[str, Path]) -> None:
    """test_*: the production model on its own test split; wf_*: walk-forward pooled."""
    run.log_metrics({f"test_{k}": f for k, v in report.metrics.items()
                     if (f := _float_or_none(v)) is not None})
    run.log_metrics({f"wf_{k}": f for k, v in pooled.items() if (f := _float_or_none(v)) is not None})
    run.set_tags({"protocol_id": protocol_id})
    for path in figures.values():
        run.log_artifact(Path(path), "evaluation")


def _evaluation_metadata(pointer: dict, result, pooled: dict, equals: str | None, report) -> dict:
    """The evaluation asset's headline metadata: the model, the folds and its pooled metrics."""
    return {
        "model": f"{pointer['registered_model']} v{pointer['version']}",
        "protocol_id": result.protocol_id,
        "folds": dg.MetadataValue.md(folds_markdown(result)),
        "test_period": f"{result.folds[0].describe()['test'].split(' .. ')[0]} .. "
                       f"{result.folds[-1].describe()['test'].split(' .. ')[-1]}",
        "sharpe": _meta_float(pooled.get("sharpe")),
        "sharpe_ci_low": _meta_float(pooled.get("sharpe_ci_low")),
        "ic": _meta_float(pooled.get("ic")),
        "ic_ci_low": _meta_float(pooled.get("ic_ci_low")),
        "equals": equals or "-",
        "n_trades": _meta_float(pooled.get("n_trades")),
        "hit_rate": _meta_float(pooled.get("hit_rate")),
        "q_risk_p50": _meta_float(pooled.get("q_risk_p50")),
        "latency_ms_p95": _meta_float(pooled.get("latency_ms_p95")),
        "walk_forward": dg.MetadataValue.md(walk_forward_markdown(result)),
        "production_model_test_split": dg.MetadataValue.md(report.markdown),
    }


def _evaluate_forecaster(family: str, pointer: dict, data, config: EvaluationConfig, kwargs: dict):
    # lazy: models.evaluation.evaluate imports matplotlib (see walk_forward_chart)
    from models.evaluation.evaluate import evaluate_forecaster

    model, meta = families.family(family).load(pointer["checkpoint"], device=kwargs["device"])
    extra = meta.get("extra", meta)
    features = {k: extra.get(f"{k}_names", []) for k in ("observed", "known", "static")}
    return evaluate_forecaster(
        family, model, data, threshold_k=config.threshold_k, model_features=features,
        checkpoint_path=Path(pointer["checkpoint"]), **kwargs,
    )


def _evaluate_agent(family: str, pointer: dict, data, kwargs: dict):
    """The policy acts sequentially (its observation holds its own position), so positions come
    from the environment's batched replay; the evaluation then scores them like any model's."""
    # lazy: models.evaluation.evaluate imports matplotlib (see walk_forward_chart)
    from models.evaluation.evaluate import evaluate_agent

    policy = load_policy(pointer["checkpoint"], device=kwargs["device"])
    replay = evaluate_positions(policy, data, "test")
    positions = np.zeros(data.splits["test"].n_rows, dtype=np.float64)
    positions[np.asarray(replay["rows"], dtype=np.int64)] = replay["positions"]
    sample = torch.zeros(1, policy.obs_dim)

    def act(static, observed, known):
        """One decision from a window: the forecasters it observes, then the policy."""
        if policy.state is None:
            return policy(sample.expand(observed.shape[0], -1).to(kwargs["device"]))
        state = policy.state.of_windows(static, observed, known, torch.zeros(observed.shape[0]))
        position = torch.zeros(observed.shape[0], 3, device=state.device)
        position[:, 1] = 1.0
        return policy(torch.cat([state, position], dim=1))

    return evaluate_agent(family, positions, data, model=policy, act_fn=act,
                          checkpoint_path=Path(pointer["checkpoint"]) / "policy.safetensors", **kwargs)


def evaluation_asset(family: str, upstream: str, after: tuple[str, ...] = ()):
    """``after``: evaluations whose fold models this one reuses (the ensemble's members)."""

    @dg.asset(
        name=f"{family}_evaluation",
        deps=[upstream, *after],
        group_name="evaluation",
        kinds={"pytorch", "duckdb", "mlflow"},
        owners=OWNERS,
        code_version=code_version_of("models.evaluation.evaluate", "models.evaluation.backtest",
                                     "models.evaluation.metrics", "models.evaluation.walk_forward",
                                     "models.evaluation.candidates", "models.evaluation.skill",
                                     "models.evaluation.family_candidates"),
        automation_condition=EAGER_AFTER_CHECKS,
        description=f"Walk-forward evaluation of {upstream}'s configuration: one fresh model per "
        "fold, scored with costs and next-bar fills on the same folds and bars as the flat / "
        "buy-and-hold / momentum / climatology baselines; per-fold and pooled metrics "
        "(Sharpe, IC, trades) with Bonferroni-adjusted block-bootstrap CIs, and the production "
        "model's plots and running cost.",
    )
    def _asset(context: dg.AssetExecutionContext, config: EvaluationConfig, storage: FoxhuntStorage,
               mlflow: MLflowResource, torch_device: TorchDevice) -> dg.MaterializeResult:
        with forecast_memo.on_disk(storage.forecast_cache):  # the agents' state, shared
            return _evaluate(family, context, config, storage, mlflow, torch_device)

    return _asset


tft_evaluation = evaluation_asset("tft", "tft_model")
mamba2_evaluation = evaluation_asset("mamba2", "mamba2_model")
lightgbm_evaluation = evaluation_asset("lightgbm", "lightgbm_model")
# the agents' walk-forward retrains the forecasters they observe per fold: after those
# forecasters' own evaluations, it finds their fold models in the cache
dqn_evaluation = evaluation_asset("dqn", "dqn_agent", after=("tft_evaluation", "mamba2_evaluation"))
ppo_evaluation = evaluation_asset("ppo", "ppo_agent", after=("tft_evaluation", "mamba2_evaluation"))
