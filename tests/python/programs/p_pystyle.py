"""Plain Python around tensors, as modeling code writes it: namedtuples, __slots__, functools,
string formatting and parsing, dict/list/tuple/set methods, builtins and itertools over Python
numbers, introspection, logging and warnings, context managers, try/except, asserts, finfo/iinfo
and mode queries, enums, dataclasses, mutation the caller sees, and global counters. Each program
exercises one construct the way real code (transformers, timm, torchvision) uses it."""
import collections
import contextlib
import dataclasses
import enum
import functools
import inspect
import itertools
import logging
import operator
import typing
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus import call, inference, program

logger = logging.getLogger(__name__)


def r(*shape):
    return torch.randn(*shape)


# ---- namedtuples -----------------------------------------------------------------------------

BlockOutput = collections.namedtuple("BlockOutput", ["hidden", "attn_weights", "present"])


def _attend(x):
    weights = (x @ x.transpose(-1, -2)).softmax(-1)
    return BlockOutput(hidden=weights @ x, attn_weights=weights, present=(x, x * 2))


@program(inputs=lambda n=4: r(2, n, 8), breaks="calling p_pystyle.BlockOutput, whose instances have no __dict__")
def namedtuple_from_a_helper_read_every_way(x):
    out = _attend(x)
    hidden, weights, (k, v) = out
    again = out[0] + out.hidden
    return again + hidden, weights.sum(-1), k + v, len(out), out._fields[1]


LossTerms = collections.namedtuple("LossTerms", "total ce aux", defaults=(None,))


@program(inputs=lambda: (r(4, 5), torch.tensor([0, 2, 1, 4])),
         breaks="calling p_pystyle.LossTerms, whose instances have no __dict__")
def namedtuple_replace_and_defaults_returned(logits, labels):
    terms = LossTerms(total=None, ce=F.cross_entropy(logits, labels))
    if terms.aux is None:
        terms = terms._replace(aux=logits.pow(2).mean() * 0.01)
    return terms._replace(total=terms.ce + terms.aux)


HeadShape = collections.namedtuple("HeadShape", ["batch", "heads", "dim"])


@program(inputs=lambda: (r(2, 12), HeadShape(2, 3, 4)), breaks="UNPACK_SEQUENCE: iterating a object")
def namedtuple_passed_in_sets_the_view(x, shape):
    b, h, d = shape
    y = x.view(shape.batch, shape.heads, shape.dim)
    return y.mean(shape.index(h)) * shape[-1] + shape.count(2), b * h * d == x.numel()


class Span(typing.NamedTuple):
    start: int
    end: int
    label: str = "span"

    def length(self):
        return self.end - self.start


@program(inputs=lambda: r(10, 3), breaks="calling p_pystyle.Span, whose instances have no __dict__")
def typing_namedtuple_with_a_method_pools_spans(x):
    spans = [Span(0, 3), Span(3, 7, "mid"), Span(7, 10)]
    pooled = [x[s.start:s.end].mean(0) * s.length() for s in spans]
    return torch.stack(pooled), sorted(s.length() for s in spans), spans[1]._asdict()


# ---- __slots__ -------------------------------------------------------------------------------

class SlotCache:
    __slots__ = ("key", "value", "seen")

    def __init__(self, key, value):
        self.key = key
        self.value = value
        self.seen = key.shape[-2]

    def update(self, k, v):
        self.key = torch.cat([self.key, k], -2)
        self.value = torch.cat([self.value, v], -2)
        self.seen += k.shape[-2]
        return self.key, self.value


@program(inputs=lambda n=3: r(2, n, 4), breaks="calling p_pystyle.SlotCache, whose instances have no __dict__")
def slots_cache_made_inside_is_updated(x):
    cache = SlotCache(x, x * 2)
    k, v = cache.update(x + 1, x - 1)
    scores = (x @ k.transpose(-1, -2)).softmax(-1)
    return scores @ v, cache.seen


class RunningStats:
    __slots__ = ("mean", "count")

    def __init__(self, mean, count=0):
        self.mean = mean
        self.count = count

    def __eq__(self, other):
        return (type(other) is type(self) and self.count == other.count
                and torch.allclose(self.mean, other.mean, atol=1e-5))


@program(inputs=lambda: (r(4, 3), RunningStats(torch.zeros(3), 4)))
def slots_object_passed_in_is_updated(x, stats):
    stats.count += x.shape[0]
    stats.mean = stats.mean + (x.mean(0) - stats.mean) * (x.shape[0] / stats.count)
    return x - stats.mean


# ---- functools -------------------------------------------------------------------------------

