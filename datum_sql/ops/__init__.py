"""Operations on a ``state_dir`` while no query needs to run: ``datum-sql status`` (what each
query saved: :mod:`.status`) and ``datum-sql reset`` (move a saved position: :mod:`.reset`).

They read the layout the Context writes (``engine/runtime/layout.py``) and the checkpoints'
manifests, which record what each query is (its SQL and tables), so nothing is planned or
started. :mod:`.render` prints both for a terminal.
"""
