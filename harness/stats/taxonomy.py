"""One small taxonomy for every framework's profiler events (the ops breakdown of ``--profile-ops``).

Each profiler names its ops its own way: torch.profiler ``aten::addmm``, XLA (JAX, Flax, Keras on
JAX) an HLO instruction ``dot.3`` or a fusion ``multiply_add_fusion.4``, TensorFlow an op type
``_MklMatMul``, and on a GPU each a kernel (``sm80_xmma_gemm_...``, ``elementwise_kernel``). This
module states, in one place, the rule that maps each name into one of CATEGORIES, so a step's
breakdown reads the same whatever ran it. The step's time outside every op (Python, dispatch,
launch gaps, synchronisation) is UNCOVERED, a category no event maps to: it is what is left.

A rule is a list of (category, space-separated substrings) tried in order on the lower-cased name (for TF ops,
the op type after the last ``:``; for HLO names, without the ``.N`` suffix), a substring
``=name`` matching the whole name only; the first hit wins,
and a name no rule knows is OTHER (shown as such, never guessed). Pooling counts as a reduction
(over windows), view and layout ops (``aten::t``, ``Reshape``) as data movement.
"""

from __future__ import annotations

import re

MATMUL = "matmul/conv"
ELEMENTWISE = "elementwise"
NORM = "norm/softmax"
REDUCTION = "reduction"
MOVEMENT = "data movement"
OPTIMIZER = "optimizer update"
COLLECTIVE = "collective"
COMPILE = "compile/trace"
OTHER = "other op"
UNCOVERED = "uncovered"

#: Every category, in the order a report stacks them (UNCOVERED last: the remainder).
CATEGORIES = (MATMUL, ELEMENTWISE, NORM, REDUCTION, MOVEMENT, OPTIMIZER, COLLECTIVE, COMPILE, OTHER, UNCOVERED)

#: One colour per category, the same in every plot (colour-blind safe where it can be).
COLOURS = {
    MATMUL: "#0072B2",
    ELEMENTWISE: "#56B4E9",
    NORM: "#009E73",
    REDUCTION: "#F0E442",
    MOVEMENT: "#E69F00",
    OPTIMIZER: "#D55E00",
    COLLECTIVE: "#CC79A7",
    COMPILE: "#000000",
    OTHER: "#999999",
    UNCOVERED: "#DDDDDD",
}

#: Profiler families: which rule set reads an event's name.
TORCH, XLA, TF, GPU_KERNEL = "torch", "xla", "tf", "gpu-kernel"

_Rules = list[tuple[str, str]]

# Order matters: optimizer and collective names contain "add"/"reduce", norms contain "mean".
_COMMON: _Rules = [
    (
        COLLECTIVE,
        "all_reduce allreduce all-reduce all_gather all-gather reduce_scatter reduce-scatter collective nccl c10d::",
    ),
    (OPTIMIZER, "resourceapply applygradientdescent applyadam _foreach_ fused_sgd fused_adam adam sgd"),
    # Compiling, not running compiled code: "CompiledFunction" and "Torch-Compiled Region" are not here.
    (COMPILE, "backend_compile jit_compile compile_fx compile_inner _compile_ xla_compile tracing lowering"),
]

_TORCH: _Rules = [
    (MATMUL, "addmm ::mm bmm matmul linear conv baddbmm einsum _scaled_dot attention"),
    (NORM, "softmax norm nll_loss cross_entropy"),
    (REDUCTION, "::sum ::mean =aten::max =aten::min ::amax ::argmax ::prod ::var ::std reduce pool"),
    (
        MOVEMENT,
        (
            "copy ::to _to_copy contiguous transpose permute ::cat ::stack index gather scatter embedding clone pad "
            "slice select memcpy memset item _local_scalar_dense view expand as_strided =aten::t detach empty "
            "resolve_ flatten reshape squeeze split chunk unbind broadcast lift scalar_tensor resize_ narrow"
        ),
    ),
    (
        ELEMENTWISE,
        (
            "add sub mul div relu threshold tanh sigmoid gelu exp log neg pow sqrt clamp where fill zero ones full "
            "dropout maximum minimum =aten::eq =aten::ne =aten::lt =aten::gt abs sign rsub lerp "
            # a recurrent cell: its matmuls are nested ops; its own time is the gates (fused: _thnn_fused_*)
            "gru_cell lstm_cell rnn_tanh_cell rnn_relu_cell _thnn_fused"
        ),
    ),
]