def scaled_activation(x, act=F.relu, scale=1.0, shift=0.0):
    return act(x) * scale + shift


class PartialMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = functools.partial(scaled_activation, act=F.gelu, scale=0.5)
        self.norm = functools.partial(F.layer_norm, normalized_shape=(4,), eps=1e-6)

    def forward(self, x):
        return self.norm(self.act(self.fc(x), shift=1.0))


partial_mlp = inference(PartialMLP())


@program(inputs=lambda: r(3, 4))
def partials_made_in_init_called_in_forward(x):
    return partial_mlp(x)


@program(inputs=lambda: r(3, 4), breaks="calling functools.partial")
def partial_of_a_user_function_made_in_forward(x):
    doubled = functools.partial(scaled_activation, scale=2.0)
    gelu_doubled = functools.partial(doubled, act=F.gelu)
    return doubled(x), gelu_doubled(x, shift=-1.0), doubled.keywords["scale"], gelu_doubled.func is scaled_activation


@program(inputs=lambda n=3: r(2, n, 4, 2))
def reduce_multiplies_the_trailing_dims(x):
    flat = functools.reduce(operator.mul, x.shape[1:], 1)
    masks = [x > -1, x.abs() < 2, x < 0.5]
    return x.reshape(x.shape[0], flat), functools.reduce(torch.logical_and, masks), flat


@functools.lru_cache(maxsize=16)
def _num_patches(image_size, patch_size):
    return (image_size // patch_size) ** 2


@program(inputs=lambda: r(2, 16, 3), breaks="calling a functools._lru_cache_wrapper")
def lru_cache_helper_sizes_the_positions(x):
    n = _num_patches(8, 2)
    pos = torch.arange(n, dtype=x.dtype)[None, :, None]
    return x + pos / n, n


def scaled_by(factor):
    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs) * factor
        return wrapper
    return decorator


@scaled_by(0.5)
def residual_mix(x, y, *, alpha=1.0):
    """Mixes a residual in."""
    return x + alpha * y


@program(inputs=lambda: (r(3, 4), r(3, 4)))
def wraps_decorator_factory_scales_the_result(x, y):
    return (residual_mix(x, y, alpha=2.0), residual_mix.__wrapped__(x, y), residual_mix.__name__,
            residual_mix.__doc__)


# ---- strings ---------------------------------------------------------------------------------

class NamedBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleDict({f"block_{i:02d}": nn.Linear(4, 4) for i in range(3)})

    def forward(self, x, skip="block_01"):
        used = []
        for i in range(len(self.blocks)):
            name = f"block_{i:02d}"
            if name == skip:
                continue
            x = self.blocks[name](x).tanh()
            used.append(f"{name:>10}|{i:<3d}|{x.shape[-1]:#x}")
        return x, used


named_blocks = inference(NamedBlocks())


@program(inputs=lambda: r(2, 4), breaks="the format spec '#x'")
def fstring_format_specs_pick_the_blocks(x):
    return named_blocks(x)


class ResNetish(nn.Module):
    def __init__(self):
        super().__init__()
        for i in range(1, 4):
            setattr(self, "layer%d" % i, nn.Linear(4, 4))

    def forward(self, x):
        names = []
        for i in range(1, 4):
            name = "layer%d" % i
            x = getattr(self, name)(x).relu() + x
            names.append("%s.%s" % (type(self).__name__, name))
        return x, names, "%d/%d layers, %s" % (len(names), 3, "ok")


resnetish = inference(ResNetish())


@program(inputs=lambda: r(2, 4))
def percent_format_names_the_layers(x):
    return resnetish(x)


@program(inputs=lambda: {"module.encoder.weight": r(4, 4), "module.encoder.bias": r(4), "module.head.weight": r(2, 4),
                         "num_batches_tracked": torch.tensor(3)}, breaks="str.rsplit()")
def str_methods_strip_the_state_dict_prefix(state):
    cleaned = {k.replace("module.", "", 1): v for k, v in state.items() if k.startswith("module.")}
    encoder = {k.split(".", 1)[1]: v for k, v in cleaned.items() if k.split(".")[0] == "encoder"}
    y = F.linear(torch.ones(1, 4), encoder["weight"], encoder["bias"])
    head = ".".join(["head", "weight"])
    leaves = "/".join(k.rsplit(".", 1)[-1] for k in cleaned)
    return F.linear(y, cleaned[head]), sorted(cleaned), leaves, head.upper().endswith("WEIGHT")


