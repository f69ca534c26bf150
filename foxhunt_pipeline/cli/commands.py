"""The ``foxhunt`` command line: generate data, materialize, run the demo, open the UI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import click

from foxhunt_pipeline.config.paths import FoxhuntPaths


def _paths(home: str | None) -> FoxhuntPaths:
    if home:
        os.environ["FOXHUNT_HOME"] = str(Path(home).expanduser().resolve())
    return FoxhuntPaths.from_env().ensure()


home_option = click.option(
    "--home", envvar="FOXHUNT_HOME", default=None, help="State directory (default $FOXHUNT_HOME or ./.foxhunt)."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """foxhunt-pipeline: Databento DBN futures bars to trained, evaluated, quantized models."""


@main.command()
@click.option("--days", type=click.IntRange(1, 3660), default=10, show_default=True, help="UTC calendar days.")
@click.option("--roots", default="ES,ZN", show_default=True, help="Comma-separated futures roots.")
@click.option("--schema", type=click.Choice(["ohlcv-1m", "ohlcv-1s"]), default="ohlcv-1m", show_default=True)
@click.option("--start", type=click.DateTime(["%Y-%m-%d"]), default="2024-01-02", show_default=True)
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--random-walk", is_flag=True, help="Remove every predictable component (lookahead guard data).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None, help="Default: $FOXHUNT_HOME/landing.")
@home_option
def generate(days, roots, schema, start, seed, random_walk, out, home) -> None:
    """Write synthetic Databento-style DBN files (one zstd file per UTC day)."""
    from foxhunt_pipeline.synthetic.generate import generate as gen

    paths = _paths(home)
    out = out or paths.landing
    written = gen(
        out, days=days, roots=tuple(r.strip().upper() for r in roots.split(",") if r.strip()),
        schema=schema, start=start.date(), seed=seed, random_walk=random_walk, progress=sys.stderr.isatty(),
    )
    click.echo(f"wrote {len(written)} files to {out}")


@main.command()
@click.argument("selection", nargs=-1)
@click.option("--profile", type=click.Choice(["default", "demo", "fast"]), envvar="FOXHUNT_PROFILE",
              default="default", show_default=True,
              help="Training sizes (demo/fast are small CPU-friendly settings); env FOXHUNT_PROFILE.")
@click.option("--all-partitions", is_flag=True,
              help="Re-ingest every landed file and rebuild every trade date, not only new ones.")
@click.option("--from", "date_from", type=click.DateTime(["%Y-%m-%d"]), default=None,
              help="First trade date to rebuild (continuous_bars, features), with --to: one run.")
@click.option("--to", "date_to", type=click.DateTime(["%Y-%m-%d"]), default=None,
              help="Last trade date to rebuild (default: the last with data).")
@home_option
def materialize(selection, profile, all_partitions, date_from, date_to, home) -> None:
    """Register new landed files and materialize SELECTION (Dagster selection syntax; default: all).
    Trade-date partitioned assets rebuild only the dates new files touch (plus the date before,
    whose last targets they complete), or the range --from/--to, in one run."""
    from foxhunt_pipeline.cli.runner import materialize_selection

    paths = _paths(home)
    ok = materialize_selection(paths, list(selection) or ["*"], profile=profile, all_partitions=all_partitions,
                               date_from=date_from.date() if date_from else None,
                               date_to=date_to.date() if date_to else None, echo=click.echo)
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--days", type=click.IntRange(2, 365), default=None, help="Days of generated data (default 12, --fast 5).")
@click.option("--fast", is_flag=True, help="Smallest settings: a few minutes on 2 CPU cores.")
@click.option("--seed", type=int, default=7, show_default=True)
@home_option
def demo(days, fast, seed, home) -> None:
    """Generate a small data set, materialize the whole graph, print the leaderboard."""
    from foxhunt_pipeline.cli.runner import run_demo

    paths = _paths(home)
    ok = run_demo(paths, days=days or (5 if fast else 12), fast=fast, seed=seed, echo=click.echo)
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--port", type=int, default=3000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@home_option
def ui(port, host, home) -> None:
    """Start the Dagster UI (webserver + daemon) on the persistent instance."""
    from foxhunt_pipeline.cli.instance import ensure_dagster_home

    paths = _paths(home)
    ensure_dagster_home(paths)
    workspace = Path(__file__).resolve().parents[2] / "workspace.yaml"
    # an editable checkout has workspace.yaml; an installed package loads the module directly
    target = ["-w", str(workspace)] if workspace.exists() else ["-m", "foxhunt_pipeline.definitions", "-a", "defs"]
    cmd = [sys.executable, "-m", "dagster", "dev", *target, "-h", host, "-p", str(port)]
    click.echo(f"Dagster UI on http://{host}:{port}  (DAGSTER_HOME={paths.dagster_home})")
    click.echo(f"MLflow UI: mlflow ui --backend-store-uri {paths.mlflow_tracking_uri}")
    proc = subprocess.Popen(cmd, start_new_session=True, cwd=workspace.parent if workspace.exists() else None)

    def _terminate(signum, frame):  # dagster dev ignores SIGTERM: turn ours into a clean stop
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if proc.poll() is None:
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
@click.argument("artifact", type=click.Path(exists=True, dir_okay=True, path_type=Path))
@click.option("--features", "features_path", type=click.Path(exists=True, path_type=Path), default=None,
              help="Features parquet or directory (default: $FOXHUNT_HOME/warehouse/features, "
              "one folder per trade date).")
@click.option("--root", default=None)
@click.option("--start", default=None, help="ISO datetime (UTC), inclusive.")
@click.option("--end", default=None, help="ISO datetime (UTC), exclusive.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write parquet here.")
@home_option
def predict(artifact, features_path, root, start, end, out, home) -> None:
    """Load an exported model artifact and predict quantiles on a slice of features."""
    from foxhunt_pipeline.serving.predict import predict_from_parquet

    paths = _paths(home)
    features_path = features_path or paths.table_dir("features")
    df = predict_from_parquet(artifact, features_path, root=root, start=start, end=end)
    if out:
        df.write_parquet(out)
        click.echo(f"wrote {df.height} predictions to {out}")
    else:
        click.echo(df)


@main.command()
@click.argument("query")
@home_option
def sql(query, home) -> None:
    """Run a read-only SQL QUERY on $FOXHUNT_HOME/foxhunt.duckdb (views raw_bars, continuous_bars,
    features; tables rolls, model_evaluations). The PyPI duckdb CLI lags the Python package's
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
