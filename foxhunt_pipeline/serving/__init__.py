"""Running an exported model on stored features outside Dagster (``foxhunt predict``)."""
