"""Crash points for recovery tests: ``DATUM_CRASH_AT=<point>:<n>`` kills the process
(``os._exit``, no cleanup, like SIGKILL) the n-th time the runtime reaches ``point``.

Points: ``before_manifest`` (sinks pre-committed, checkpoint not yet published),
``after_manifest`` (published, sinks not yet committed), ``mid_sink_commit`` (after the
first sink committed). Unset, this costs one dictionary lookup per checkpoint.
"""

from __future__ import annotations

import os

_counts: dict[str, int] = {}


def crash_point(point: str) -> None:
    spec = os.environ.get("DATUM_CRASH_AT")
    if not spec:
        return
    name, _, nth = spec.partition(":")
    if name != point:
        return
    _counts[point] = _counts.get(point, 0) + 1
    if _counts[point] >= int(nth or 1):
        os._exit(86)
