"""The rest of the Nexmark suite that datum-sql streams, as its golden tests define it
(``tests/golden/test_nexmark_golden.py``: RisingWave's query texts), beside DuckDB.

Events are the rows of every input. The texts are the golden tests' (``tests/benchmarks``
checks they agree) over the same table names: the bids are table ``bid``, with the five
columns of ``spec.bid`` or, where a query needs ``url`` or ``extra``, every column; the
joins read the streams in Nexmark's proportions, generated together, so every reference
exists: q3 and q8 one person per 3 auctions, q4, q9 and q20 46 bids per 3 auctions. q3 and q20 join a
bounded table: datum-sql runs them as lookup joins (the right input read whole first). The
updating queries (q4, q11, q15 to q19) are materialized as their final state. q14 calls
the Python UDF ``count_char``, which its datum-sql run registers. DuckDB only:
polars has no say in these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchmarks.spec import Benchmark, Input, bid

if TYPE_CHECKING:
    import pyarrow as pa

DISTINCT_COUNTS = (
    "count(*) AS total_bids, "
    "count(*) FILTER (WHERE price < 10000) AS rank1_bids, "
    "count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, "
    "count(*) FILTER (WHERE price >= 1000000) AS rank3_bids, "
    "count(DISTINCT bidder) AS total_bidders, "
    "count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders, "
    "count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders, "
    "count(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders, "
    "count(DISTINCT auction) AS total_auctions, "
    "count(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions, "
    "count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions, "
    "count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions"
)
Q17_AGGREGATES = (
    "count(*) AS total_bids, count(*) FILTER (WHERE price < 10000) AS rank1_bids, "
    "count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, "
    "count(*) FILTER (WHERE price >= 1000000) AS rank3_bids, "
    "min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price"
)
CHANNEL_ID = "'(&|^)channel_id=([^&]*)'"
HOT = "lower(channel) IN ('apple', 'google', 'facebook', 'baidu')"
CHANNEL_CASE = (
    "CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1' "
    "WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3' "
)
Q3 = (
    "SELECT P.name, P.city, P.state, A.id FROM auction AS A "
    "INNER JOIN person AS P ON A.seller = P.id "
    "WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')"
)
Q20 = (
    "SELECT auction, bidder, price, channel, url, B.date_time AS bid_date_time, "
    "item_name, description, initial_bid, reserve, A.date_time AS auction_date_time, "
    "expires, seller, category "
    "FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id WHERE A.category = 10"
)
Q18 = (
    "SELECT auction, bidder, price, channel, url, date_time, extra FROM (SELECT *, "
    "ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC, extra) "
    "AS rank_number FROM bid) t WHERE rank_number <= 1"
)
Q19 = (
    "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction "
    "ORDER BY price DESC, date_time) AS rank_number FROM bid) t WHERE rank_number <= 10"
)
Q7 = (
    "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN ("
    "SELECT max(price) AS maxprice, window_end AS date_time "
    "FROM tumble(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_end) B1 "
    "ON B.price = B1.maxprice "
    "WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time"
)
TUMBLE_START = "make_timestamp((epoch_us(date_time) // 10000000) * 10000000)"
TUMBLE_END = "make_timestamp((epoch_us(date_time) // 10000000 + 1) * 10000000)"
Q7_DUCKDB = (
    "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN ("
    f"SELECT max(price) AS maxprice, {TUMBLE_END} AS date_time FROM bid GROUP BY 2) B1 "
    "ON B.price = B1.maxprice "
    "WHERE B.date_time BETWEEN B1.date_time - INTERVAL 10 SECOND AND B1.date_time"
)
Q8 = (
    "SELECT P.id, P.name, P.starttime FROM ("
    "SELECT id, name, window_start AS starttime, window_end AS endtime "
    "FROM tumble(person, date_time, INTERVAL '10' SECOND) "
    "GROUP BY id, name, window_start, window_end) P JOIN ("
    "SELECT seller, window_start AS starttime, window_end AS endtime "
    "FROM tumble(auction, date_time, INTERVAL '10' SECOND) "
    "GROUP BY seller, window_start, window_end) A "
    "ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime"
)
Q8_DUCKDB = (
    "SELECT P.id, P.name, P.starttime FROM ("
    f"SELECT id, name, {TUMBLE_START} AS starttime, {TUMBLE_END} AS endtime "
    "FROM person GROUP BY ALL) P JOIN ("
    f"SELECT seller, {TUMBLE_START} AS starttime, {TUMBLE_END} AS endtime "
    "FROM auction GROUP BY ALL) A "
    "ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime"
)
Q4 = (
    "SELECT Q.category, avg(Q.final) AS avg FROM (SELECT max(B.price) AS final, A.category "
    "FROM auction A, bid B WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND "
    "A.expires GROUP BY A.id, A.category) Q GROUP BY Q.category"
)
Q6 = (
    "SELECT Q.seller, avg(Q.final) OVER (PARTITION BY Q.seller ORDER BY Q.date_time ROWS "
    "BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg FROM (SELECT ROW_NUMBER() OVER (PARTITION BY "
    "A.id, A.seller ORDER BY B.price, B.date_time) AS rank, A.seller, B.price AS final, "
    "B.date_time FROM auction AS A, bid AS B WHERE A.id = B.auction AND B.date_time BETWEEN "
    "A.date_time AND A.expires) AS Q WHERE Q.rank <= 1"
)
Q9 = (
    "SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, "
    "category, auction, bidder, price, bid_date_time FROM (SELECT A.*, B.auction, B.bidder, "
    "B.price, B.date_time AS bid_date_time, ROW_NUMBER() OVER (PARTITION BY A.id "
    "ORDER BY B.price DESC, B.date_time ASC) AS rownum FROM auction A, bid B "
    "WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires) tmp "
    "WHERE rownum <= 1"
)
Q22 = (
    "SELECT auction, bidder, price, channel, split_part(url, '/', 4) AS dir1, "
    "split_part(url, '/', 5) AS dir2, split_part(url, '/', 6) AS dir3 FROM bid"
)

Q14 = (
    "SELECT auction, bidder, 0.908 * price AS price, CASE WHEN extract(hour FROM "
    "date_time) >= 8 AND extract(hour FROM date_time) <= 18 THEN 'dayTime' WHEN "
    "extract(hour FROM date_time) <= 6 OR extract(hour FROM date_time) >= 20 THEN "
    "'nightTime' ELSE 'otherTime' END AS bidTimeType, date_time, count_char(extra, 'c') "
    "AS c_counts FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000"
)
Q14_DUCKDB = (
    "SELECT auction, bidder, 0.908::DOUBLE * price AS price, CASE WHEN extract(hour FROM "
    "date_time) >= 8 AND extract(hour FROM date_time) <= 18 THEN 'dayTime' WHEN "
    "extract(hour FROM date_time) <= 6 OR extract(hour FROM date_time) >= 20 THEN "
    "'nightTime' ELSE 'otherTime' END AS bidtimetype, date_time, length(extra) - "
    "length(replace(extra, 'c', '')) AS c_counts FROM bid WHERE 0.908::DOUBLE * price > "
    "1000000 AND 0.908::DOUBLE * price < 50000000"
)


def count_char(s: pa.Array, c: pa.Array) -> pa.Array:
    """q14's ``count_char(s, c)``: how many times each ``c`` occurs in ``s`` (pyarrow imported
    here: the orchestrating process, whose RSS a child inherits, imports no engine)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = pa.nulls(len(s), pa.int64())
    for char in pc.unique(c).drop_null().to_pylist():
        counted = pc.count_substring(s, char).cast(pa.int64())
        out = pc.if_else(pc.equal(c, char), counted, out)
    return out


