"""Programs in the style of Hugging Face modeling code (transformers 5.x): configs read for sizes
and flags, kwargs forwarded through layers, model outputs, caches, enums, introspection, logging,
masks, rotary embeddings, grouped-query attention and shifted-label losses. Each exercises one
Python construct such code uses; modules passed in fresh (not `inference`) train."""
import collections
import contextlib
import dataclasses
import enum
import functools
import inspect
import itertools
import logging
import typing
import warnings
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus import call, inference, program

logger = logging.getLogger(__name__)


def r(*shape):
    return torch.randn(*shape)


class TinyConfig:
    model_type = "tiny"

    def __init__(self, hidden_size=16, num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
                 mlp_bias=False, rms_norm_eps=1e-6, num_hidden_layers=3, rope_theta=10000.0,
                 output_hidden_states=False, vocab_size=24, **kwargs):
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.hidden_act = hidden_act
        self.mlp_bias = mlp_bias
        self.rms_norm_eps = rms_norm_eps
        self.num_hidden_layers = num_hidden_layers
        self.rope_theta = rope_theta
        self.output_hidden_states = output_hidden_states
        self.vocab_size = vocab_size
        for key, value in kwargs.items():
            setattr(self, key, value)

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads


@dataclasses.dataclass
class DataConfig:
    hidden_size: int = 8
    num_heads: int = 2
    scale_attention: bool = True
    layer_norm_eps: float = 1e-5
    act: str = "gelu"


ACT2FN = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu}


# ---- configs and kwargs ----------------------------------------------------------------------

class ConfiguredMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.up = nn.Linear(config.hidden_size, 2 * config.hidden_size, bias=config.mlp_bias)
        self.down = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x):
        if self.config.hidden_act == "gelu":
            h = F.gelu(self.up(x), approximate="tanh")
        else:
            h = ACT2FN[self.config.hidden_act](self.up(x))
        return self.down(h)


silu_mlp = inference(ConfiguredMLP(TinyConfig(hidden_act="silu")))
gelu_mlp = inference(ConfiguredMLP(TinyConfig(hidden_act="gelu", mlp_bias=True)))


@program(inputs=lambda n=5: r(2, n, 16), atol=1e-4)
def config_flags_choose_the_activation(x):
    return silu_mlp(x), gelu_mlp(x)


