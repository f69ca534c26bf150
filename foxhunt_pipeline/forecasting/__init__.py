"""The champion's daily forecasts outside Dagster: which trade dates may be forecast
(``freshness``), the features a date needs (``inputs``), the known-future calendar rows after
the newest bar (``future_rows``), the stored rows per date and model version (``frame``,
``store``). ``champion_forecasts`` and ``foxhunt forecast`` both call them."""
