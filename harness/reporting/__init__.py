"""Reporting: from records to what people read (report.md, report.html and their plots, comparisons).

``report`` assembles a run's page from the sections of the other modules: ``overview`` (the
grid that opens it), ``summary`` (its few plain sentences), ``tables``, ``static_dynamic``,
``sweeps``, ``sections``, ``hardware``; ``plots`` draws the PNGs, ``html`` renders the page;
``cells`` and ``breakeven`` hold the record logic they share; ``compare`` sets two runs side by
side and ``fidelity`` sets adapters beside idiomatic scripts.
"""
