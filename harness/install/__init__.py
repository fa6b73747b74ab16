"""Installing the frameworks: install variants (``variant``, with the NVIDIA driver query the rest
of the harness uses), their lock files (``lock``) and named environments for version comparisons
(``environments``). Checking the installed builds is harness.checks.doctor.

``variant`` runs before any environment exists and uses the standard library only; this package
imports nothing else of the harness (tests/test_imports_graph.py)."""
