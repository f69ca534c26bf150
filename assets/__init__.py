"""Software-defined assets: thin wiring from resources to library code."""
