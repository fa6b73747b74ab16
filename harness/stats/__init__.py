"""Statistics of records: summaries of one process's steps (``steps``), a cell's record from its
processes (``cells``), and verdicts between cells and between runs (``verdicts``).

Depends on numpy/scipy and the records only: running and reporting import it, never the reverse.
"""
