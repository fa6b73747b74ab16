"""Checks that numbers mean something: conformance to the reference, fidelity to idiomatic code,
and each framework's installed build (doctor)."""