@program(inputs=lambda: (r(2, 3, 8), DataConfig()))
def dataclass_config_passed_in_sets_the_head_split(x, config):
    b, t, _ = x.shape
    heads = x.view(b, t, config.num_heads, config.hidden_size // config.num_heads).transpose(1, 2)
    if config.scale_attention:
        heads = heads * (config.hidden_size // config.num_heads) ** -0.5
    return F.layer_norm(heads, heads.shape[-1:], eps=config.layer_norm_eps)


class HiddenStatesModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(nn.Linear(config.hidden_size, config.hidden_size)
                                    for _ in range(config.num_hidden_layers))

    def forward(self, x, output_hidden_states=None):
        output_hidden_states = (output_hidden_states if output_hidden_states is not None
                                else self.config.output_hidden_states)
        all_hidden = () if output_hidden_states else None
        for layer in self.layers:
            if output_hidden_states:
                all_hidden = all_hidden + (x,)
            x = layer(x).tanh()
        return x, all_hidden


hidden_states_model = inference(HiddenStatesModel(TinyConfig(output_hidden_states=True)))


@program(inputs=lambda: r(3, 16), atol=1e-5)
def config_default_for_output_hidden_states(x):
    last, hidden = hidden_states_model(x)
    quiet, none = hidden_states_model(x, output_hidden_states=False)
    return last, hidden, quiet, none


class KwargsAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x, attention_mask=None, **kwargs):
        scores = self.proj(x) @ x.transpose(-1, -2) * kwargs.get("scaling", 1.0)
        if attention_mask is not None:
            scores = scores + attention_mask
        weights = scores.softmax(-1)
        return weights @ x, (weights if kwargs.get("output_attentions", False) else None)


class KwargsLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = KwargsAttention()

    def forward(self, x, attention_mask=None, **kwargs):
        h, weights = self.attn(x, attention_mask=attention_mask, **kwargs)
        return x + h, weights


class KwargsModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([KwargsLayer(), KwargsLayer()])

    def forward(self, x, attention_mask=None, **kwargs):
        all_weights = []
        for layer in self.layers:
            x, weights = layer(x, attention_mask, **kwargs)
            all_weights.append(weights)
        return x, all_weights


kwargs_model = inference(KwargsModel())


@program(inputs=lambda: call(r(2, 4, 8), scaling=0.25, output_attentions=True), atol=1e-5)
def kwargs_forwarded_through_layers(x, **kwargs):
    return kwargs_model(x, torch.zeros(4, 4), **kwargs)


@program(inputs=lambda: call(r(2, 4, 8), dropout=0.0, position_ids=None))
def kwargs_get_and_pop_with_defaults(x, **kwargs):
    dropout = kwargs.pop("dropout", 0.1)
    scaling = kwargs.get("scaling", None) or x.shape[-1] ** -0.5
    position_ids = kwargs.pop("position_ids", None)
    if position_ids is None:
        position_ids = torch.arange(x.shape[1])
    y = F.dropout(x * scaling, p=dropout, training=False)
    return y + position_ids[:, None], len(kwargs)


@program(inputs=lambda: (nn.Linear(16, 16), r(3, 16), TinyConfig(extra_scale=0.5)))
def training_a_layer_sized_by_config_attributes(linear, x, config):
    h = linear(x).view(3, config.num_attention_heads, config.head_dim)
    h = h * getattr(config, "extra_scale", 1.0)
    return h.square().mean()


# ---- model outputs ---------------------------------------------------------------------------

class ModelOutput(collections.OrderedDict):
    """An ordered dict whose dataclass fields that are not None are also its keys."""

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value

    def __getitem__(self, key):
        if isinstance(key, str):
            return super().__getitem__(key)
        return self.to_tuple()[key]

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class BaseOutput(ModelOutput):
    last_hidden_state: Optional[torch.Tensor] = None
    hidden_states: Optional[tuple] = None
    attentions: Optional[tuple] = None


@dataclasses.dataclass
class LMOutput(ModelOutput):
    loss: Optional[torch.Tensor] = None
    logits: Optional[torch.Tensor] = None


@program(inputs=lambda: r(2, 4))
def model_output_returned_whole(x):
    return BaseOutput(last_hidden_state=x.relu(), hidden_states=(x, x * 2))


@program(inputs=lambda: r(2, 4))
def model_output_read_by_attribute_key_and_index(x):
    out = BaseOutput(last_hidden_state=x * 3, attentions=(x.softmax(-1),))
    return out.last_hidden_state + out["last_hidden_state"] + out[0], out.attentions[0], "hidden_states" in out


@program(inputs=lambda: r(2, 4))
def model_output_to_tuple_skips_none(x):
    out = LMOutput(logits=x.log_softmax(-1))
    return out.to_tuple(), len(out), list(out.keys())


class PlainOutput(dict):
    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name)


@program(inputs=lambda: r(2, 4))
def dict_subclass_output_read_by_attribute(x):
    out = PlainOutput(logits=x * 2, past=None)
    out["hidden"] = x - 1
    return out.logits + out.hidden, out


# ---- user classes ----------------------------------------------------------------------------

class TinyCache:
    def __init__(self):
        self.key_cache = []
        self.value_cache = []

    def update(self, key, value, layer_idx):
        if len(self.key_cache) <= layer_idx:
            self.key_cache.append(key)
            self.value_cache.append(value)
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key], dim=-2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value], dim=-2)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]

    def get_seq_length(self, layer_idx=0):
        return 0 if len(self.key_cache) <= layer_idx else self.key_cache[layer_idx].shape[-2]


@program(inputs=lambda: r(1, 2, 3, 4))
def cache_object_created_inside_and_updated(x):
    cache = TinyCache()
    cache.update(x, x * 2, 0)
    k, v = cache.update(x + 1, x - 1, 0)
    return (k @ v.transpose(-1, -2)).sum(-1), cache.get_seq_length(), cache.get_seq_length(1)