# HLO instruction names (after dropping ".N"). A fusion is named after the ops inside it
# (``broadcast_maximum_fusion``): see _XLA_FUSION. XLA:CPU hands dots to YNNPACK or oneDNN as a
# custom fusion, ``ynn_fusion``/``onednn...`` (the HLO shows a dot_general inside).
_XLA: _Rules = [
    (MATMUL, "dot convolution gemm cublas matmul custom-call onednn ynn_fusion xnn_fusion"),
    (NORM, "softmax norm rsqrt"),
    (REDUCTION, "reduce select-and-scatter argmax argmin"),
    (
        MOVEMENT,
        (
            "copy transpose concatenate slice gather scatter pad broadcast reshape bitcast dynamic-update "
            "dynamic_update iota send recv infeed outfeed"
        ),
    ),
    (
        ELEMENTWISE,
        (
            "fusion add subtract multiply divide maximum minimum exp log tanh select compare convert negate "
            "power sqrt =and =or =xor _and _or clamp logistic abs sign is-finite"
        ),
    ),
]

_TF: _Rules = [
    (MATMUL, "matmul conv einsum gemm"),
    (NORM, "softmax norm crossentropy"),
    (REDUCTION, "sum mean =max =min prod argmax argmin reduce pool"),
    (
        MOVEMENT,
        (
            "readvariableop identity transpose reshape concat pack unpack slice gather scatter pad copy _send "
            "_recv cast tile broadcastto shape fill zeroslike oneslike assign tensorlist expanddims squeeze "
            "broadcast"
        ),
    ),
    (
        ELEMENTWISE,
        (
            "add sub mul div relu tanh sigmoid exp log neg pow sqrt square maximum minimum select equal greater "
            "less biasadd grad"
        ),
    ),
]

# A fusion does the work of its heaviest op: a dot or convolution, else a norm or a reduction,
# else elementwise arithmetic, and only a fusion of nothing but layout ops moves data.
_XLA_FUSION: _Rules = [
    _XLA[0],
    _XLA[1],
    _XLA[2],
    (ELEMENTWISE, _XLA[4][1].removeprefix("fusion ")),
    _XLA[3],
    (ELEMENTWISE, "fusion"),
]

# CUDA kernel names (torch.profiler's ``kernel`` events, the device plane of an XLA trace).
_GPU_KERNEL: _Rules = [
    (MOVEMENT, "memcpy memset copy transpose cat_ gather scatter index"),
    (
        MATMUL,
        (
            "gemm xmma cutlass cublas conv wgrad dgrad implicit winograd fft sm80_ sm90_ ampere_ volta_ turing_ "
            "hopper_ dot"
        ),
    ),
    (NORM, "softmax norm nll_loss cross_entropy"),
    (REDUCTION, "reduce sum mean argmax pool"),
    (ELEMENTWISE, "elementwise vectorized unrolled fusion triton_poi relu add mul"),
]

_RULES: dict[str, _Rules] = {TORCH: _TORCH, XLA: _XLA, TF: _TF, GPU_KERNEL: _GPU_KERNEL}
_HLO_SUFFIX = re.compile(r"(\.\d+)+$")


def op_name(family: str, name: str) -> str:
    """The name a rule reads: a TF event ``scope/name:OpType`` gives its OpType, an HLO name
    drops its ``.N`` suffix; other names are kept."""
    if family == TF:
        return name.rsplit(":", 1)[-1]
    if family == XLA:
        return _HLO_SUFFIX.sub("", name)
    return name


def classify(family: str, name: str) -> str:
    """The category of one op or kernel named ``name`` by the profiler family ``family``
    (TORCH, XLA, TF or GPU_KERNEL): never UNCOVERED; OTHER for a name no rule knows."""
    if family not in _RULES:
        raise ValueError(f"unknown profiler family {family!r}; valid: {', '.join(_RULES)}")
    low = op_name(family, name).lower()
    rules = _XLA_FUSION if family == XLA and "fusion" in low else _RULES[family]
    for category, needles in (*_COMMON, *rules):
        if any(low == n[1:] if n.startswith("=") else n in low for n in needles.split()):
            return category
    return OTHER
