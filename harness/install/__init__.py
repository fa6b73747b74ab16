"""Installing the frameworks: install variants (``variant``, with the NVIDIA driver query the rest
of the harness uses, and each variant's environments: one CUDA major each), their lock files
(``lock``, resolved and checked) and the environments make records and named ones for version
comparisons (``environments``). Checking the installed builds is harness.checks.doctor.

``variant`` runs before any environment exists and uses the standard library only; this package
imports nothing else of the harness (tests/test_imports_graph.py)."""