@program(inputs=lambda: (r(1, 2, 3, 4), TinyCache()))
def cache_object_passed_in_is_updated(x, cache):
    k, v = cache.update(x, x.cos(), 0)
    k, v = cache.update(k * 2, v, 1)
    return k + v, cache.get_seq_length(1)


class RopeScaling:
    def __init__(self, factor):
        self._factor = factor

    @property
    def factor(self):
        return self._factor

    @staticmethod
    def at_least_one(value):
        return max(value, 1.0)

    @classmethod
    def from_dict(cls, d):
        return cls(d.get("factor", 1.0))

    def scale(self, t):
        return t / self.at_least_one(self.factor)


class DynamicRopeScaling(RopeScaling):
    @property
    def factor(self):
        return super().factor * 2

    def scale(self, t):
        return super().scale(t) + 1


@program(inputs=lambda: r(6))
def class_with_property_staticmethod_classmethod_and_super(x):
    plain = RopeScaling.from_dict({"factor": 0.5})
    dynamic = DynamicRopeScaling.from_dict({"factor": 2.0})
    return plain.scale(x), dynamic.scale(x), dynamic.factor


class ScaledLinear(nn.Linear):
    def __init__(self, d_in, d_out, scale):
        super().__init__(d_in, d_out)
        self.scale = scale

    def forward(self, x):
        return super().forward(x) * self.scale


@program(inputs=lambda: (ScaledLinear(8, 4, 0.5), r(3, 8)))
def training_a_module_subclass_that_calls_super_forward(linear, x):
    return linear(x).square().sum()


AttentionResult = collections.namedtuple("AttentionResult", ["output", "weights"])


class GenerationStep(typing.NamedTuple):
    logits: torch.Tensor
    next_token: torch.Tensor
    step: int = 0


@program(inputs=lambda: r(2, 4, 4), breaks="whose instances have no __dict__")
def namedtuple_built_and_returned(x):
    weights = x.softmax(-1)
    return AttentionResult(weights @ x, weights)


@program(inputs=lambda: r(2, 5), breaks="whose instances have no __dict__")
def typing_namedtuple_fields_read(x):
    step = GenerationStep(x.log_softmax(-1), x.argmax(-1))
    again = step._replace(step=step.step + 1)
    return again.logits * again.step, again.next_token, again


class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


class PaddingSide(str, enum.Enum):
    LEFT = "left"
    RIGHT = "right"