def prepare_with_count_char(bench: Benchmark, events: int, params: dict[str, Any]) -> Any:
    """datum-sql's run of q14, with ``count_char`` registered first (in the child process
    that runs it: the harness's own process never loads datum-sql)."""
    import datum_sql as ds
    from benchmarks.engines import prepare_datum

    ds.udf(input_types=["VARCHAR", "VARCHAR"], return_type="BIGINT")(count_char)
    return prepare_datum(bench, events, params)


def full_bids(events: int) -> dict[str, Input]:
    """``events`` bids with every column (``url``, ``extra``), watermark 1 s behind."""
    return {"bid": Input("bid_full", events, event_time="date_time", watermark_ms=1000)}


def persons_auctions(events: int) -> dict[str, Input]:
    """One person per three auctions (Nexmark's proportions), every column."""
    persons = events // 4
    return {
        "person": Input("person_full", persons, event_time="date_time"),
        "auction": Input("auction_full", 3 * persons, event_time="date_time"),
    }


def bids_auctions(events: int) -> dict[str, Input]:
    """46 bids per three auctions (Nexmark's proportions), every column."""
    epochs = events // 49
    return {
        "bid": Input("bid_full", 46 * epochs, event_time="date_time", watermark_ms=1000),
        "auction": Input("auction_full", 3 * epochs, event_time="date_time"),
    }


