"""Problems found in the YAML files, reported all at once with file:line."""
from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    entry: str
    field: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: {self.entry}"
        if self.field:
            where += f": field '{self.field}'"
        text = f"{where}: {self.message}"
        if self.fix:
            text += f"\n    fix: {self.fix}"
        return text


class CodegenError(Exception):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(f"{count} in the operator YAML:\n" + "\n".join(str(p) for p in problems))


class Problems:
    """Collects problems so one run reports every mistake in a file."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, file: str, line: int, entry: str, field: str, message: str, fix: str) -> None:
        """Every problem says how to fix it: `fix` is required (and not empty)."""
        assert fix, f"a problem without a fix: {message}"
        self.items.append(Problem(file, line, entry, field, message, fix))

    def raise_if_any(self) -> None:
        if self.items:
            raise CodegenError(self.items)


def did_you_mean(word, choices) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f"did you mean '{close[0]}'?" if close else ""