class ModeGate(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        if self.mode is Mode.TRAIN:
            return F.dropout(self.proj(x), p=0.0, training=True)
        return self.proj(x) * 0.5


eval_gate = inference(ModeGate(Mode.EVAL))
train_gate = inference(ModeGate(Mode.TRAIN))


@program(inputs=lambda: r(3, 4))
def enum_mode_compared_by_identity(x):
    return eval_gate(x), train_gate(x)


@program(inputs=lambda: call(r(2, 5), side=PaddingSide.LEFT), breaks="comparing a object with a str")
def str_enum_compared_with_a_string(x, side):
    left = side == "left"
    filler = torch.full((x.shape[0], 2), -1.0, dtype=x.dtype)
    padded = torch.cat([filler, x], -1) if left else torch.cat([x, filler], -1)
    return padded, side.value, PaddingSide.RIGHT.value


# ---- containers and strings ------------------------------------------------------------------

@program(inputs=lambda: r(3))
def dict_get_pop_setdefault_update(x):
    d = {"a": x, "b": x * 2}
    d.update({"c": x + 1}, e=x - 1)
    d.setdefault("a", x * 100)
    d.setdefault("f", x * 3)
    c = d.pop("c")
    missing = d.pop("nope", None)
    return d.get("a") + d.get("z", x) + c, missing, d


@program(inputs=lambda: r(3), breaks="attribute 'fromkeys' of a builtin")
def dict_items_keys_values_copy_fromkeys_in_del(x):
    d = dict.fromkeys(["q", "k", "v"], 0)
    for i, k in enumerate(d.keys()):
        d[k] = x * (i + 1)
    e = d.copy()
    del e["k"]
    total = sum(d.values())
    pairs = [name + str(len(e)) for name, _ in d.items()]
    return total, "k" in e, "q" in e, pairs, e


@program(inputs=lambda: r(3))
def list_append_extend_insert_pop(x):
    xs = [x]
    xs.append(x * 2)
    xs.extend([x + 1, x - 1])
    xs.insert(0, x.neg())
    last = xs.pop()
    first = xs.pop(0)
    return torch.stack(xs), last, first


@program(inputs=lambda: r(3))
def list_index_count_sort_reverse_clear(x):
    dims = [3, 1, 2, 1]
    i = dims.index(2)
    ones = dims.count(1)
    dims.sort()
    dims.reverse()
    out = x * i + ones + dims[0]
    names = ["v", "q", "k"]
    names.sort(key=lambda s: ["q", "k", "v"].index(s))
    dims.clear()
    return out, names, dims


NO_DECAY = frozenset({"bias", "norm.weight"})


@program(inputs=lambda: r(4), falls_back="a graph break with a set made in the traced code live")
def set_and_frozenset_membership(x):
    projections = {"q_proj", "k_proj", "v_proj"}
    out = x
    for name in ("q_proj", "o_proj", "bias"):
        if name in projections:
            out = out + 1
        if name in NO_DECAY:
            out = out * 2
    return out, len(projections | {"o_proj"}), "k_proj" in projections - {"k_proj"}


@program(inputs=lambda: r(4))
def str_methods_pick_the_layer(x):
    name = "model.layers.3.self_attn.q_proj.weight"
    parts = name.split(".")
    layer = int(parts[2])
    key = ".".join(parts[3:-1]).replace("self_attn", "attn")
    scale = 2 if key.startswith("attn") and name.endswith(".weight") else 1
    label = "{}_{}".format(key.upper(), layer) + "/%s-%d" % ("Q".lower(), layer)
    return x * layer * scale, key, label


@program(inputs=lambda: r(4))
def substring_in_a_parameter_name(x):
    name = "model.layers.0.mlp.down_proj.weight"
    if "layers" in name and "bias" not in name:
        x = x * 2
    return x + ("proj" in name)


class Named(nn.Module):
    def forward(self, x):
        kind = f"{self.__class__}"
        typename = str(type(x))
        return x * 2 if "Named" in kind and "Tensor" in typename else x, kind, typename


named = Named()


@program(inputs=lambda: r(3))
def fstring_of_the_class_and_type(x):
    return named(x)


# ---- builtins, functools, itertools, collections ---------------------------------------------

@program(inputs=lambda: r(3))
def sorted_map_filter_reversed(x):
    sizes = sorted([4, 1, 3, 2], reverse=True)
    doubled = list(map(lambda s: s * 2, sizes))
    odd = list(filter(lambda s: s % 2, sizes))
    tensors = [x * s for s in reversed(sizes)]
    return torch.stack(tensors), doubled, odd, sorted({"b": 1, "a": 2}.items())


@program(inputs=lambda: r(3))
def iter_next_callable_any_all(x):
    layers = iter([x.sin(), x.cos(), x.tan()])
    first = next(layers)
    second = next(layers, None)
    fn = F.silu if callable(F.silu) else None
    flags = [True, False, True]
    return fn(first) + second, any(flags), all(flags), next(iter([]), "empty")


def _add(a, b):
    return a + b


@program(inputs=lambda: r(3, 4), breaks="calling functools.partial")
def functools_partial_and_reduce(x):
    softmax_last = functools.partial(torch.softmax, dim=-1)
    scaled_add = functools.partial(torch.add, alpha=0.5)
    total = functools.reduce(_add, [x, x * 2, x * 3])
    return softmax_last(x), scaled_add(x, total), functools.reduce(lambda a, b: a * b, x.shape, 1)


def with_residual(forward):
    @functools.wraps(forward)
    def wrapper(self, x, *args, **kwargs):
        return x + forward(self, x, *args, **kwargs)
    return wrapper


class WrappedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    @with_residual
    def forward(self, x, gate=1.0):
        return self.fc(x) * gate


@program(inputs=lambda: (WrappedBlock(), r(2, 4)))
def training_through_a_wraps_decorated_forward(block, x):
    return block(x, gate=0.5).square().sum()


@program(inputs=lambda: r(2, 4))
def wraps_gives_the_wrapper_the_wrapped_name(x):
    return x * 2, WrappedBlock.forward.__name__, WrappedBlock.forward.__wrapped__.__name__


@functools.lru_cache(maxsize=None)
def inverse_frequencies(dim, base):
    return tuple(1.0 / base ** (i / dim) for i in range(0, dim, 2))


@program(inputs=lambda: r(5, 4), breaks="calling a functools._lru_cache_wrapper")
def lru_cache_on_a_helper(x):
    inv = inverse_frequencies(4, 10000.0)
    inv_again = inverse_frequencies(4, 10000.0)
    return x * inv[0] + inv[1], inv is inv_again


@program(inputs=lambda: r(3), breaks="attribute 'from_iterable'")
def itertools_chain_and_product(x):
    out = []
    for a, b in itertools.product([1, 2], ["q", "k"]):
        out.append(x * a if b == "q" else x - a)
    chained = list(itertools.chain([x], out[:1], (x + 5,)))
    return torch.stack(out), torch.stack(chained), list(itertools.chain.from_iterable([[1], [2, 3]]))


@program(inputs=lambda: r(6, 4), breaks="defaultdict")
def defaultdict_groups_rows(x):
    groups = collections.defaultdict(list)
    for i, row in enumerate(x.unbind(0)):
        groups[i % 3].append(row)
    counts = collections.defaultdict(int)
    for key in groups:
        counts[key] += len(groups[key])
    return {k: torch.stack(v).sum(0) for k, v in groups.items()}, dict(counts)


@program(inputs=lambda: r(3), falls_back="both in the frame's state and inside it")
def ordereddict_move_to_end_and_popitem(x):
    d = collections.OrderedDict()
    d["embed"] = x
    d["layers"] = x * 2
    d["head"] = x * 3
    d.move_to_end("embed")
    name, last = d.popitem()
    return list(d.items()), name, last


# ---- introspection ---------------------------------------------------------------------------

def _flash_forward(q, k, v, dropout=0.0, softcap=None):
    return (q * k).sum(-1, keepdim=True) * v


@program(inputs=lambda: r(2, 4))
def code_varnames_choose_the_arguments(x):
    accepted = _flash_forward.__code__.co_varnames[:_flash_forward.__code__.co_argcount]
    extra = {"dropout": 0.0, "softcap": 30.0, "sliding_window": 4}
    kwargs = {k: v for k, v in extra.items() if k in accepted}
    return _flash_forward(x, x, x, **kwargs), len(kwargs)


class PositionalLayer(nn.Module):
    def forward(self, x, position_ids=None, cache_position=None):
        return x + (0 if position_ids is None else position_ids)


positional_layer = PositionalLayer()


@program(inputs=lambda: r(2, 5), breaks="inspect.signature of a method")
def inspect_signature_filters_the_kwargs(x):
    params = inspect.signature(positional_layer.forward).parameters
    offered = {"position_ids": torch.arange(5), "output_attentions": False}
    kwargs = {k: v for k, v in offered.items() if k in params}
    return positional_layer(x, **kwargs), list(params)


@program(inputs=lambda: r(3, 4), breaks="attribute '__name__' of a builtin")
def name_class_and_type_checks(x):
    names = [F.relu.__name__, named.__class__.__name__, type(x).__name__, type(named).__name__]
    if type(x) is torch.Tensor and isinstance(named, nn.Module):
        x = x * 2
    return x, names


@program(inputs=lambda: r(3, 4))
def tensor_dunder_class_is_torch_tensor(x):
    return x * 2 if x.__class__ is torch.Tensor else x


@program(inputs=lambda: (r(3, 4), TinyConfig(sliding_window=2)))
def hasattr_and_getattr_with_default_on_config(x, config):
    window = getattr(config, "sliding_window", None)
    softcap = getattr(config, "attn_logit_softcapping", None)
    if softcap is not None:
        x = torch.tanh(x / softcap) * softcap
    if hasattr(config, "sliding_window") and window is not None:
        x = x[:, -window:]
    return x * getattr(config, "rope_theta", 1.0) / 10000.0, hasattr(config, "head_dim")


@program(inputs=lambda: (r(4, 4), r(4, 4)))
def allow_tf32_flag_read(a, b):
    if torch.backends.cuda.matmul.allow_tf32:
        return a @ b
    return torch.matmul(a, b) + 0.0


# ---- logging, warnings, tracing flags, dtypes --------------------------------------------------

class WarnsOnce(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, use_cache=True):
        if use_cache and self.training:
            logger.warning("`use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`.")
            use_cache = False
        return self.proj(x), use_cache


@program(inputs=lambda: (WarnsOnce(), r(2, 4)), breaks="calling a types.BuiltinFunctionType")
def logger_warning_in_forward(module, x):
    out, use_cache = module(x)
    return out.sum(), use_cache


@program(inputs=lambda: r(2, 4), breaks="calling a types.BuiltinFunctionType")
def warnings_warn_in_forward(x):
    if x.dim() == 2:
        warnings.warn("passing a 2D input is deprecated; add a batch dimension", FutureWarning)
        x = x.unsqueeze(0)
    return x * 2


@program(inputs=lambda: r(2, 4))
def jit_is_tracing_and_is_scripting_branches(x):
    if torch.jit.is_tracing() or torch.jit.is_scripting():
        return x * 0
    return x.softmax(-1)


@program(inputs=lambda: r(2, 4))
def compiler_is_compiling_skips_a_data_check(x):
    """Under kiln is_compiling() is True (as under torch.compile): the check on data is skipped."""
    if not torch.compiler.is_compiling() and torch.isinf(x).any():
        raise ValueError("the input holds inf")
    return x - 1


@program(inputs=lambda n=4: r(2, n, n))
def finfo_min_in_masked_fill(scores):
    n = scores.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
    masked = scores.masked_fill(causal, torch.finfo(scores.dtype).min)
    return masked.softmax(-1)


@program(inputs=lambda: torch.randint(0, 100, (2, 6)))
def iinfo_and_default_dtype(ids):
    biggest = torch.iinfo(ids.dtype).max
    clipped = ids.clamp(max=min(biggest, 50))
    return clipped.to(torch.get_default_dtype()) / 50, torch.get_default_dtype()


@program(inputs=lambda: r(3, 4))
def autocast_enabled_check(x):
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else x.dtype
    upcast = x.to(torch.float32) if torch.is_autocast_enabled() else x
    return upcast.to(dtype).softmax(-1)


# ---- context managers, try, assert --------------------------------------------------------------

class Scope:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append("exit")
        return False


@program(inputs=lambda: r(3))
def user_context_manager_class_in_forward(x):
    log = []
    with Scope(log) as scope:
        y = x * 2
        scope.log.append("body")
    return y, log


@contextlib.contextmanager
def upcast_softmax(enabled):
    previous = torch.is_grad_enabled()
    try:
        yield torch.float64 if enabled else None
    finally:
        torch.set_grad_enabled(previous)


@program(inputs=lambda: r(3, 4), breaks="contextmanager")
def contextlib_contextmanager_in_forward(x):
    with upcast_softmax(True) as dtype:
        y = x.softmax(-1, dtype=dtype)
    return y.to(x.dtype)


@program(inputs=lambda: r(3, 4))
def try_except_where_nothing_raises(x):
    try:
        y = x.softmax(-1)
    except RuntimeError:
        y = x
    try:
        w = {"a": 2}["a"]
    except (KeyError, IndexError):
        w = 1
    return y * w


@program(inputs=lambda: r(3, 4))
def try_finally_keeps_the_order(x):
    steps = []
    try:
        y = x.exp()
        steps.append("try")
    finally:
        steps.append("finally")
    return y, steps


@program(inputs=lambda n=4: (r(2, n, 8), r(2, n, 8)))
def assert_on_shapes(q, k):
    assert q.shape == k.shape, f"q {q.shape} and k {k.shape} differ"
    assert q.dim() == 3
    assert q.shape[-1] % 2 == 0, "head dim must be even"
    return q @ k.transpose(1, 2)


# ---- tensors as modeling code builds them -------------------------------------------------------

@program(inputs=lambda: r(3, 4))
def import_inside_the_function_body(x):
    import math
    from torch.nn.functional import gelu
    from math import pi as PI
    return gelu(x) * math.sqrt(2.0) + PI


@program(inputs=lambda: r(2, 3))
def tensor_of_constants(x):
    mean = torch.tensor([0.485, 0.456, 0.406], device=x.device)
    std = torch.tensor([[0.229, 0.224, 0.225]], dtype=x.dtype)
    ids = torch.tensor([1, 2, 3])
    return (x - mean) / std + ids


@program(inputs=lambda n=5: r(2, n, 8))
def arange_positions_on_the_inputs_device(x):
    seq = x.shape[1]
    position_ids = torch.arange(seq, device=x.device).unsqueeze(0).expand(x.shape[0], -1)
    cache_position = torch.arange(2, seq + 2, device=x.device)
    return x + position_ids[..., None], cache_position


@program(inputs=lambda n=5: r(2, n))
def full_ones_zeros_with_device(x):
    b, t = x.shape
    mask = torch.full((t, t), float("-inf"), device=x.device).triu(1)
    keep = torch.ones(b, t, dtype=torch.long, device=x.device)
    bias = torch.zeros(t, device=x.device, dtype=x.dtype)
    return x[:, None, :] + mask + bias, keep.sum(-1)


class GroupedQueryAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.q = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.kv = nn.Linear(config.hidden_size, 2 * self.num_kv * self.head_dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2 * self.num_kv, self.head_dim).transpose(1, 2).chunk(2, dim=1)
        groups = self.num_heads // self.num_kv
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        weights = (q @ k.transpose(-1, -2) * self.head_dim ** -0.5).softmax(-1)
        return (weights @ v).transpose(1, 2).reshape(b, t, -1)


@program(inputs=lambda: (GroupedQueryAttention(TinyConfig()), r(2, 5, 16)), atol=1e-5)
def training_grouped_query_attention_with_repeat_interleave(attn, x):
    return attn(x).square().mean()


@program(inputs=lambda n=5: (r(2, 4, n, 8), r(2, 4, n, 8), r(2, 4, n, 8)), atol=1e-5)
def sdpa_with_a_bool_mask(q, k, v):
    n = q.shape[-2]
    lengths = torch.full((2,), n) - torch.arange(2) * 2
    padding = torch.arange(n)[None, :] < lengths[:, None]
    mask = padding[:, None, None, :] & torch.ones(n, n, dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 4, 4).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5)
        return out.transpose(1, 2).reshape(b, t, 16)


