"""Is the champion still doing what its backtest promised? Feature and prediction drift
(``drift``: PSI and a two-sample test per feature), the live-versus-backtest band of the
rolling Sharpe and equity (``band``: block bootstrap of the walk-forward test bars), the live
metrics (``live``) and the sequential decay detector on live P&L (``decay``: a CUSUM against
the backtest). Pure numpy / scipy / arch: no Dagster, no MLflow, no project package."""