@program(inputs=lambda: r(2, 6))
def str_format_with_specs_names_the_heads(x):
    heads = x.view(2, 3, 2).unbind(1)
    out = {"head{:d}".format(i): h.sum(-1) for i, h in enumerate(heads)}
    label = "{name}[{n:>3}] {ratio:.2f}".format(name="attn", n=len(heads), ratio=0.25)
    return out, label, f"{len(heads):03d}|{'q':^5}|{0.5:.1%}"


# ---- dicts -----------------------------------------------------------------------------------

@program(inputs=lambda: r(3, 4))
def dict_from_keywords_zip_and_comprehension(x):
    names = ("query", "key", "value")
    proj = dict(zip(names, x.unbind(0)))
    opts = dict(scale=0.5, causal=True, **{"window": 2})
    squared = {k: v.square() * opts["scale"] for k, v in proj.items() if k != "value"}
    del proj["key"]
    merged = {**squared, **proj}
    return merged, opts, "key" in proj, list(merged.keys()), sum(len(k) for k in merged)


@program(inputs=lambda: (r(2, 3), {"past_key": r(2, 1), "seen": 1}), breaks="assigning to an item of a dict")
def caller_cache_dict_is_updated(x, cache):
    snapshot = cache.copy()
    cache["past_key"] = torch.cat([cache["past_key"], x[:, :1]], -1)
    cache["seen"] = cache.get("seen", 0) + 1
    cache.setdefault("first", x[:, 0])
    cache.update(last=x[:, -1])
    dropped = cache.pop("nonexistent", None)
    return x * snapshot["seen"] + cache["past_key"].sum(-1, keepdim=True), dropped, len(snapshot)


@program(inputs=lambda: r(3, 4), breaks="attribute 'fromkeys' of a builtin")
def dict_keys_values_and_fromkeys_for_loss_weights(x):
    weights = dict.fromkeys(("ce", "aux", "z"), 1.0)
    weights.update(aux=0.1)
    terms = {"ce": x.mean(), "aux": x.square().mean(), "z": x.logsumexp(-1).square().mean()}
    total = sum(weights[k] * v for k, v in terms.items())
    return total, list(weights.values()), sorted(terms.keys(), reverse=True)


ACTIVATIONS = {"gelu": F.gelu, "silu": F.silu}


def get_activation(name):
    try:
        return ACTIVATIONS[name]
    except KeyError:
        return F.relu


@program(inputs=lambda: r(3, 4), breaks="a missing dict key")
def try_except_keyerror_around_a_missing_key(x):
    act = get_activation("swish")
    try:
        scale = {"a": 1}["missing"]
    except KeyError as e:
        scale = len(str(e))
    return act(x) * scale, get_activation("gelu")(x)


@program(inputs=lambda: r(4, 3), breaks="defaultdict")
def defaultdict_of_floats_accumulates_losses(x):
    losses = collections.defaultdict(float)
    for i, row in enumerate(x):
        losses["even" if i % 2 == 0 else "odd"] += row.square().mean()
    losses["count"] += len(x)
    return dict(losses), sorted(losses), losses.default_factory is float


@program(inputs=lambda: r(2, 4), breaks="dict.update() from a list")
def ordereddict_of_stages_run_in_order_and_reversed(x):
    stages = collections.OrderedDict([("stem", 2.0), ("stage1", 0.5), ("stage2", -1.0)])
    stages["head"] = 3.0
    features = collections.OrderedDict()
    for name, scale in stages.items():
        x = x * scale + 1
        features[name] = x
    last_name = next(reversed(features))
    first = next(iter(features.values()))
    return features, last_name, first, list(stages) == ["stem", "stage1", "stage2", "head"]


# ---- lists, tuples, sets ---------------------------------------------------------------------

@program(inputs=lambda: r(3, 4))
def list_comprehension_with_a_condition_and_slices(x):
    hidden = [x * i for i in range(6)]
    even = [h for i, h in enumerate(hidden) if i % 2 == 0]
    last_two = hidden[-2:]
    skipped = hidden[1:-1:2]
    backwards = hidden[::-1]
    return torch.stack(even), sum(last_two), torch.cat(skipped), backwards[0], len(skipped)


@program(inputs=lambda: (r(2, 4), [r(2, 4)]), breaks="list.insert() of a list of the call")
def caller_list_collects_hidden_states(x, collected):
    collected.append(x)
    collected.insert(0, x.neg())
    collected.extend(t * 2 for t in collected[:2])
    first = collected.pop(0)
    collected.reverse()
    return torch.stack(collected).sum(0) + first, len(collected)