@program(inputs=lambda: (CausalSelfAttention(), r(2, 5, 16)), atol=1e-5)
def training_sdpa_is_causal(attn, x):
    return attn(x).pow(2).sum()


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        dim = config.head_dim
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


rotary = RotaryEmbedding(TinyConfig())


@program(inputs=lambda n=5: (r(2, 4, n, 4), r(2, 4, n, 4)), atol=1e-5)
def rotary_embedding_with_rotate_half(q, k):
    position_ids = torch.arange(q.shape[2], device=q.device)[None].expand(q.shape[0], -1)
    cos, sin = rotary(q, position_ids)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


@program(inputs=lambda: torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]]))
def position_ids_from_cumsum_of_the_attention_mask(attention_mask):
    position_ids = attention_mask.long().cumsum(-1) - 1
    position_ids = position_ids.masked_fill(attention_mask == 0, 1)
    return position_ids, attention_mask.sum(-1)


@program(inputs=lambda n=5: r(2, n, 4))
def pad_to_a_multiple_of_the_block(x):
    block = 4
    pad = (block - x.shape[1] % block) % block
    padded = F.pad(x, (0, 0, 0, pad), value=0.0)
    return padded.view(x.shape[0], -1, block, x.shape[2]).sum(2)


class TinyCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, labels=None):
        logits = self.lm_head(self.embed(input_ids).tanh())
        loss = None
        if labels is not None:
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, self.config.vocab_size), shift_labels.view(-1),
                                   ignore_index=-100)
        return loss, logits


