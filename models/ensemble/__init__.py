"""The ensemble of the forecasters: combination weights fitted on the validation split
(``weights``) and the combined model, a forecaster like any other (``model``), so it is
checkpointed, evaluated, quantized and ranked exactly as the single models are."""
