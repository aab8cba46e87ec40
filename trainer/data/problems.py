"""What a conversion had to repair or skip, counted exactly but kept as examples only up to a
bound per reason while it runs: a million alike (10^6 annotations of unknown images once
made a 228 MB report) stay a small list in memory, in the workers' answers and in the
report."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Hashable, Iterable, Sequence

MAX_LISTED_PER_REASON = 100
# What a conversion did about a problem: an image left out for its defect; a second copy of
# an image left out (the first is converted); converted after a repair; converted as it is,
# with something worth a look (names that differ only in case, sparse class ids)
ACTIONS = ("skipped", "dropped", "repaired", "flagged")


@dataclasses.dataclass(frozen=True)
class Problem:
    reason: str
    action: str  # one of ACTIONS
    detail: str


def _same(where: Hashable, problem: Problem) -> tuple[Hashable, Problem]:
    return where, problem


class ProblemLog:
    """Problems by action and reason: every one counted, the first `limit` of each reason
    kept with where it was found (an entry, an example), in the order they came."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_LISTED_PER_REASON if limit is None else limit
        self.counts: dict[str, collections.Counter[str]] = {
            action: collections.Counter() for action in ACTIONS}
        self.listed: list[tuple[Hashable, Problem]] = []
        self._kept: collections.Counter[tuple[str, str]] = collections.Counter()

    @classmethod
    def of(cls, found: Iterable[tuple[Hashable, Problem]]) -> ProblemLog:
        log = cls()
        for where, problem in found:
            log.add(where, problem)
        return log

    def add(self, where: Hashable, problem: Problem) -> None:
        self.counts[problem.action][problem.reason] += 1
        self._keep(where, problem)

    def extend(self, logs: Sequence[ProblemLog], order: Callable | None = None,
               relabel: Callable[[Hashable, Problem], tuple[Hashable, Problem]] = _same
               ) -> None:
        """Adds the problems of `logs` after these: every count, and their examples while
        there is room, `relabel`led. Logs that interleave (the shards of one split) are
        merged in `order` of where their examples were found: each log holds the first of
        each reason, so the first of the merge are among them."""
        for log in logs:
            for action, counts in log.counts.items():
                self.counts[action].update(counts)
        listed = [entry for log in logs for entry in log.listed]
        for where, problem in sorted(listed, key=lambda e: order(e[0])) if order else listed:
            self._keep(*relabel(where, problem))

    def _keep(self, where: Hashable, problem: Problem) -> None:
        key = (problem.action, problem.reason)
        if self._kept[key] < self.limit:
            self._kept[key] += 1
            self.listed.append((where, problem))

    def __len__(self) -> int:
        return sum(sum(counts.values()) for counts in self.counts.values())

    def reasons(self) -> set[str]:
        return {reason for counts in self.counts.values() for reason in counts}
