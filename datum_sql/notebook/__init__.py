"""Notebook experience: rich display, the live view, ``%%sql``, pictures and diagnosis.

A thin layer over :class:`~datum_sql.Context` and :class:`~datum_sql.StreamingQuery`:
it imports them, they never import it; one module per job:

* ``display``          HTML and text renderings of tables, query handles, status, EXPLAIN,
                       and the IPython formatters that use them
* ``live``             ``q.show()``: a view updated in place while the query runs
* ``magic``            ``%load_ext datum_sql`` and the ``%%sql`` magic (safe ``{var}``)
* ``plots``            ``q.plot()`` (matplotlib) and the job graph as SVG (hand-written)
* ``progress_report``  ``q.explain_progress()``: why is nothing coming out?
* ``verify``           ``ctx.verify(sql)``: batch and streaming results agree?
* ``attach``           installs the handle's and the Context's views (datum_sql/extensions.py)

Optional dependencies (IPython, matplotlib) are imported inside the functions that need
them (``datum_sql.optional.require``); a missing one raises an error naming the extra to
install.
"""
