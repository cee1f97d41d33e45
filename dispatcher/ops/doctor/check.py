"""One row of doctor's table: a function that answers one question, named by the finding code it
reports; the code's level(s) and fix are declared once in ``dispatcher.core.findings.CODES``
(the table the status line and ``top`` read too)."""

from collections.abc import Callable
from dataclasses import dataclass

from dispatcher.core.findings import CODES, Code, Finding
from dispatcher.ops.doctor.context import Context

ALWAYS, CONFIG, STORE = "always", "config", "store"


@dataclass(frozen=True)
class Check:
    """A check: ``run`` reports findings of ``code`` only, once what it ``needs`` is there
    (CONFIG: a valid config.json; STORE: a readable store of the current schema). The findings of
    consecutive rows of one ``group`` (one question per outcome, e.g. each agent's CLI) are shown
    agent by agent."""

    run: Callable[[Context], list[Finding]]
    code: Code
    needs: str = ALWAYS
    group: str = ""

    def __call__(self, ctx: Context) -> list[Finding]:
        return self.run(ctx)

    @property
    def name(self) -> str:
        return self.code.name


def check(needs: str = ALWAYS, group: str = "") -> Callable[[Callable[[Context], list[Finding]]], Check]:
    """Make a function a row of the table: its name is the code it reports (declared in ``CODES``)."""

    def row(run: Callable[[Context], list[Finding]]) -> Check:
        if run.__name__ not in CODES:
            raise ValueError(f"check {run.__name__} is not named by a finding code declared in CODES")
        return Check(run, CODES[run.__name__], needs, group)

    return row
