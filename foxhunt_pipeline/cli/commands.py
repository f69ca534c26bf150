"""The ``foxhunt`` command line: generate data, materialize, run the demo, open the UI.

Each command imports what only it needs (dagster, the definitions, torch, MLflow, polars,
duckdb, the generator) inside its function: those take seconds to import, and ``foxhunt
--help`` or a command that does not need them starts in a fraction of a second."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import click

from foxhunt_pipeline.cli.errors import one_line
from foxhunt_pipeline.cli.instance import get_instance
from foxhunt_pipeline.cli.mlflow_ui import start_mlflow_ui
from foxhunt_pipeline.cli.quiet import route_library_output
from foxhunt_pipeline.config import home_profile
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.config.profiles import DEMO_DAYS, PROFILE_ENV
from foxhunt_pipeline.config.settings import load_settings


def _paths(home: str | None) -> FoxhuntPaths:
    if home:
        os.environ["FOXHUNT_HOME"] = str(Path(home).expanduser().resolve())
    paths = FoxhuntPaths.from_env().ensure()
    route_library_output(paths.home)  # libraries' warnings and progress bars: the home's log file
    return paths


home_option = click.option(
    "--home", envvar="FOXHUNT_HOME", default=None, help="State directory (default $FOXHUNT_HOME or ./.foxhunt)."
)


class FaultReportingGroup(click.Group):
    """Operational faults (disk full, read-only or forbidden directory, offline, locked
    catalogue) end a command with one line instead of a traceback; bugs keep theirs."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as e:
            message = one_line(e)
            if message is None:
                raise
            raise click.ClickException(message) from e


profile_option = click.option(
    "--profile", type=click.Choice(["default", "demo", "fast"]), default=None,
    help="Training sizes (demo/fast are small CPU-friendly settings). Default: $FOXHUNT_PROFILE, else the "
         "profile the home was created with, else 'default' with a GPU and 'demo' without.")


def _profile(explicit: str | None, paths: FoxhuntPaths) -> str:
    """The active profile, said out loud, and exported for the code location to read."""
    name, why = home_profile.resolve_profile(explicit, paths.home, has_gpu=home_profile.has_gpu())
    click.echo(f"profile: {name} ({why})")
    os.environ[PROFILE_ENV] = name  # for `dagster dev` and its run workers
    load_settings(profile=name)
    return name


