"""Which checkpoint a restarted query resumes from, given what its sinks still hold.

The store hands over the newest checkpoint whose manifest and state files are intact. Before
anything is restored or published, every sink checks the files that checkpoint staged
against the checksums in the manifest. A damaged (or vanished) staged file means rows of
that checkpoint cannot be published. Resuming from the checkpoint before it instead is
exactly-once only if *none* of the newer checkpoint's output is visible yet: its rows are
then produced again from the older positions, and nothing is published twice. If some of
it is already published, no checkpoint can be resumed without losing or duplicating rows,
and recovery fails naming the damaged file.
"""

from __future__ import annotations

from dataclasses import replace

from datum_sql.connectors.base import Sink, StagedCheck
from datum_sql.engine.runtime.checkpoint import CheckpointStore, Recovered
from datum_sql.errors import CheckpointError, DatumError


async def resume_point(
    store: CheckpointStore, recovered: Recovered, sinks: dict[str, Sink]
) -> Recovered:
    """``recovered``, or the newest older checkpoint whose staged output is intact."""
    while True:
        manifest = recovered.manifest
        cid = manifest.checkpoint_id
        checks = [
            await _verify(sink, cid, manifest.staged[sid])
            for sid, sink in sinks.items()
            if manifest.staged.get(sid)
        ]
        damaged = [message for check in checks for message in check.damaged]
        if not damaged:
            return recovered
        if any(check.published for check in checks):
            raise CheckpointError(
                f"checkpoint {cid} cannot be recovered: {damaged[0]}; part of its output is "
                "already published, so resuming from it or an earlier checkpoint would lose or "
                "duplicate rows. Restore the file, or start over with fresh=True (CLI: --fresh)"
            )
        reason = f"checkpoint {cid}: {'; '.join(damaged)} (nothing of it was published)"
        try:
            older = store.latest(before=cid)
        except CheckpointError as exc:
            raise CheckpointError(f"{reason}; {exc}") from exc
        if older is None:
            raise CheckpointError(f"no intact checkpoint to recover from: {reason}")
        recovered = replace(older, skipped=[*recovered.skipped, reason, *older.skipped])


async def _verify(sink: Sink, checkpoint_id: int, staged: dict[str, object]) -> StagedCheck:
    try:
        return await sink.verify_staged(checkpoint_id, staged)
    except DatumError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {checkpoint_id}: cannot check the staged output of sink "
            f"{sink.name!r}: {exc}"
        ) from exc
