"""The image workloads' input pipeline data (``--data loader``), framework-free.

The spec's images (``mlp``, ``mlp-wide``, ``cnn``) are stored as JPEG bytes, ``STORED_SCALE``
times the network's input size (as photos are stored larger than a network reads them), made
deterministically from ``spec.batches()``: each float image mapped to 8 bits, upscaled
(bicubic) and encoded. Every framework's pipeline runs the same per-sample function,
:meth:`ImageDataset.sample`: decode (Pillow), resize to the input size (bilinear), zero-pad by
``PAD`` pixels, random crop back to the input size, random horizontal flip, normalise to
float32. Its random decisions are a pure function of (seed, epoch, index), so every
framework's pipeline yields the same batches in the same order; labels are the spec's.

Sample order: global sample ``g`` is sample ``g % n`` of epoch ``g // n`` (``n`` samples, no
shuffling); batch ``k`` holds samples ``k * batch_size`` to ``(k + 1) * batch_size - 1``, so
the pipeline's batch ``k`` is the spec's batch ``k % num_batches``, augmented.

:class:`PipelineSettings` are the settings users tune (workers, prefetch depth), swept as
``--sweep workers=0,1,2,4``.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from typing import Any

import numpy as np

from workloads.spec import Batch, SpecError, Workload

#: The stored images are this many times the network's input size in each dimension: the
#: per-sample decode + resize is the pipeline's work, sized so that on a 2-core CPU one
#: process's decoding cannot keep up with the ``cnn`` step (see docs/input-pipelines.md).
STORED_SCALE = 8
JPEG_QUALITY = 90
#: Zero padding before the random crop (the CIFAR recipe: pad 4, crop back).
PAD = 4
MEAN, STD = 0.5, 0.25
#: Families whose inputs are images; the others (rnn) keep the pre-made batch loader.
IMAGE_FAMILIES = ("mlp", "cnn")
#: ``workers`` value standing for tf.data's AUTOTUNE (tf.data.AUTOTUNE is -1 too).
AUTOTUNE = -1


class PipelineSkip(Exception):
    """A pipeline setting this framework's pipeline has no counterpart for; the message says why."""


@dataclasses.dataclass(frozen=True)
class PipelineSettings:
    """What users tune in an input pipeline; every framework maps them onto its own knobs."""

    workers: int = 2
    """Worker processes (threads for tf.data) doing the per-sample work; 0: in the training
    process, on the consuming thread where the framework allows it; -1 (``autotune``): tf.data's
    AUTOTUNE, tf.data only."""
    prefetch: int = 2
    """Prefetch depth: batches buffered ahead (per worker for torch's ``prefetch_factor``)."""

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


#: The settings a sweep or ``--set`` may name, with the smallest valid value of each.
PIPELINE_FIELDS = {"workers": AUTOTUNE, "prefetch": 0}


def parse_setting(key: str, raw: Any) -> int:
    """One pipeline setting's value: an integer >= its minimum; ``autotune`` for workers."""
    if key == "workers" and str(raw).strip().lower() == "autotune":
        return AUTOTUNE
    try:
        number = float(raw)
    except (TypeError, ValueError):
        number = float("nan")
    if not number.is_integer() or number < PIPELINE_FIELDS[key]:
        low = PIPELINE_FIELDS[key]
        extra = " (-1 or autotune: tf.data's AUTOTUNE)" if key == "workers" else ""
        raise SpecError(f"pipeline setting {key}={raw!r}: expected an integer >= {max(low, 0)}{extra}")
    return int(number)


def has_images(spec: Workload) -> bool:
    return spec.family in IMAGE_FAMILIES


@dataclasses.dataclass(frozen=True, eq=False)
class ImageDataset:
    """Encoded images and labels; picklable, so worker processes of any start method get it."""

    encoded: tuple[bytes, ...]
    labels: np.ndarray
    shape: tuple[int, ...]
    """The network's input shape: (H, W) grey or (H, W, C) colour."""
    batch_size: int
    seed: int

    def __len__(self) -> int:
        return len(self.encoded)

    def decisions(self, epoch: int, index: int) -> tuple[int, int, bool]:
        """The crop offsets (dy, dx) into the padded image and the flip, for one sample."""
        rng = np.random.default_rng([self.seed, 5, epoch, index])
        dy, dx = rng.integers(0, 2 * PAD + 1, size=2)
        return int(dy), int(dx), bool(rng.random() < 0.5)

    def sample(self, g: int) -> dict[str, np.ndarray]:
        """Global sample ``g``: decoded, augmented and normalised (``x`` float32, ``y`` int32)."""
        from PIL import Image

        epoch, index = divmod(int(g), len(self))
        h, w = self.shape[:2]
        with Image.open(io.BytesIO(self.encoded[index])) as im:
            pixels = np.asarray(im.resize((w, h), Image.BILINEAR, reducing_gap=None))  # type: ignore[attr-defined]  # set via globals()
        pad = ((PAD, PAD), (PAD, PAD)) + ((0, 0),) * (pixels.ndim - 2)
        dy, dx, flip = self.decisions(epoch, index)
        crop = np.pad(pixels, pad)[dy : dy + h, dx : dx + w]
        if flip:
            crop = crop[:, ::-1]
        x = (crop.astype(np.float32) / np.float32(255) - np.float32(MEAN)) / np.float32(STD)
        return {"x": np.ascontiguousarray(x), "y": self.labels[index]}

    def batch(self, k: int) -> Batch:
        """Batch ``k`` of the stream, made serially (the reference the pipelines must match)."""
        return collate([self.sample(g) for g in range(k * self.batch_size, (k + 1) * self.batch_size)])

    def settings(self) -> dict[str, Any]:
        return {
            "stored": f"JPEG q{JPEG_QUALITY}, {STORED_SCALE}x the input size",
            "per_sample": f"decode, bilinear resize, pad {PAD} + random crop, random flip, normalise",
            "samples": len(self),
        }


def collate(samples: list[dict[str, np.ndarray]]) -> Batch:
    return {k: np.stack([s[k] for s in samples]) for k in samples[0]}


def image_dataset(spec: Workload) -> ImageDataset:
    """The spec's data as encoded images (cached per process: encoding takes a second)."""
    if not has_images(spec):
        raise SpecError(f"workload {spec.name} ({spec.family}) has no images; image families: {IMAGE_FAMILIES}")
    return _encoded(spec)


@functools.lru_cache(maxsize=4)
def _encoded(spec: Workload) -> ImageDataset:
    from PIL import Image

    batches = spec.batches()
    shape = tuple(batches[0]["x"].shape[1:])
    h, w = shape[:2]
    encoded = []
    for batch in batches:
        for x in batch["x"]:
            pixels = np.clip(np.rint(x * 48.0 + 128.0), 0, 255).astype(np.uint8)
            big = Image.fromarray(pixels).resize((w * STORED_SCALE, h * STORED_SCALE), Image.BICUBIC)  # type: ignore[attr-defined]  # set via globals()
            buf = io.BytesIO()
            big.save(buf, format="JPEG", quality=JPEG_QUALITY)
            encoded.append(buf.getvalue())
    labels = np.concatenate([b["y"] for b in batches]).astype(np.int32)
    return ImageDataset(tuple(encoded), labels, shape, spec.batch_size, spec.seed)
