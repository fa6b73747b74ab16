"""Reporting: from records to what people read (report.md and its plots, comparisons).

``report`` assembles a run's page from the sections of the other modules; ``summary`` writes
its plain sentences; ``compare`` sets two runs side by side.
"""