def _ids_and_labels():
    ids = torch.randint(0, 24, (2, 6))
    labels = ids.clone()
    labels[0, :2] = -100
    return TinyCausalLM(TinyConfig()), ids, labels


@program(inputs=_ids_and_labels, atol=1e-5)
def training_causal_lm_loss_over_shifted_labels(model, input_ids, labels):
    loss, logits = model(input_ids, labels=labels)
    return loss, logits.detach()


class LayerStack(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(config.hidden_size, config.hidden_size)
                                    for _ in range(config.num_hidden_layers))

    def forward(self, x, num_layers):
        for layer in self.layers[:num_layers]:
            x = layer(x).relu()
        return x, len(self.layers[1:])


layer_stack = inference(LayerStack(TinyConfig()))


@program(inputs=lambda: r(3, 16))
def modulelist_slice_runs_the_first_layers(x):
    return layer_stack(x, 2)


class CheckpointingLayer(nn.Module):
    gradient_checkpointing = False

    def __call__(self, *args, **kwargs):
        if self.gradient_checkpointing and self.training:
            kwargs["use_cache"] = False
        return super().__call__(*args, **kwargs)


class DecoderLayer(CheckpointingLayer):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, use_cache=True):
        return x + self.fc(x).tanh(), use_cache


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(), DecoderLayer()])

    def forward(self, x):
        flags = []
        for layer in self.layers:
            x, use_cache = layer(x, use_cache=True)
            flags.append(use_cache)
        return x, flags


