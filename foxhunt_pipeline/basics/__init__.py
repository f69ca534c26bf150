"""What every layer uses and none owns: atomic file writes, instants as UTC text, strict
loading of config dataclasses. The lowest layer: it imports nothing of the project."""
