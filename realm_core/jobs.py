"""Units of work a stage hands to whatever runs them (Dask workers through Prefect's task
runner) and takes back in order."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from realm_core.errors import ArtifactError


class Numbered(Protocol):
    @property
    def number(self) -> int: ...


J = TypeVar("J", bound=Numbered)


def in_job_order(jobs: Sequence[J], results: Iterable[dict[str, Any]], what: str) -> Iterator[tuple[J, dict[str, Any]]]:
    """(job, result) pairs as the results arrive, checking that each result is its job's (by
    `number`) and that every job came back."""
    count = 0
    for job, result in zip(jobs, results, strict=False):
        if result["number"] != job.number:
            raise ArtifactError(f"{what} came back out of order: {result['number']} where {job.number} belongs")
        count += 1
        yield job, result
    if count != len(jobs):
        raise ArtifactError(f"{count} of {len(jobs)} {what} came back")
