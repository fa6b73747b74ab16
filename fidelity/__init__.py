"""Idiomatic training scripts, one per framework and mode: the shortest loop each framework's
documentation teaches for the ``mlp`` workload. ``python -m harness fidelity`` runs each beside
the adapters named in its ``ADAPTERS`` and reports adapter / script time ratios (the adapter
should cost what the framework costs, not more)."""
