"""Function lengths of the library code (issue 26): ``python -m tests.code_health`` prints
how many functions are over 50 and over 80 lines (decorators excluded, docstrings included)
and lists those over 50."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("foxhunt_pipeline", "assets", "models", "resources")


def function_lengths(root: Path = ROOT) -> list[tuple[int, str]]:
    """(lines, "path:line name") of every function and method, longest first."""
    rows = []
    for package in LIBRARY:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    rows.append((node.end_lineno - node.lineno + 1,
                                 f"{path.relative_to(root)}:{node.lineno} {node.name}"))
    return sorted(rows, reverse=True)


def main() -> None:
    rows = function_lengths()
    print(f"over 80 lines: {sum(n > 80 for n, _ in rows)}, over 50: {sum(n > 50 for n, _ in rows)}"
          f" (of {len(rows)} functions)")
    for n, where in rows:
        if n > 50:
            print(f"{n:4d} {where}")


if __name__ == "__main__":
    main()