@program(inputs=lambda: (Decoder(), r(2, 8)))
def training_layers_whose_class_overrides_call(decoder, x):
    out, flags = decoder(x)
    return out.square().sum(), flags


class TinyDecoderModel(nn.Module):
    """A config, a cache made inside, rotary, GQA through SDPA, and a ModelOutput."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.qkv = nn.Linear(config.hidden_size, (config.num_attention_heads + 2 * config.num_key_value_heads)
                             * config.head_dim)
        self.rotary = RotaryEmbedding(config)

    def forward(self, input_ids, attention_mask=None, **kwargs):
        cfg = self.config
        b, t = input_ids.shape
        h = self.embed(input_ids)
        cache = kwargs.get("past_key_values") or TinyCache()
        position_ids = torch.arange(cache.get_seq_length(), t, device=h.device)[None].expand(b, -1)
        cos, sin = (c.unsqueeze(1) for c in self.rotary(h, position_ids))
        q, k, v = self.qkv(h).view(b, t, -1, cfg.head_dim).transpose(1, 2).split(
            [cfg.num_attention_heads, cfg.num_key_value_heads, cfg.num_key_value_heads], dim=1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = cache.update(k, v, 0)
        groups = cfg.num_attention_heads // cfg.num_key_value_heads
        mask = None if attention_mask is None else attention_mask[:, None, None, :].bool()
        out = F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                             attn_mask=mask)
        return BaseOutput(last_hidden_state=out.transpose(1, 2).reshape(b, t, -1),
                          hidden_states=(h,) if cfg.output_hidden_states else None)


@program(inputs=lambda: (TinyDecoderModel(TinyConfig()), torch.randint(0, 24, (2, 5)), torch.ones(2, 5)),
         atol=1e-5)
def training_a_tiny_decoder_end_to_end(model, input_ids, attention_mask):
    out = model(input_ids, attention_mask=attention_mask)
    return out.last_hidden_state.square().mean(), out.to_tuple()[0].shape[-1]


class _Clamped:
    """A data descriptor: the value kept within [0, 1]."""

    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, owner=None):
        return self if obj is None else getattr(obj, self.name)

    def __set__(self, obj, value):
        setattr(obj, self.name, min(max(value, 0.0), 1.0))


class _DropConfig:
    rate = _Clamped()

    def __init__(self, rate):
        self.rate = rate


@program(inputs=lambda: r(3), breaks="_Clamped")
def data_descriptor_on_a_config_made_inside(x):
    """The class's descriptor takes the write (kiln must not put it in the __dict__)."""
    cfg = _DropConfig(1.7)
    return x * cfg.rate