@program(inputs=lambda: r(3, 2), falls_back="a graph break with a list both in the frame's state and inside it")
def list_sort_by_key_orders_the_features(x):
    features = [("p5", x * 5), ("p3", x * 3), ("p4", x * 4)]
    features.sort(key=lambda item: int(item[0][1:]))
    names = [name for name, _ in features]
    features.reverse()
    return torch.stack([t for _, t in features]), names, names.index("p4"), names.count("p3")


@program(inputs=lambda n=3: r(2, n, 8))
def size_tuple_concatenated_for_the_head_view(x):
    new_shape = x.size()[:-1] + (2, 4)
    heads = x.view(new_shape).transpose(1, 2)
    merged_shape = heads.shape[:1] + (heads.shape[2],) + (-1,)
    padding = (1,) * 2 + (0, 0)
    padded = F.pad(heads, padding)
    return heads.transpose(1, 2).reshape(merged_shape), padded, new_shape, len(set(padding)), padding.count(0)


SUPPORTED_ROPE = frozenset({"default", "linear", "dynamic"})


@program(inputs=lambda: call(r(4, 4), rope_type="linear"), breaks="CONTAINS_OP: calling a types.BuiltinFunctionType")
def set_literal_membership_picks_the_scaling(x, rope_type):
    if rope_type not in SUPPORTED_ROPE:
        raise ValueError(f"unknown rope type {rope_type}")
    if rope_type in {"linear", "dynamic"}:
        x = x / 2
    skip = {"bias"} | {"norm"}
    return x, sorted(skip & {"norm", "weight"}), len(SUPPORTED_ROPE - {"default"}), "bias" in skip


# ---- builtins and itertools over Python numbers ----------------------------------------------

@program(inputs=lambda: r(4, 6))
def builtins_over_python_numbers_pick_the_split(x):
    sizes = [1, 2, 3]
    assert sum(sizes) == x.shape[-1]
    parts = x.split(sizes, -1)
    widest = sizes.index(max(sizes))
    out = [p.sum(-1) * w for w, p in zip(sizes, parts)]
    for i, p in enumerate(parts, start=1):
        out.append(p.mean(-1) / i)
    return torch.stack(out), widest, min(sizes), sum(s * 2 for s in sizes), max(0.5, min(sizes) / 4)


@program(inputs=lambda: r(2, 10), breaks="calling itertools.accumulate")
def itertools_accumulate_gives_the_split_offsets(x):
    sizes = [2, 3, 5]
    ends = list(itertools.accumulate(sizes))
    starts = [0] + ends[:-1]
    chunks = [x[:, s:e] for s, e in zip(starts, ends)]
    scales = [1.0, 0.5]
    out = [c * (1.0 if sc is None else sc) for c, sc in itertools.zip_longest(chunks, scales)]
    return torch.cat(out, -1), ends, list(itertools.accumulate(sizes, operator.mul))


class TinyUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.downs = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.ups = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        skips = []
        for down in self.downs:
            x = down(x).relu()
            skips.append(x)
        for up, skip in zip(self.ups, reversed(skips)):
            x = up(x + skip)
        return x


tiny_unet = inference(TinyUNet())


@program(inputs=lambda: r(2, 4))
def zip_with_reversed_skips_in_a_unet(x):
    return tiny_unet(x)


@program(inputs=lambda: r(3, 4))
def map_and_filter_over_optional_tensors(x):
    maybe = [x, None, x * 2, None]
    present = list(filter(lambda t: t is not None, maybe))
    activated = list(map(torch.tanh, present))
    scaled = list(map(lambda t, s: t * s, activated, [0.5, 2.0]))
    return torch.stack(scaled), len(present), all(t is not None for t in present), any(t is None for t in maybe)


class DtypeFollower(nn.Module):
    def __init__(self, act="silu"):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.act = act

    @property
    def dtype(self):
        return next(self.parameters()).dtype

    def forward(self, x):
        act = self.act if callable(self.act) else ACTIVATIONS.get(self.act, F.relu)
        buffer = next(self.buffers(), None)
        return act(self.proj(x.to(self.dtype))), buffer is None


dtype_follower = inference(DtypeFollower())


@program(inputs=lambda: r(3, 4), breaks="attribute 'add' of a set")
def next_of_parameters_gives_the_module_dtype(x):
    return dtype_follower(x)


# ---- introspection ---------------------------------------------------------------------------

def _attention_impl(q, k, v, scale=None, dropout_p=0.0):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return F.dropout((q @ k.transpose(-1, -2) * scale).softmax(-1), p=dropout_p, training=False) @ v