@click.group(cls=FaultReportingGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """foxhunt-pipeline: Databento DBN futures bars to trained, evaluated, quantized models."""
    load_settings()  # the CLI starts: read the environment once


@main.command()
@click.option("--days", type=click.IntRange(1, 3660), default=10, show_default=True, help="UTC calendar days.")
@click.option("--roots", default="ES,ZN", show_default=True, help="Comma-separated futures roots.")
@click.option("--schema", type=click.Choice(["ohlcv-1m", "ohlcv-1s"]), default="ohlcv-1m", show_default=True)
@click.option("--start", type=click.DateTime(["%Y-%m-%d"]), default="2024-01-02", show_default=True)
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--random-walk", is_flag=True, help="Remove every predictable component (lookahead guard data).")
@click.option("--break-at", type=click.DateTime(["%Y-%m-%d"]), default=None,
              help="Switch the predictable components off from this CME trade date on (a regime "
                   "change: models decay after it); the days before are unchanged.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None, help="Default: $FOXHUNT_HOME/landing.")
@click.option("--outage", multiple=True, metavar="START/END[@ROOTS]",
              help="No bars in this UTC span (every root, or the roots named), e.g. 2024-01-10T08:00/2024-01-10T14:00.")
@click.option("--news", multiple=True, metavar="ROOT@TIME:SIZE",
              help="A news jump that persists, e.g. CL@2024-01-10T13:30:+3%.")
@click.option("--bad-print", multiple=True, metavar="ROOT@TIME:FACTOR",
              help="One bar printed at FACTOR x its prices, then back, e.g. ES@2024-01-10T15:00:1000.")
@click.option("--holiday-session", multiple=True, metavar="DATE[:SHARE]",
              help="A thin session (SHARE of the usual volume, default 0.05) on this trade date.")
@home_option
def generate(days, roots, schema, start, seed, random_walk, break_at, out, outage, news, bad_print,
             holiday_session, home) -> None:
    """Write synthetic Databento-style DBN files (one zstd file per UTC day). The event options
    (repeatable, UTC times) add what real data has and a default run never makes; without them
    the files are the same for the same seed."""
    from foxhunt_pipeline.synthetic import events as market_events
    from foxhunt_pipeline.synthetic.generate import generate as gen

    try:
        events = market_events.parse(outage, news, bad_print, holiday_session)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e
    paths = _paths(home)
    out = out or paths.landing
    written = gen(
        out, days=days, roots=tuple(r.strip().upper() for r in roots.split(",") if r.strip()),
        schema=schema, start=start.date(), seed=seed, random_walk=random_walk, progress=sys.stderr.isatty(),
        events=events or None,
        break_at=break_at.date() if break_at else None,
    )
    click.echo(f"wrote {len(written)} files to {out}")
    click.echo(_oracle_line(out, start.date(), start.date() + timedelta(days=max(days - 1, 0))))


def _oracle_line(landing: Path, first: date, last: date) -> str:
    """What an oracle that knows the generator's latent process earned on these days."""
    from foxhunt_pipeline.synthetic import oracle_summary

    summary = oracle_summary(landing, start=first, end=last)
    if summary is None:
        return "oracle: no generator metadata for these days"

    def fmt(stats: dict) -> str:
        return "-" if stats["sharpe"] is None else f"{stats['sharpe']:.1f}"

    per_root = ", ".join(f"{r} {fmt(s)}" for r, s in summary["per_root"].items())
    return (f"oracle Sharpe after costs (1 tick + fee per side, 5-bar forecast of the latent "
            f"drift): {per_root}, pooled {fmt(summary['pooled'])}; parameters and per-day "
            f"statistics in <file>.generator.json")


@main.command()
@click.argument("selection", nargs=-1)
@profile_option
@click.option("--all-partitions", is_flag=True,
              help="Re-ingest every landed file and rebuild every trade date, not only new ones.")
@click.option("--from", "date_from", type=click.DateTime(["%Y-%m-%d"]), default=None,
              help="First trade date to rebuild (continuous_bars, features), with --to: one run.")
@click.option("--to", "date_to", type=click.DateTime(["%Y-%m-%d"]), default=None,
              help="Last trade date to rebuild (default: the last with data).")
@home_option
def materialize(selection, profile, all_partitions, date_from, date_to, home) -> None:
    """Register new landed files and materialize SELECTION (Dagster selection syntax; default
    and `*`: all but the tuning group, which runs when named: `tft_tuning`, `foxhunt tune`).
    Trade-date partitioned assets rebuild only the dates new files touch (plus the date before,
    whose last targets they complete), or the range --from/--to, in one run."""
    from foxhunt_pipeline.cli.runner import materialize_selection

    paths = _paths(home)
    profile = _profile(profile, paths)
    ok = materialize_selection(paths, list(selection) or ["*"], profile=profile, all_partitions=all_partitions,
                               date_from=date_from.date() if date_from else None,
                               date_to=date_to.date() if date_to else None, echo=click.echo)
    sys.exit(0 if ok else 1)


@main.command()
@click.argument("family", type=click.Choice(["tft", "mamba2", "dqn", "ppo"]))
@click.option("--trials", type=click.IntRange(1), default=None, help="Trials this process runs (default: the profile's).")
@click.option("--timeout", "timeout_s", type=click.IntRange(0), default=None,
              help="Stop starting trials after this many seconds (0: no limit; default: the profile's).")
@click.option("--study", default="", help="Join this study (several workers, one study); default: a new one.")
@click.option("--profile", type=click.Choice(["default", "demo", "fast"]), envvar="FOXHUNT_PROFILE",
              default="default", show_default=True, help="Sizes of each trial; env FOXHUNT_PROFILE.")
@home_option
def tune(family, trials, timeout_s, study, profile, home) -> None:
    """Run a hyperparameter study of FAMILY (materializes FAMILY_tuning); the next training of
    FAMILY uses the newest study's best parameters. Studies live in $FOXHUNT_OPTUNA_URL, else
    SQLite under FOXHUNT_HOME."""
    from foxhunt_pipeline.cli.runner import materialize_selection

    paths = _paths(home)
    config = {k: v for k, v in {"n_trials": trials, "timeout_s": timeout_s, "study_name": study}.items()
              if v not in (None, "")}
    asset = f"{family}_tuning"
    ok = materialize_selection(paths, [asset], profile=profile, echo=click.echo,
                               run_config={"ops": {asset: {"config": config}}})
    from models.tuning.study import redact

    click.echo(f"studies: {redact(paths.optuna_storage_url)}")
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--days", type=click.IntRange(2, 365), default=None, help="Days of generated data (default 16, --fast 8).")
@click.option("--fast", is_flag=True, help="Smallest settings: a few minutes on 2 CPU cores.")
@click.option("--seed", type=int, default=7, show_default=True)
@home_option
def demo(days, fast, seed, home) -> None:
    """Generate a small data set, materialize the whole graph, print the leaderboard."""
    from foxhunt_pipeline.cli.runner import run_demo

    paths = _paths(home)
    home_profile.store_profile(paths.home, "fast" if fast else "demo")  # what `foxhunt ui` keeps using here
    # --fast: 8 UTC days hold ~6 trade dates, enough for the train / validation / test split
    # and the fast profile's 2 walk-forward folds (5 days held 4 and failed the split)
    ok = run_demo(paths, days=days or (8 if fast else DEMO_DAYS), fast=fast, seed=seed, echo=click.echo)
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--port", type=int, default=3000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--mlflow-port", type=int, default=None, help="MLflow UI port (default: --port + 1); not started "
              "when $MLFLOW_TRACKING_URI names a tracking server.")
@profile_option
@home_option
def ui(port, host, mlflow_port, profile, home) -> None:
    """Start the Dagster UI (webserver + daemon) on the persistent instance, and the MLflow UI
    on the home's tracking store next to it."""
    from foxhunt_pipeline.cli.runner import recover

    paths = _paths(home)
    _profile(profile, paths)
    instance = get_instance(paths)  # also writes DAGSTER_HOME
    recover(instance, paths, click.echo)
    instance.dispose()
    workspace = Path(__file__).resolve().parents[2] / "workspace.yaml"
    # an editable checkout has workspace.yaml; an installed package loads the module directly
    target = ["-w", str(workspace)] if workspace.exists() else ["-m", "foxhunt_pipeline.definitions", "-a", "defs"]
    cmd = [sys.executable, "-m", "dagster", "dev", *target, "-h", host, "-p", str(port)]
    procs = []
    server = os.environ.get("MLFLOW_TRACKING_URI", "")
    if server.startswith(("http://", "https://")):
        click.echo(f"MLflow: {server} (MLFLOW_TRACKING_URI)")
    else:
        from resources.mlflow_tracking import UI_URL_ENV

        mlflow_proc, ui_url = start_mlflow_ui(paths, host, mlflow_port or port + 1)
        os.environ[UI_URL_ENV] = ui_url  # the links in asset metadata point here
        procs.append(mlflow_proc)
        click.echo(f"MLflow UI on {ui_url}  (store {paths.mlflow_tracking_uri})")
    click.echo(f"Dagster UI on http://{host}:{port}  (DAGSTER_HOME={paths.dagster_home})")
    proc = subprocess.Popen(cmd, start_new_session=True, cwd=workspace.parent if workspace.exists() else None)
    procs.insert(0, proc)

    def _terminate(signum, frame):  # dagster dev ignores SIGTERM: turn ours into a clean stop
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            _stop_group(p)


def _stop_group(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    deadline = time.time() + 20
    while proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)


@main.command()
@click.option("--dataset", default="GLBX.MDP3", show_default=True)
@click.option("--symbols", default="ES.FUT", show_default=True, help="Comma-separated; parent symbols like ES.FUT.")
@click.option("--schema", type=click.Choice(["ohlcv-1s", "ohlcv-1m", "ohlcv-1h", "ohlcv-1d"]), default="ohlcv-1m",
              show_default=True)
@click.option("--start", required=True, help="ISO date or datetime (UTC).")
@click.option("--end", required=True, help="ISO date or datetime (UTC), exclusive.")
@click.option("--stype-in", default="parent", show_default=True)
@home_option
def download(dataset, symbols, schema, start, end, stype_in, home) -> None:
    """Download bars into the landing zone (API key from DATABENTO_API_KEY only); with
    $FOXHUNT_LANDING_URL set, the finished file is uploaded there."""
    from foxhunt_pipeline.storage.object_store import is_local, landing_root, put_file
    from resources.databento_source import MissingApiKeyError, download_to_landing, landed_name

    paths = _paths(home)
    landing = landing_root(home=paths.home)
    local_landing = Path(landing.path) if is_local(landing) else paths.home / "scratch" / "download"
    try:
        if date.fromisoformat(end[:10]) < date.fromisoformat(start[:10]):
            raise click.BadParameter(f"--end {end} is before --start {start}")
    except ValueError as e:
        raise click.BadParameter(f"dates must be ISO format (YYYY-MM-DD): {e}") from e
    target = landing / landed_name(dataset, schema, start, end)
    if not is_local(landing) and target.exists():  # checked before paying for the download
        raise click.ClickException(f"{target} already landed; landed files are never overwritten")
    try:
        dest = download_to_landing(
            local_landing, dataset=dataset, symbols=[s.strip() for s in symbols.split(",") if s.strip()],
            schema=schema, start=start, end=end, stype_in=stype_in,
        )
    except (MissingApiKeyError, FileExistsError) as e:
        raise click.ClickException(str(e)) from e
    if not is_local(landing):
        dest = put_file(dest, target)
    click.echo(f"landed {dest}")


@main.command()
@click.argument("model")
@click.option("--features", "features_path", type=click.Path(exists=True, path_type=Path), default=None,
              help="Features parquet or directory (default: $FOXHUNT_HOME/warehouse/features, "
              "one folder per trade date).")
@click.option("--root", default=None)
@click.option("--start", default=None, help="ISO datetime (UTC), inclusive.")
@click.option("--end", default=None, help="ISO datetime (UTC), inclusive.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write parquet here.")
@home_option
def predict(model, features_path, root, start, end, out, home) -> None:
    """Predict with MODEL on a slice of features: quantiles (TFT, Mamba-2) or actions (DQN,
    PPO). MODEL is an exported artifact or policy directory, or a registered MLflow model
    (``models:/foxhunt-tft@champion``, ``models:/foxhunt-dqn/3``, ``runs:/<id>/model``)."""
    from foxhunt_pipeline.serving.predict import PredictInputError

    paths = _paths(home)
    features_path = features_path or paths.table_dir("features")
    try:
        with _local_model(model, paths) as artifact:
            df = _predict(artifact, features_path, root=root, start=start, end=end)
    except (PredictInputError, FileNotFoundError) as e:
        raise click.ClickException(str(e)) from e
    if out:
        df.write_parquet(out)
        click.echo(f"wrote {df.height} predictions to {out}")
    else:
        click.echo(df)


@contextlib.contextmanager
def _local_model(model: str, paths: FoxhuntPaths) -> Iterator[Path]:
    """A local artifact directory for MODEL: the path itself, or the project artifact inside
    a registered MLflow model (resolved against $MLFLOW_TRACKING_URI or the home's store,
    downloaded to a temporary directory; no process-wide MLflow setting is changed)."""
    if "://" not in model and ":/" not in model:
        path = Path(model).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such artifact (or use models:/<name>@<alias>)")
        yield path
        return
    import mlflow

    from resources.mlflow_tracking import rebase_local_store

    if not os.environ.get("MLFLOW_TRACKING_URI"):
        rebase_local_store(paths)  # a moved or copied home reads its own artifacts
    uri = os.environ.get("MLFLOW_TRACKING_URI") or paths.mlflow_tracking_uri
    registry = os.environ.get("MLFLOW_REGISTRY_URI") or uri
    with tempfile.TemporaryDirectory(prefix="foxhunt-predict-") as tmp:
        try:
            source = _model_source(mlflow.tracking.MlflowClient(tracking_uri=uri, registry_uri=registry), model)
            local = mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=tmp, tracking_uri=uri)
        except mlflow.exceptions.MlflowException as e:
            raise click.ClickException(f"{model}: {e.message} (tracking store {uri})") from e
        yield mlflow.pyfunc.load_model(local).unwrap_python_model().model.path


