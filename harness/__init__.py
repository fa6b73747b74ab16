"""The dlcompare harness: planning, worker processes, timing, records and reports.

Importing it imports no deep-learning framework; only worker processes do.
"""