@program(inputs=lambda: r(2, 3, 4))
def inspect_signature_of_a_function_filters_kwargs(x):
    sig = inspect.signature(_attention_impl)
    offered = {"scale": 0.5, "dropout_p": 0.0, "sliding_window": 2}
    kwargs = {k: v for k, v in offered.items() if k in sig.parameters}
    defaults = {k: p.default for k, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}
    return _attention_impl(x, x, x, **kwargs), sorted(kwargs), defaults


@program(inputs=lambda: r(2, 3, 4))
def signature_defaults_fill_the_missing_kwargs(x):
    kwargs = {"scale": 0.25}
    for param in inspect.signature(_attention_impl).parameters.values():
        if param.default is not inspect.Parameter.empty and param.name not in kwargs:
            kwargs[param.name] = param.default
    return _attention_impl(x, x, x, **kwargs), sorted(kwargs)


class MaskedLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, attention_mask=None):
        return self.proj(x) if attention_mask is None else self.proj(x) * attention_mask


class PlainLayer(nn.Module):
    def forward(self, x):
        return x * 2


layers_with_and_without_masks = inference(nn.ModuleList([MaskedLayer(), PlainLayer()]))


@program(inputs=lambda: r(2, 4), breaks="attribute '__code__' of a method")
def code_argcount_of_a_bound_forward_decides_the_mask(x):
    mask = (x > 0).to(x.dtype)
    for layer in layers_with_and_without_masks:
        code = layer.forward.__code__
        if "attention_mask" in code.co_varnames[:code.co_argcount]:
            x = layer(x, attention_mask=mask)
        else:
            x = layer(x)
    return x


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


user_norm = inference(RMSNorm(4))


@program(inputs=lambda: r(3, 4), breaks="LOAD_GLOBAL: __name__")
def names_of_user_classes_and_functions_choose_the_path(x):
    if type(user_norm).__name__ == "RMSNorm":
        y = user_norm(x)
    else:
        y = F.layer_norm(x, (4,))
    tag = f"{user_norm.__class__.__qualname__}.{scaled_activation.__name__}"
    return y, tag, _attention_impl.__module__ == __name__


class OptionalParts(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4, bias=False)
        self.gamma = nn.Parameter(torch.full((4,), 0.5))

    def forward(self, x):
        y = self.proj(x)
        if getattr(self.proj, "bias", None) is not None:
            y = y + 100
        if hasattr(self, "gamma"):
            y = y * self.gamma
        if hasattr(self, "beta"):
            y = y + self.beta
        return y * getattr(self, "scale", 2.0), getattr(self.proj, "in_features", 0)


optional_parts = inference(OptionalParts())


@program(inputs=lambda: r(3, 4))
def getattr_and_hasattr_with_defaults_on_a_module(x):
    return optional_parts(x)


# ---- logging and warnings --------------------------------------------------------------------

class LoggingBlock(nn.Module):
    def forward(self, x):
        logger.info("running %s on %d rows", type(self).__name__, x.shape[0])
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("mean %s", x.mean())
        return x.relu()


logging_block = LoggingBlock()


@program(inputs=lambda: r(3, 4))
def logger_info_and_is_enabled_for_in_forward(x):
    return logging_block(x)


_WARNED = set()


def warn_once(message):
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, UserWarning)


@program(inputs=lambda: r(2, 4), breaks="calling a types.BuiltinFunctionType")
def warn_once_through_a_global_set(x):
    if x.dim() == 2:
        warn_once("expected a batch of sequences; adding a dimension")
        x = x[None]
    return x.softmax(-1)