def _model_source(client, model: str) -> str:
    """``models:/<name>@<alias>`` / ``models:/<name>/<version|latest>`` -> the version's
    artifact location, with an explicit client (MLflow's own resolution would use the
    process-wide registry URI); other URIs are returned as they are."""
    if not model.startswith("models:/"):
        return model
    rest = model.removeprefix("models:/")
    if "@" in rest:
        name, alias = rest.split("@", 1)
        version = client.get_model_version_by_alias(name, alias).version
    else:
        name, _, version = rest.rpartition("/")
        if version == "latest":
            versions = client.search_model_versions(f"name='{name}'")
            if not versions:
                raise click.ClickException(f"{model}: no versions of {name}")
            version = max(versions, key=lambda v: int(v.version)).version
    return client.get_model_version_download_uri(name, version)


def _utc(text: str) -> datetime:
    """An ``--start`` / ``--end`` ISO date or datetime; one without a zone is UTC."""
    out = datetime.fromisoformat(text)
    return out if out.tzinfo is not None else out.replace(tzinfo=UTC)


def _predict(artifact: Path, features_path: Path, *, root, start, end):
    import polars as pl

    from foxhunt_pipeline.serving.loaded import LoadedModel
    from foxhunt_pipeline.serving.predict import features_files, predict_from_parquet

    loaded = LoadedModel.load(artifact)
    if loaded.kind == "forecaster":
        return predict_from_parquet(artifact, features_path, root=root, start=start, end=end)
    lf = pl.scan_parquet(features_files(Path(features_path)), hive_partitioning=False)
    if root:
        lf = lf.filter(pl.col("root") == root)
    out = loaded.predict(lf.select(loaded.input_columns).sort("root", "ts_event").collect())
    if start:
        out = out.filter(pl.col("ts_event") >= _utc(start))
    if end:
        out = out.filter(pl.col("ts_event") <= _utc(end))
    return out