DUCKDB_ONLY = {"engines": ("datum-sql", "duckdb")}

BENCHMARKS = [
    Benchmark(
        "q3_person_auction_join", "nexmark",
        "Nexmark q3: sellers in OR, ID, CA of category-10 auctions (auctions joined to persons)",
        persons_auctions, Q3, Q3, **DUCKDB_ONLY,
    ),
    Benchmark(
        "q4_category_average", "nexmark",
        "Nexmark q4: the average final price per category (each auction's highest bid while "
        "it was open, a join bounded by its expires, averaged over that changelog)",
        bids_auctions, Q4, Q4, **DUCKDB_ONLY,
    ),
    Benchmark(
        "q6_avg_selling_price", "nexmark",
        "Nexmark q6: per seller, the average of the first-ranked bid of its current and 10 "
        "preceding auctions (an over-window over an unbounded top-1's changelog)",
        bids_auctions, Q6, Q6, **DUCKDB_ONLY,
    ),
    Benchmark(
        "q7_highest_bid", "nexmark",
        "Nexmark q7: the bids at each 10 s tumbling window's highest price (a window joined "
        "back to its rows)",
        bid, Q7, Q7_DUCKDB, **DUCKDB_ONLY,
    ),
    Benchmark(
        "q8_new_sellers", "nexmark",
        "Nexmark q8: persons who opened an auction in the 10 s window they registered in",
        persons_auctions, Q8, Q8_DUCKDB, **DUCKDB_ONLY,
    ),
    Benchmark(
        "q9_winning_bids", "nexmark",
        "Nexmark q9: each auction's highest bid while it was open (a join bounded by the "
        "auction's expires, then ROW_NUMBER() = 1)",
        bids_auctions, Q9, Q9, **DUCKDB_ONLY,
    ),
    Benchmark(
        "q10_to_char", "nexmark", "Nexmark q10: each bid with its date and 12-hour time as text",
        bid,
        "SELECT auction, bidder, price, date_time, to_char(date_time, 'YYYY-MM-DD') AS date, "
        "to_char(date_time, 'HH:MI') AS time FROM bid",
        "SELECT auction, bidder, price, date_time, strftime(date_time, '%Y-%m-%d') AS date, "
        "strftime(date_time, '%I:%M') AS time FROM bid",
        **DUCKDB_ONLY,
    ),
    Benchmark(
        "q11_session_count", "nexmark",
        "Nexmark q11: bids per bidder and session (10 s gap), a changelog's final state",
        bid,
        "SELECT bidder, count(*) AS bid_count, window_start, window_end "
        "FROM session(bid, date_time, INTERVAL '10' SECOND) "
        "GROUP BY bidder, window_start, window_end",
        "WITH gaps AS (SELECT bidder, date_time, CASE WHEN date_time - lag(date_time) OVER w "
        "< INTERVAL 10 SECOND THEN 0 ELSE 1 END AS new_session FROM bid "
        "WINDOW w AS (PARTITION BY bidder ORDER BY date_time)), "
        "sessions AS (SELECT bidder, date_time, sum(new_session) OVER (PARTITION BY bidder "
        "ORDER BY date_time ROWS UNBOUNDED PRECEDING) AS session FROM gaps) "
        "SELECT bidder, count(*) AS bid_count, min(date_time) AS window_start, "
        "max(date_time) + INTERVAL 10 SECOND AS window_end FROM sessions GROUP BY bidder, session",
        **DUCKDB_ONLY,
    ),
    Benchmark(
        "q14_count_char_udf", "nexmark",
        "Nexmark q14: bids converted, classified by hour, with a Python UDF counting "
        "characters of extra",
        full_bids, Q14, Q14_DUCKDB, **DUCKDB_ONLY,
        runners={"datum-sql": "benchmarks.nexmark_suite:prepare_with_count_char"},
    ),
    Benchmark(
        "q15_daily_distinct", "nexmark",
        "Nexmark q15: bids, bidders and auctions per day, by price rank (count DISTINCT, FILTER)",
        bid,
        f"SELECT to_char(date_time, 'YYYY-MM-DD') AS day, {DISTINCT_COUNTS} FROM bid "
        "GROUP BY to_char(date_time, 'YYYY-MM-DD')",
        f"SELECT strftime(date_time, '%Y-%m-%d') AS day, {DISTINCT_COUNTS} FROM bid "
        "GROUP BY strftime(date_time, '%Y-%m-%d')",
        **DUCKDB_ONLY,
    ),
    Benchmark(
        "q16_channel_daily_distinct", "nexmark",
        "Nexmark q16: q15 per channel and day, with the latest minute",
        bid,
        "SELECT channel, to_char(date_time, 'YYYY-MM-DD') AS day, "
        f"max(to_char(date_time, 'HH24:MI')) AS minute, {DISTINCT_COUNTS} FROM bid "
        "GROUP BY channel, to_char(date_time, 'YYYY-MM-DD')",
        "SELECT channel, strftime(date_time, '%Y-%m-%d') AS day, "
        f"max(strftime(date_time, '%H:%M')) AS minute, {DISTINCT_COUNTS} FROM bid "
        "GROUP BY channel, strftime(date_time, '%Y-%m-%d')",
        **DUCKDB_ONLY,
    ),
    Benchmark(
        "q17_auction_daily_stats", "nexmark",
        "Nexmark q17: per auction and day, counts by price rank and min/max/avg/sum of prices",
        bid,
        f"SELECT auction, to_char(date_time, 'YYYY-MM-DD') AS day, {Q17_AGGREGATES}, "
        "sum(price) AS sum_price FROM bid GROUP BY auction, to_char(date_time, 'YYYY-MM-DD')",
        f"SELECT auction, strftime(date_time, '%Y-%m-%d') AS day, {Q17_AGGREGATES}, "
        "sum(price)::BIGINT AS sum_price FROM bid "
        "GROUP BY auction, strftime(date_time, '%Y-%m-%d')",
        **DUCKDB_ONLY,
    ),
    Benchmark(
        "q18_last_bid", "nexmark",
        "Nexmark q18: the last bid of each bidder on each auction (ROW_NUMBER() = 1)",
        full_bids, Q18, Q18, **DUCKDB_ONLY,
    ),
    Benchmark(
        "q19_top10_bids", "nexmark",
        "Nexmark q19: the 10 highest bids of each auction (ties by time)",
        bid, Q19, Q19, **DUCKDB_ONLY,
    ),
    Benchmark(
        "q20_bid_auction_join", "nexmark",
        "Nexmark q20: bids on category-10 auctions, with the auction's columns",
        bids_auctions, Q20, Q20, **DUCKDB_ONLY,
    ),
    Benchmark(
        "q21_channel_id", "nexmark",
        "Nexmark q21: each bid's channel id, from a CASE or a regular expression on its url",
        full_bids,
        f"SELECT auction, bidder, price, channel, {CHANNEL_CASE}"
        f"ELSE (regexp_match(url, {CHANNEL_ID}))[2] END AS channel_id FROM bid "
        f"WHERE (regexp_match(url, {CHANNEL_ID}))[2] IS NOT NULL OR {HOT}",
        f"SELECT auction, bidder, price, channel, {CHANNEL_CASE}"
        f"WHEN regexp_matches(url, {CHANNEL_ID}) THEN regexp_extract(url, {CHANNEL_ID}, 2) "
        f"END AS channel_id FROM bid WHERE regexp_matches(url, {CHANNEL_ID}) OR {HOT}",
        **DUCKDB_ONLY,
    ),
    Benchmark(
        "q22_url_dirs", "nexmark", "Nexmark q22: the first three directories of each bid's url",
        full_bids, Q22, Q22, **DUCKDB_ONLY,
    ),
]  # fmt: skip

__all__ = ["BENCHMARKS"]
