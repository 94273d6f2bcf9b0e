"""Op tables: which torch modules, functions and methods belong to which kind of operation.

Only data lives here; :mod:`.handlers` maps each kind to the handler that follows it. Function
and method names share one namespace (``torch.flatten(x)`` and ``x.flatten()`` are one op).
"""

from __future__ import annotations

from torch import nn

# Modules that act on each channel alone, in the same way for every channel (the order of
# channels does not matter to them): activations, softmax, dropout, identity.
ACTIVATION_MODULES: tuple[type[nn.Module], ...] = (
    nn.ReLU,
    nn.ReLU6,
    nn.GELU,
    nn.SiLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.LeakyReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.Softplus,
    nn.Mish,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Hardtanh,
    nn.Softsign,
    nn.Tanhshrink,
    nn.LogSigmoid,
    nn.Threshold,
    nn.Softmax,
    nn.LogSoftmax,
    nn.Softmin,
    nn.Identity,
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)

# Modules that work on the spatial dims of an ``(N, C, ...)`` map, channel by channel.
SPATIAL_MODULES: tuple[type[nn.Module], ...] = (
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.MaxPool3d,
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AvgPool3d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveAvgPool3d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
    nn.AdaptiveMaxPool3d,
    nn.LPPool1d,
    nn.LPPool2d,
    nn.Upsample,
    nn.ZeroPad2d,
    nn.ConstantPad1d,
    nn.ConstantPad2d,
    nn.ConstantPad3d,
    nn.ReflectionPad1d,
    nn.ReflectionPad2d,
    nn.ReplicationPad1d,
    nn.ReplicationPad2d,
    nn.ReplicationPad3d,
)

# Norms whose parameters and running statistics are indexed by channel dim 1.
CHANNEL_NORMS: tuple[type[nn.Module], ...] = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
)

# Norms over the trailing ``normalized_shape`` dims, with an elementwise affine over them
# (``nn.RMSNorm`` exists from torch 2.4 on).
LAST_DIMS_NORMS: tuple[type[nn.Module], ...] = (
    nn.LayerNorm,
    *((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()),
)

CONVS: tuple[type[nn.Module], ...] = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
CONV_TRANSPOSES: tuple[type[nn.Module], ...] = (
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
)
RESHAPE_MODULES: tuple[type[nn.Module], ...] = (nn.Flatten, nn.Unflatten)

# Pointwise (or per-position equivariant, like softmax) functions and methods, by name: every
# tensor operand broadcasts against the others; scalars are ignored.
POINTWISE = frozenset(
    {
        "relu",
        "relu_",
        "relu6",
        "gelu",
        "silu",
        "silu_",
        "elu",
        "elu_",
        "selu",
        "celu",
        "leaky_relu",
        "leaky_relu_",
        "hardtanh",
        "hardtanh_",
        "softplus",
        "mish",
        "hardswish",
        "hardsigmoid",
        "sigmoid",
        "sigmoid_",
        "tanh",
        "tanh_",
        "logsigmoid",
        "softsign",
        "tanhshrink",
        "dropout",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "alpha_dropout",
        "feature_alpha_dropout",
        "softmax",
        "log_softmax",
        "softmin",
        "normalize",
        "exp",
        "exp_",
        "abs",
        "abs_",
        "neg",
        "neg_",
        "pos",
        "sqrt",
        "rsqrt",
        "square",
        "sin",
        "cos",
        "log",
        "log1p",
        "expm1",
        "erf",
        "clamp",
        "clamp_",
        "clip",
        "clip_",
        "sign",
        "add",
        "add_",
        "sub",
        "sub_",
        "mul",
        "mul_",
        "div",
        "div_",
        "truediv",
        "true_divide",
        "floordiv",
        "pow",
        "pow_",
        "maximum",
        "minimum",
        "where",
        "lerp",
        "addcmul",
        "addcdiv",
        "rsub",
        "reciprocal",
        "contiguous",
        "clone",
        "detach",
        "float",
        "double",
        "half",
        "bfloat16",
        "requires_grad_",
    }
)
# Conversions whose other tensor operands give only a dtype or device (``x.type_as(y)``).
DATA_FIRST_ONLY = frozenset({"to", "type_as", "type"})
RESHAPES = frozenset(
    {
        "flatten",
        "view",
        "reshape",
        "view_as",
        "reshape_as",
        "unflatten",
        "squeeze",
        "unsqueeze",
        "squeeze_",
        "unsqueeze_",
    }
)
EXPANDS = frozenset({"expand", "expand_as"})
PERMUTES = frozenset({"permute"})  # a full order of the dims
TRANSPOSES = frozenset({"transpose", "swapaxes", "swapdims"})  # two dims swapped
REDUCTIONS = frozenset({"mean", "sum", "amax", "amin", "logsumexp", "nansum", "nanmean", "prod"})
CATS = frozenset({"cat", "concat", "concatenate"})
MATMULS = frozenset({"matmul", "mm"})
CONV_FUNCTIONS = frozenset({"conv1d", "conv2d", "conv3d"})
# Ops whose result says nothing about the order of units (sizes, flags, devices).
METADATA = frozenset(
    {
        "size",
        "dim",
        "numel",
        "nelement",
        "is_contiguous",
        "get_device",
        "ndimension",
        "len",
        "_assert_tensor_metadata",  # an exported graph's check of a value's dtype and device
    }
)
# Attributes read through ``getattr`` that are metadata too (``x.shape``).
METADATA_ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad"})
SPATIAL_FUNCTIONS = frozenset(
    {
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "_max_pool1d",
        "_max_pool2d",
        "_max_pool3d",
        "avg_pool1d",
        "avg_pool2d",
        "avg_pool3d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "adaptive_avg_pool3d",
        "adaptive_max_pool1d",
        "adaptive_max_pool2d",
        "adaptive_max_pool3d",
        "_adaptive_max_pool1d",
        "_adaptive_max_pool2d",
        "_adaptive_max_pool3d",
        "lp_pool1d",
        "lp_pool2d",
        "interpolate",
        "upsample",
        "pad",
    }
)

# Function targets are known by name only when they come from these modules; any other
# callable (a user's function wrapped with ``torch.fx.wrap``) is not understood.
FUNCTION_MODULES = frozenset({"torch", "_operator", "operator", "builtins", "math"})
