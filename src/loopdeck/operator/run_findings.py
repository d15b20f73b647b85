"""What the run noticed that its operator must see, folded from its events for the Findings
panel (`RunFindings`): the changes of the workspace no approved call explains, each round's
review verdict with its reasons, and the findings a kind's own loop made (`Finding`), in the
order they came. The transcript's entries of the first and last are worded here too, so each
is said one way wherever it is shown."""

from __future__ import annotations

from dataclasses import dataclass, field

from loopdeck.core.events import Finding, ReviewVerdict, UnrequestedChange
from loopdeck.core.text import visible


@dataclass
class RoundVerdict:
    round: int
    verdict: str
    reasons: list[str]


@dataclass
class RunFindings:
    # Changes of the workspace no approved call explains, each said in a line.
    unrequested: list[str] = field(default_factory=list)
    # The review's verdicts and the kind's findings, as they came.
    found: list[RoundVerdict | Finding] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.unrequested or self.found)

    @property
    def verdicts(self) -> list[RoundVerdict]:
        return [said for said in self.found if isinstance(said, RoundVerdict)]

    def take(self, e: ReviewVerdict | UnrequestedChange | Finding) -> None:
        match e:
            case UnrequestedChange():
                self.unrequested.append(unrequested_words(e))
            case ReviewVerdict():
                self.found.append(RoundVerdict(e.round, e.verdict, list(e.reasons)))
            case Finding() if not self._in_verdict(e):
                self.found.append(e)

    def _in_verdict(self, e: Finding) -> bool:
        """The round's verdict says it already (the operator's word that a goal is met is
        both the verdict's reason and a finding): said once."""
        return any(
            isinstance(said, RoundVerdict) and said.round == e.round and e.text in said.reasons
            for said in self.found
        )


def unrequested_words(e: UnrequestedChange) -> str:
    paths = (("added", e.added), ("changed", e.changed), ("removed", e.removed))
    said = "; ".join(f"{word} {', '.join(named)}" for word, named in paths if named)
    end = " — stopped the run" if e.stops else " — recorded (--approve auto)"
    return visible(f"unrequested change after {e.after}: {said}{end}")


def unrequested_entry(e: UnrequestedChange) -> tuple[str, str, str]:
    return "note", unrequested_words(e), "no approved call explains this change"


def finding_entry(e: Finding) -> tuple[str, str, str]:
    """The transcript's entry: the finding whole, under its round."""
    return "finding", f"finding · round {e.round}", e.text
