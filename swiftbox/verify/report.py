"""The verify report: one row per check (section, name, verdict, detail), printed as one table."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Check:
    section: str          # files | engine | parity
    name: str             # what was checked, e.g. "merged: tokenizer" or "base+adapter -> merged"
    status: str           # ok | FAIL | skip
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"

    def line(self) -> str:
        return f"{self.section}: {self.name}: {self.detail}"


@dataclass
class Report:
    artifact: str
    engine: str
    checks: list[Check] = field(default_factory=list)

    def add(self, section: str, name: str, ok: bool | None, detail: str = "") -> Check:
        check = Check(section, name, "skip" if ok is None else ("ok" if ok else "FAIL"), detail)
        self.checks.append(check)
        return check

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.failed]

    @property
    def ok(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict:
        return {"artifact": self.artifact, "engine": self.engine, "ok": self.ok,
                "checks": [c.__dict__ for c in self.checks], "failures": [c.line() for c in self.failures]}


def print_table(report: Report) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"verify {report.artifact} (engine {report.engine})")
    for col in ("section", "check", "verdict", "detail"):
        table.add_column(col, overflow="fold")
    for c in report.checks:
        style = {"FAIL": "bold red", "ok": "green", "skip": "yellow"}[c.status]
        table.add_row(c.section, c.name, f"[{style}]{c.status}[/{style}]", c.detail)
    console = Console()
    console.print(table)
    for c in report.failures:  # one line each, naming what is wrong (never wrapped at the terminal's width)
        console.print(f"FAIL {c.line()}", markup=False, highlight=False, soft_wrap=True)
    console.print("verdict: " + ("ok" if report.ok else f"{len(report.failures)} check(s) failed"))
