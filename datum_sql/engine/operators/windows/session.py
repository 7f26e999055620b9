"""Session window aggregation (kind ``session_aggregate``; ``window_aggregate`` with
``window.kind = "session"`` builds this too). ``window.size_us`` is the gap.

State: one slot per open session — its key id (a
:class:`~datum_sql.engine.state.keys.KeyIndex` on the group keys), first and last event
time, and the partial of every aggregate. A session is the window
``[first, last + gap)``.

On a batch (vectorized, see :mod:`.assign`):

1. rows are cut into *runs* (same key, sorted by time, less than ``gap`` apart) and one
   Arrow hash group-by gives a partial per run;
2. the runs and the open sessions of the same keys are merged as intervals
   ``[first, last + gap)``: overlapping ones form one session (a run may start a
   session, extend one, or bridge several);
3. each affected session's partial is the reduce of its members' partials; it is written
   to its earliest old member's slot (or a new slot); the other old members are dropped.

With ``emit = "changelog"``: a new session is ``+I``; a session that absorbed rows but kept
its bounds is ``-U``/``+U`` (nothing when its values did not change); a session whose
bounds moved or that merged others is ``-D`` for every old row and ``+I`` for the new one.

On a watermark ``wm``: sessions with ``last + gap + allowed_lateness <= wm`` are complete:
emitted with ``emit = "window_close"`` (by end, then slot), dropped in both modes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.engine.changelog import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE
from datum_sql.engine.operators.base import register
from datum_sql.engine.operators.windows import assign
from datum_sql.engine.operators.windows.aggregate import WindowedAggregate
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.engine.state.keys import KeyIndex
from datum_sql.engine.state.slots import SlotColumn
from datum_sql.errors import PlanError
from datum_sql.types import END_OF_TIME, START_OF_TIME

_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min


@register("session_aggregate")
class SessionAggregate(WindowedAggregate):
    """GROUP BY window_start, window_end, keys over session(t, ts, gap)."""

    KIND = "session_aggregate"
    STATE_VERSION = 1

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        if self._kind != "session":
            raise PlanError(f"{name}: session_aggregate needs window kind 'session'")
        self._gap = self._size
        self._kidx = KeyIndex(self._key_types)
        self._kid = SlotColumn(pa.int64())
        self._first = SlotColumn(pa.int64())
        self._last = SlotColumn(pa.int64())
        self._n = 0

    def _state_rows(self) -> int:
        return self._n + self._aggs.extra_rows()

    def _lead(self, slots: np.ndarray) -> list[pa.Array]:
        first = self._first.values[slots]
        end = self._last.values[slots] + self._gap
        keys = self._kidx.keys(self._kid.values[slots])
        return [self._time_array(first), self._time_array(end), *keys]

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        table, t = self._times(pa.Table.from_batches([batch]))
        n = table.num_rows
        if n == 0:
            return []
        gap = self._gap
        groups = self._group_columns(table)
        key_cols = list(groups.values()) or [pa.array(np.zeros(n, np.int8))]
        kid_rows, _ = self._kidx.slots(key_cols)

        # 1. runs of this batch and their partials
        run, order = assign.session_runs(kid_rows, t, gap)
        rs = run[order]
        head = np.ones(n, np.bool_)
        head[1:] = rs[1:] != rs[:-1]
        tail = np.ones(n, np.bool_)
        tail[:-1] = head[1:]
        r_kid, r_first, r_last = kid_rows[order][head], t[order][head], t[order][tail]
        n_runs = len(r_kid)
        order_t = t if self._order_column == self._time_column else self._order_times(table)
        keys, rparts = self._aggs.batch_partials(
            table, {"__r": pa.array(run, pa.int64())}, order_t, self._seq
        )
        self._seq += n
        by_run = np.empty(n_runs, np.int64)
        by_run[np.asarray(keys[0])] = np.arange(n_runs)
        rparts = self._aggs.take(rparts, by_run)

        # 2. merge runs with the open sessions of the same keys
        s_n = self._n
        touched = np.zeros(self._kidx.n_slots, np.bool_)
        touched[r_kid] = True
        old = np.flatnonzero(touched[self._kid.values[:s_n]])
        o_first, o_last = self._first.values[old], self._last.values[old]
        gid = assign.merge_intervals(
            np.concatenate([self._kid.values[old], r_kid]),
            np.concatenate([o_first, r_first]),
            np.concatenate([o_last, r_last]) + gap,
        )
        n_old = len(old)
        o_gid, r_gid = gid[:n_old], gid[n_old:]
        affected = np.zeros(int(gid.max()) + 1, np.bool_)
        affected[r_gid] = True
        member = affected[o_gid]
        om, om_first, om_last = old[member], o_first[member], o_last[member]
        groups_ = np.flatnonzero(affected)
        n_aff = len(groups_)
        dense = np.full(len(affected), -1, np.int64)
        dense[groups_] = np.arange(n_aff)
        og, rg = dense[o_gid[member]], dense[r_gid]

        # 3. one slot per affected session: its earliest old member, or a new one
        target = np.full(n_aff, -1, np.int64)
        if len(om):
            o = np.lexsort((om_first, og))
            g_sorted = og[o]
            head_ = np.ones(len(o), np.bool_)
            head_[1:] = g_sorted[1:] != g_sorted[:-1]
            target[g_sorted[head_]] = om[o][head_]  # the earliest old member
        fresh = np.flatnonzero(target < 0)
        target[fresh] = s_n + np.arange(len(fresh))
        m_first = np.full(n_aff, _I64_MAX, np.int64)
        m_last = np.full(n_aff, _I64_MIN, np.int64)
        np.minimum.at(m_first, rg, r_first)
        np.maximum.at(m_last, rg, r_last)
        np.minimum.at(m_first, og, om_first)
        np.maximum.at(m_last, og, om_last)
        g_kid = np.empty(n_aff, np.int64)
        g_kid[rg] = r_kid

        emit = self._changelog_mode
        if emit and len(om):
            before_vals = self._aggs.finals(om)
            before_lead = self._lead(om)
        parts = self._aggs.concat([self._aggs.gather(om), rparts]) if len(om) else rparts
        reduced = self._aggs.reduce(parts, np.concatenate([og, rg]), n_aff)

        total = s_n + len(fresh)
        for col in (self._kid, self._first, self._last):
            col.grow(total)
        self._aggs.grow(total)
        self._n = total
        for col, values in ((self._kid, g_kid), (self._first, m_first), (self._last, m_last)):
            col.values[target] = values
            col.valid[target] = True
        self._aggs.set(target, reduced)

        out: list[pa.RecordBatch] = []
        if emit:
            out = self._session_changelog(
                target, og, om, om_first, om_last, m_first, m_last,
                before_vals if len(om) else [], before_lead if len(om) else [],
            )  # fmt: skip
        dropped = np.setdiff1d(om, target, assume_unique=True)
        if len(dropped):
            keep = np.ones(total, np.bool_)
            keep[dropped] = False
            self._compact(np.flatnonzero(keep))
        self._check_limit()
        return out

    def _session_changelog(
        self,
        target: np.ndarray,
        og: np.ndarray,
        om: np.ndarray,
        om_first: np.ndarray,
        om_last: np.ndarray,
        m_first: np.ndarray,
        m_last: np.ndarray,
        before_vals: list[pa.Array],
        before_lead: list[pa.Array],
    ) -> list[pa.RecordBatch]:
        n_aff = len(target)
        n_members = np.bincount(og, minlength=n_aff)
        after_vals = self._aggs.finals(target)
        after_lead = self._lead(target)
        # an in-place update: one old member whose bounds did not move
        same = (om_first == m_first[og]) & (om_last == m_last[og])
        update = np.zeros(n_aff, np.bool_)
        update[og[same]] = n_members[og[same]] == 1
        changed = np.ones(n_aff, np.bool_)
        if update.any():
            u = np.flatnonzero(update[og])  # members that are in-place updates
            after_u = [a.take(pa.array(og[u])) for a in after_vals]
            before_u = [b.take(pa.array(u)) for b in before_vals]
            changed[og[u]] = self._aggs.changed(before_u, after_u)
        # before rows: every old member, except unchanged in-place updates
        b_rows = np.flatnonzero(~update[og] | changed[og])
        b_ops = np.where(update[og[b_rows]], UPDATE_BEFORE, DELETE)
        a_rows = np.flatnonzero(~update | changed)
        a_ops = np.where(update[a_rows], UPDATE_AFTER, INSERT)
        if len(b_rows) + len(a_rows) == 0:
            return []
        bi, ai = pa.array(b_rows, pa.int64()), pa.array(a_rows, pa.int64())
        cols = []
        for b, a in zip(
            [*before_lead, *before_vals] or [x.slice(0, 0) for x in [*after_lead, *after_vals]],
            [*after_lead, *after_vals],
        ):
            cols.append(pa.concat_arrays([b.take(bi).cast(a.type), a.take(ai)]))
        ops = pa.array(np.concatenate([b_ops, a_ops]).astype(object), pa.string())
        rank = np.lexsort(
            (
                np.concatenate([np.zeros(len(b_rows)), np.ones(len(a_rows))]),
                np.concatenate([og[b_rows], a_rows]),
            )
        )
        return [self._batch(cols, ops).take(pa.array(rank))]

    def _compact(self, keep: np.ndarray) -> None:
        remap = np.full(self._n, -1, np.int64)
        remap[keep] = np.arange(len(keep))
        for col in (self._kid, self._first, self._last):
            col.compact(keep)
        self._aggs.compact(keep, remap)
        self._n = len(keep)
        live_keys = self._kidx.n_slots
        if live_keys > 2 * self._n + 1024:  # forget keys without an open session
            kids = np.unique(self._kid.values[: self._n])
            kremap = self._kidx.compact(kids)
            self._kid.values[: self._n] = kremap[self._kid.values[: self._n]]

    def _close(self, threshold: int) -> list[pa.RecordBatch]:
        n = self._n
        if n == 0:
            return []
        last = self._last.values[:n]
        if threshold >= END_OF_TIME:
            done = np.ones(n, np.bool_)
        elif threshold - self._gap < START_OF_TIME:
            return []
        else:
            done = last <= threshold - self._gap
        if not done.any():
            return []
        closed = np.flatnonzero(done)
        out: list[pa.RecordBatch] = []
        if not self._changelog_mode:
            closed = closed[np.argsort(last[closed], kind="stable")]
            out.append(self._batch([*self._lead(closed), *self._aggs.finals(closed)], None))
        self._compact(np.flatnonzero(~done))
        return out

    # -- checkpoints and status -------------------------------------------------------
    def snapshot(self) -> bytes | None:
        n = self._n
        key_cols = {f"key{j}": c for j, c in enumerate(self._kidx.key_columns())}
        keys = pa.table(key_cols) if key_cols else pa.table({"_": pa.nulls(self._kidx.n_slots)})
        cols = {
            "kid": self._kid.to_arrow(),
            "first": self._first.to_arrow(),
            "last": self._last.to_arrow(),
            **self._aggs.state_columns(),
        }
        meta = {"seq": self._seq, "n": n, "n_keys": self._kidx.n_slots, "watermark": self._wm}
        tables = {"keys": keys, "slots": pa.table(cols), **self._aggs.extra_tables()}
        return encode_state(self.KIND, self.STATE_VERSION, meta, tables)

    def restore(self, data: bytes) -> None:
        meta, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        keys, slots = tables["keys"], tables["slots"]
        self._kidx.load(
            [keys.column(f"key{j}").combine_chunks() for j in range(len(self._key_types))],
            int(meta["n_keys"]),
        )
        for name, col in (("kid", self._kid), ("first", self._first), ("last", self._last)):
            col.load(slots.column(name))
        self._n = int(meta["n"])
        self._aggs.load(slots, tables, self._n)
        self._seq = int(meta["seq"])
        self._wm = int(meta["watermark"])

    def state_size(self) -> tuple[int, int]:
        size = self._kidx.nbytes + self._aggs.nbytes
        size += self._kid.nbytes + self._first.nbytes + self._last.nbytes
        return self._state_rows(), size

    def describe(self) -> dict[str, Any]:
        n = self._n
        oldest = int(self._last.values[:n].min()) + self._gap if n else None
        return {
            "open_windows": n,
            "oldest_open_window_end": self._iso(oldest),
            "closes_at_watermark": None if oldest is None else self._iso(oldest + self._lateness),
        }
