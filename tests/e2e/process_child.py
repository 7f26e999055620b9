"""A datum-sql process for the process-function crash tests: two keyed process functions
into Parquet and DuckDB sinks, run to their end.

Usage: python process_child.py STATE_DIR OUT_DIR INPUT_DIR

``bids``: a paced Nexmark generator (a run takes about a second, long enough to be killed
in), its bidders' quiet spells through ``bidder_idle``. ``orders``: Parquet files of order
events (INPUT_DIR/orders) through the ``order_lifecycle`` state machine. Prints
``started`` once the queries run.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))

from process_handlers import IDLE_DECLARATION, idle_alert_over

import datum_sql as ds

BIDS = (
    "CREATE SOURCE IF NOT EXISTS bids (WATERMARK FOR date_time AS date_time - INTERVAL '10 milliseconds') "
    "WITH (connector = 'nexmark', stream = 'bid', rows = '3000', events_per_second = '2500', "
    "seed = '11', inter_event_us = '200000')"
)
QUERIES = {
    "idle": "SELECT * FROM process(bids, 'bidder_idle', key => bidder)",
    "orders": "SELECT * FROM process(orders, 'order_lifecycle', key => order_id)",
}


def main() -> int:
    state, out, inputs = sys.argv[1:]
    ds.Context(state_dir=None).register_process_function(
        "bidder_idle", idle_alert_over("date_time"), **IDLE_DECLARATION
    )
    ctx = ds.Context(state_dir=state, checkpoint_interval=0.1)
    ctx.execute(BIDS)
    ctx.execute(
        "CREATE SOURCE IF NOT EXISTS orders (WATERMARK FOR ts AS ts - INTERVAL '5 seconds') "
        f"WITH (connector = 'parquet', path = '{inputs}/orders', batch_size = '5')"
    )
    handles = []
    for name, select in QUERIES.items():
        ctx.execute(
            f"CREATE SINK IF NOT EXISTS {name}_parquet WITH (connector = 'parquet', path = '{out}/{name}_parquet')"
        )
        ctx.execute(
            f"CREATE SINK IF NOT EXISTS {name}_duckdb WITH (connector = 'duckdb', path = '{out}/{name}.duckdb', table = 'rows')"
        )
        for kind in ("parquet", "duckdb"):
            handles.append(ctx.execute_streaming(f"INSERT INTO {name}_{kind} {select}"))
    print("started", flush=True)
    for q in handles:
        q.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