@program(inputs=lambda: r(2, 4), breaks="kiln reads imported modules by name")
def catch_warnings_silences_a_deprecation(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.warn("old path", FutureWarning)
        y = x * 3
    return y


# ---- context managers ------------------------------------------------------------------------

@program(inputs=lambda: call(r(3, 4), frozen=True))
def nullcontext_or_no_grad_chosen_by_a_flag(x, frozen):
    ctx = torch.no_grad() if frozen else contextlib.nullcontext()
    with ctx:
        inside = torch.is_grad_enabled()
        y = x * 2
    with contextlib.nullcontext(y) as same:
        z = same + 1
    return z, inside, torch.is_grad_enabled()


class Recorder:
    def __init__(self, log, name):
        self.log = log
        self.name = name

    def __enter__(self):
        self.log.append(f"enter {self.name}")
        return self

    def __exit__(self, exc_type, exc, tb):
        self.log.append(f"exit {self.name}")
        return False


@program(inputs=lambda: r(3, 4), breaks="calling collections.deque")
def exit_stack_enters_contexts_and_a_callback(x):
    log = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(Recorder(log, "a"))
        stack.enter_context(torch.no_grad())
        stack.callback(log.append, "callback")
        y = x.softmax(-1)
        grad_inside = torch.is_grad_enabled()
    return y, log, grad_inside


class temporarily:
    def __init__(self, obj, name, value):
        self.obj, self.name, self.value = obj, name, value

    def __enter__(self):
        self.old = getattr(self.obj, self.name)
        setattr(self.obj, self.name, self.value)
        return self.obj

    def __exit__(self, exc_type, exc, tb):
        setattr(self.obj, self.name, self.old)
        return False


class ScaledBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 1.0

    def forward(self, x):
        return x * self.scale


scaled_block = ScaledBlock()


@program(inputs=lambda: r(3, 4), breaks="calling builtins.setattr")
def context_manager_swaps_a_module_attribute(x):
    with temporarily(scaled_block, "scale", 3.0) as block:
        a = block(x)
    b = scaled_block(x)
    return a, b, scaled_block.scale


@contextlib.contextmanager
def record_stage(log, name):
    log.append(f"start {name}")
    try:
        yield len(log)
    finally:
        log.append(f"end {name}")


@program(inputs=lambda: (r(3, 4), ["init"]), breaks="a @contextlib.contextmanager's context manager")
def contextmanager_records_into_the_callers_list(x, log):
    with record_stage(log, "attn") as depth:
        y = x.softmax(-1) * depth
    return y, len(log)


# ---- try, assert -----------------------------------------------------------------------------

@program(inputs=lambda: r(3, 4))
def try_except_else_finally_in_order(x):
    steps = []
    try:
        y = x.abs().sqrt()
        steps.append("try")
    except (ValueError, RuntimeError) as e:
        steps.append(type(e).__name__)
        y = x
    else:
        steps.append("else")
        y = y + 1
    finally:
        steps.append("finally")
    return y, steps


class LegacyConfig:
    def __init__(self):
        self.hidden_size = 6


@program(inputs=lambda: (r(2, 6), LegacyConfig()), breaks="sliding_window is missing (AttributeError")
def try_except_attribute_error_on_a_missing_config_field(x, config):
    try:
        window = config.sliding_window
    except AttributeError:
        window = None
    if window is None:
        window = config.hidden_size // 2
    return x[:, -window:], window


@program(inputs=lambda n=4: r(2, n, 8))
def assert_divisibility_dtype_and_length(x):
    heads = 2
    assert x.shape[-1] % heads == 0, f"dim {x.shape[-1]} not divisible by {heads}"
    assert x.dtype in (torch.float32, torch.float64, torch.bfloat16), x.dtype
    assert isinstance(heads, int) and heads > 0
    assert x.shape[1] <= 64, "sequence too long"
    return x.view(*x.shape[:2], heads, -1).sum(-1)


# ---- finfo, iinfo, modes ---------------------------------------------------------------------

@program(inputs=lambda: r(3, 8))
def finfo_eps_in_a_norm_follows_the_dtype(x):
    eps = torch.finfo(x.dtype).eps
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps), eps


@program(inputs=lambda: (r(2, 4) * 1e4, torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])))
def finfo_max_clamp_and_iinfo_min_fill(hidden, mask):
    clamp_value = torch.finfo(hidden.dtype).max - 1000
    hidden = torch.clamp(hidden, min=-clamp_value, max=clamp_value)
    ids = mask.cumsum(-1).masked_fill(mask == 0, torch.iinfo(torch.int32).min)
    return hidden, ids, torch.iinfo(mask.dtype).bits


@program(inputs=lambda: r(2, 4))
def grad_mode_default_dtype_and_autocast_queries(x):
    outside = torch.is_grad_enabled()
    with torch.no_grad():
        inside = torch.is_grad_enabled()
        y = x * 2
    upcast = torch.is_autocast_enabled()
    same = torch.get_default_dtype() == x.dtype
    return (y.float() if upcast else y) + same, outside, inside, same


# ---- enums -----------------------------------------------------------------------------------

class Channel(enum.IntEnum):
    R = 0
    G = 1
    B = 2


@program(inputs=lambda: r(2, 3, 4), breaks="indexing a tensor with a object")
def intenum_indexes_the_channels(x):
    green = x[:, Channel.G]
    red_blue = x[:, [Channel.R, Channel.B]]
    return green * Channel.B + red_blue.sum(1), int(Channel.B) + 1, Channel(1).name, Channel.G < Channel.B


class PoolType(enum.Enum):
    MEAN = enum.auto()
    MAX = enum.auto()
    CLS = enum.auto()


