"""A test-only Keras adapter whose backend computes a different model: keras-torch with its
learning rate 5% high. Loaded through ``DLCOMPARE_EXTRA_ADAPTERS=tests.fault_keras``; the
backend-parity check of a model file (harness.checks.backends) must fail it and it alone."""

from __future__ import annotations

from adapters.keras_torch import KerasTorch


class KerasWrongLearningRate(KerasTorch):
    name = "fault-keras-lr"

    def setup(self, spec, params, device, options):
        super().setup(spec, params, device, options)
        self.model.optimizer.learning_rate = spec.learning_rate * 1.05
