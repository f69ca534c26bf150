"""Training the forecasters: the loop (``loop``), data-parallel training (``distributed``),
checkpoints (``checkpoint``) and device / precision choice (``device``)."""
