"""Which checkpoint a restarted query resumes from, given what its sinks already published.

Falling back from a damaged checkpoint to the one before it replays the rows between the
two from the older source positions. That is exactly-once only if the damaged checkpoint's
output is not visible yet, or is visible only in sinks that upsert by key (the replayed
changelog overwrites the rows it already wrote). So every checkpoint passed over is
checked, whatever is damaged about it:

- its manifest or a state file (found by the store): its sinks are asked whether any of
  the output it staged is published. A damaged manifest still names what it staged when
  its ``staged`` section matches its own checksum; when it cannot, any sink that appends
  might hold its output, and recovery refuses;
- a staged sink file (found here: every sink checks the files the checkpoint staged
  against the checksums in the manifest, before anything is restored or published).

Where the output is published and a replay would write it twice, recovery fails naming
the damaged file. Rolling the sinks forward instead would not help: the query would still
resume from the older state and positions and produce those rows again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from datum_sql.connectors.base import Sink, StagedCheck
from datum_sql.engine.runtime.checkpoint import CheckpointStore, Recovered, Skipped
from datum_sql.errors import CheckpointError, DatumError

_WHAT_TO_DO = (
    "Restore the damaged file, or empty the sink and start over with fresh=True (CLI: --fresh)"
)


async def resume_point(
    store: CheckpointStore, recovered: Recovered, sinks: dict[str, Sink]
) -> Recovered:
    """``recovered``, or the newest older checkpoint that resumes the query exactly once."""
    await _refuse_republishing(recovered.passed, recovered.manifest.checkpoint_id, sinks)
    while True:
        manifest = recovered.manifest
        cid = manifest.checkpoint_id
        checks = await _verify(sinks, cid, manifest.staged)
        damaged = [message for check in checks.values() for message in check.damaged]
        if not damaged:
            return recovered
        if _republished(checks, sinks):
            raise CheckpointError(
                f"checkpoint {cid} cannot be recovered: {damaged[0]}; part of its output is "
                "already published, so resuming from it or an earlier checkpoint would lose or "
                f"duplicate rows. {_WHAT_TO_DO}"
            )
        published = any(check.published for check in checks.values())
        note = "published only into sinks that upsert" if published else "none of it published"
        skipped = Skipped(cid, f"{'; '.join(damaged)} ({note})", manifest.staged)
        try:
            older = store.latest(before=cid)
        except CheckpointError as exc:
            raise CheckpointError(f"{skipped.reason}; {exc}") from exc
        if older is None:
            raise CheckpointError(f"no intact checkpoint to recover from: {skipped.reason}")
        await _refuse_republishing(older.passed, older.manifest.checkpoint_id, sinks)
        recovered = replace(older, passed=[*recovered.passed, skipped, *older.passed])


async def _refuse_republishing(
    passed: list[Skipped], resume_from: int, sinks: dict[str, Sink]
) -> None:
    """Fail when resuming from ``resume_from`` would write output of a checkpoint it passes
    over a second time."""
    for skipped in passed:
        if skipped.staged is None:
            unknown = [s.name for s in sinks.values() if s.EXACTLY_ONCE and not _upserts(s)]
            if unknown:
                raise CheckpointError(
                    f"cannot resume from checkpoint {resume_from}: {skipped.reason}, so what it "
                    f"published is unknown, and sink {unknown[0]!r} appends: resuming from the "
                    f"older checkpoint may write its rows twice. {_WHAT_TO_DO}"
                )
            continue
        checks = await _verify(sinks, skipped.checkpoint_id, skipped.staged)
        if published := _republished(checks, sinks):
            raise CheckpointError(
                f"cannot resume from checkpoint {resume_from}: {skipped.reason}, and its output "
                f"is already published in sink {published[0]!r}: resuming from the older "
                f"checkpoint would write those rows twice. {_WHAT_TO_DO}"
            )


def _republished(checks: dict[str, StagedCheck], sinks: dict[str, Sink]) -> list[str]:
    """The sinks holding published output that a replay would write a second time."""
    return [
        sinks[sid].name
        for sid, check in checks.items()
        if check.published and not _upserts(sinks[sid])
    ]


def _upserts(sink: Sink) -> bool:
    """A sink that applies a changelog by key ends up right when rows it holds come again."""
    return sink.accepts_changelog


async def _verify(
    sinks: dict[str, Sink], checkpoint_id: int, staged: dict[str, Any]
) -> dict[str, StagedCheck]:
    """Each sink's check of what checkpoint ``checkpoint_id`` staged for it."""
    checks: dict[str, StagedCheck] = {}
    for sid, sink in sinks.items():
        record = staged.get(sid)
        if not record:
            continue
        try:
            checks[sid] = await sink.verify_staged(checkpoint_id, record)
        except DatumError:
            raise
        except Exception as exc:
            raise CheckpointError(
                f"checkpoint {checkpoint_id}: cannot check the staged output of sink "
                f"{sink.name!r}: {exc}"
            ) from exc
    return checks