@main.command()
@click.option("--date", "day", type=click.DateTime(["%Y-%m-%d"]), default=None,
              help="The trade date to forecast (default: the newest with features).")
@click.option("--from", "date_from", type=click.DateTime(["%Y-%m-%d"]), default=None,
              help="First trade date of a range (with --to).")
@click.option("--to", "date_to", type=click.DateTime(["%Y-%m-%d"]), default=None,
              help="Last trade date of a range (default: the newest with features).")
@home_option
def forecast(day, date_from, date_to, home) -> None:
    """Forecast trade dates with the overall champion (``models:/<name>@champion``): every
    decision bar of every root, stored per date and model version (views `forecasts` and
    `realised`, which joins the outcomes of earlier dates as they arrive). Reads only each
    date's features and the lookback before it. A date whose features are missing, held back
    or stale is refused, naming it."""
    from foxhunt_pipeline.cli.forecast import run_forecast

    paths = _paths(home)
    if day is not None and (date_from is not None or date_to is not None):
        raise click.BadParameter("give --date or --from/--to, not both")
    first = (day or date_from).date() if (day or date_from) else None
    last = day.date() if day else (date_to.date() if date_to else None)
    ok = run_forecast(paths, first, last, echo=click.echo)
    sys.exit(0 if ok else 1)


@main.command()
@click.argument("query")
@home_option
def sql(query, home) -> None:
    """Run a read-only SQL QUERY on $FOXHUNT_HOME/foxhunt.duckdb (views raw_bars, continuous_bars,
    features, forecasts, all_forecasts, realised; tables rolls, model_evaluations). The PyPI duckdb CLI lags the Python package's
    storage format, so this is the supported way in. With $FOXHUNT_WAREHOUSE_URL set, the
    views read the object store through its fsspec filesystem."""
    import duckdb

    from foxhunt_pipeline.storage.object_store import connect_catalogue, warehouse_root

    paths = _paths(home)
    if not paths.duckdb.exists():
        raise click.ClickException(f"{paths.duckdb} does not exist yet: materialize something first")
    with connect_catalogue(paths.duckdb, warehouse_root(home=paths.home)) as con:
        try:
            click.echo(con.sql(query))
        except duckdb.Error as e:
            raise click.ClickException(str(e)) from e


if __name__ == "__main__":
    main()