class Pooler(nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.pool = PoolType[pool.upper()]

    def forward(self, x):
        if self.pool == PoolType.MEAN:
            return x.mean(1), self.pool.name
        if self.pool in (PoolType.MAX,):
            return x.amax(1), self.pool.name
        return x[:, 0], self.pool.name


poolers = [Pooler(p) for p in ("mean", "max", "cls")]


@program(inputs=lambda: r(2, 3, 4), breaks="GET_ITER: iterating a type")
def enum_looked_up_by_name_chooses_the_pooling(x):
    outs = [p(x) for p in poolers]
    return outs, [p.value for p in PoolType], len(PoolType)


class AttnImpl(str, enum.Enum):
    EAGER = "eager"
    SDPA = "sdpa"


def _eager_attention(q, k, v):
    return (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).softmax(-1) @ v


ATTENTION_FUNCTIONS = {AttnImpl.EAGER: _eager_attention, AttnImpl.SDPA: F.scaled_dot_product_attention}


@program(inputs=lambda: call(r(2, 3, 4), impl="sdpa"), atol=1e-5,
         breaks="a dict key that is not a str, int, bool or None")
def str_enum_keys_looked_up_with_a_plain_string(x, impl):
    fn = ATTENTION_FUNCTIONS[impl]
    eager = ATTENTION_FUNCTIONS[AttnImpl("eager")]
    return fn(x, x, x), eager(x, x, x), AttnImpl(impl).name


# ---- dataclasses -----------------------------------------------------------------------------

@dataclasses.dataclass
class ForwardState:
    hidden: torch.Tensor
    layer_outputs: list = dataclasses.field(default_factory=list)
    meta: dict = dataclasses.field(default_factory=dict)
    step: int = 0


@program(inputs=lambda: r(2, 4))
def dataclass_with_default_factories_collects_layers(x):
    state = ForwardState(hidden=x)
    for i in range(3):
        state.hidden = state.hidden.tanh() * (i + 1)
        state.layer_outputs.append(state.hidden)
        state.meta[f"layer{i}"] = i
        state.step += 1
    return state


@dataclasses.dataclass(frozen=True)
class AttnConfig:
    heads: int = 2
    dropout: float = 0.0
    causal: bool = True


@program(inputs=lambda: (r(2, 4, 6), AttnConfig()), breaks="attribute '__setattr__' of a builtin")
def dataclasses_replace_and_asdict_on_a_frozen_config(x, config):
    wider = dataclasses.replace(config, heads=3, causal=False)
    as_dict = dataclasses.asdict(wider)
    h = x.view(2, 4, wider.heads, -1)
    return h.sum(-1), as_dict, wider.heads != config.heads, config.causal


# ---- mutation the caller sees, globals -------------------------------------------------------

@program(inputs=lambda: (r(2, 3), {"layers": [{"scale": 1.0}, {"scale": 2.0}], "calls": 0}),
         breaks="assigning to an item of a dict")
def nested_caller_structure_is_mutated(x, registry):
    registry["calls"] += 1
    for entry in registry["layers"]:
        entry["out"] = x * entry["scale"]
        entry["scale"] *= 2
    registry["layers"].append({"scale": 0.0})
    return sum(e["out"] for e in registry["layers"][:2])


@dataclasses.dataclass
class TrainState:
    step: int = 0
    ema: torch.Tensor = None
    history: list = dataclasses.field(default_factory=list)


@program(inputs=lambda: (r(3), TrainState(ema=torch.zeros(3))))
def dataclass_state_passed_in_is_updated(x, state):
    state.step += 1
    state.ema = state.ema * 0.9 + x * 0.1
    state.history.append(state.step)
    return x - state.ema


FORWARD_CALLS = 0
SEEN_SHAPES = []


@program(inputs=lambda: r(2, 3), breaks="the STORE_GLOBAL instruction", recompiles="G['FORWARD_CALLS'] == ")
def global_counter_incremented_in_forward(x):
    global FORWARD_CALLS
    before = FORWARD_CALLS
    FORWARD_CALLS += 1
    SEEN_SHAPES.append(tuple(x.shape))
    return x * (FORWARD_CALLS - before)


step = 0


def next_step():
    global step
    step += 1
    return step


@program(inputs=lambda: r(2, 3), breaks="the STORE_GLOBAL instruction")
def global_step_reset_then_advanced_by_a_helper(x):
    global step
    step = 0
    a = next_step()
    b = next_step()
    return x * a + b, step


# ---- instances of subclasses of builtins, setters, one object in several places -------------------

EncoderOut = collections.namedtuple("EncoderOut", ["hidden", "pooled"])


class Act(str, enum.Enum):
    GELU = "gelu"
    RELU = "relu"


class Axis(enum.IntEnum):
    TIME = 1


def _unpack(out):
    """HF's pattern: a tuple-like output indexed, a dict-like one read by key."""
    if isinstance(out, tuple):
        return out[0]
    if isinstance(out, dict):
        return out["hidden"]
    return out.hidden


@program(inputs=lambda n=3: r(2, n, 4), breaks="calling p_pystyle.EncoderOut, whose instances have no __dict__")
def isinstance_of_builtin_bases_picks_the_branch(x):
    as_tuple = _unpack(EncoderOut(x * 2, x.mean(1)))
    as_dict = _unpack(collections.OrderedDict(hidden=x + 1))
    act = Act.GELU
    gelu = F.gelu(x) if isinstance(act, str) and act == "gelu" else F.relu(x)
    summed = x.sum(int(Axis.TIME)) if isinstance(Axis.TIME, int) else x
    return as_tuple, as_dict, gelu, summed, isinstance(act, (int, str)), isinstance(Axis.TIME, str)


class ClampedTemperature(nn.Module):
    """A temperature whose setter clamps (the assignment runs the setter, as in eager)."""

    def __init__(self):
        super().__init__()
        self._t = 1.0

    @property
    def temperature(self):
        return self._t

    @temperature.setter
    def temperature(self, value):
        self._t = max(value, 0.5)

    def forward(self, x, t):
        self.temperature = t
        return torch.softmax(x / self.temperature, dim=-1)


@program(inputs=lambda n=4: (ClampedTemperature(), r(2, n), 0.1),
         breaks="a builtins.property of its class (a setter)")
def property_setter_on_the_module_runs_before_the_read(m, x, t):
    return m(x, t), m.temperature


class Recorder:
    """Records each attribute set through its own __setattr__."""

    def __init__(self):
        object.__setattr__(self, "log", [])

    def __setattr__(self, name, value):
        self.log.append(name)
        object.__setattr__(self, name, value * 2 if isinstance(value, (int, float)) else value)


@dataclasses.dataclass(frozen=True)
class FrozenSpec:
    dim: int


@program(inputs=lambda n=3: (r(n), Recorder(), FrozenSpec(4)),
         breaks="whose class has a __setattr__ of its own")
def custom_setattr_and_frozen_dataclass_assignment(x, rec, spec):
    rec.scale = 3
    try:
        spec.dim = 8
        frozen = False
    except dataclasses.FrozenInstanceError:
        frozen = True
    return x * rec.scale, rec.log, frozen, spec.dim


class Holder:
    pass


@program(inputs=lambda n=3: (r(n), Holder(), []), falls_back="ends up in two places")
def one_dict_stored_on_an_object_in_a_list_and_returned(x, holder, sink):
    state = {"y": x * 2}
    holder.cache = state
    sink.append(state)
    return state


softmax_last = functools.partial(torch.softmax, dim=-1)
_ACTIVATIONS = {"gelu_tanh": functools.partial(F.gelu, approximate="tanh"), "relu": F.relu}


class GatedHead(nn.Module):
    """Activations and a gate picked from config as partials (HF's ACT2FN style)."""

    def __init__(self, act="gelu_tanh"):
        super().__init__()
        self.proj = nn.Linear(4, 8)
        self.act = _ACTIVATIONS[act]
        self.gate = functools.partial(scaled_activation, act=torch.sigmoid, scale=2.0)
        self.nested = functools.partial(self.gate, shift=0.5)  # a partial of a partial

    def forward(self, x, bias):
        h = self.act(self.proj(x))
        g = self.nested(h, scale=1.0)  # the call's keyword over the partial's
        add_bias = functools.partial(torch.add, other=bias)
        return softmax_last(add_bias(h * g))


@program(inputs=lambda n=3: (GatedHead(), r(n, 4), r(8)), atol=1e-5, breaks="calling functools.partial, whose class")
def partials_from_config_globals_and_nested(head, x, bias):
    return head(x, bias)


@program(inputs=lambda n=3: ([r(n, 4) for _ in range(3)], r(4, 4)), atol=1e-5)
def reduce_folds_layers_and_sums_with_an_initial_value(hiddens, w):
    fused = functools.reduce(operator.add, hiddens)
    chained = functools.reduce(lambda h, _: torch.tanh(h @ w), range(2), hiddens[0])
    scaled = functools.reduce(operator.truediv, [8.0, 2.0], 64.0)
    return fused, chained, functools.reduce(operator.matmul, [w, w, w]), scaled
