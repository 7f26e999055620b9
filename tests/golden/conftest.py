import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_collection_modifyitems(items: list) -> None:
    """A property test runs up to a few hundred examples, each a streaming query, a batch
    query and DuckDB: on a loaded two-core machine that can pass the suite's 120 s hang
    guard without hanging, so golden tests get a wider guard of their own."""
    import pytest

    for item in items:
        if "golden" in item.nodeid.split("::")[0] and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(600))
