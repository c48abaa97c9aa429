"""Python builtins, math on constants, getattr/hasattr, strings."""
import dataclasses
import itertools
import math

import torch
import torch.nn as nn

from corpus import call, inference, program

r = torch.randn


class Cfg:
    def __init__(self):
        self.scale = 2.5
        self.name = "cfg"
        self.layers = 3


cfg = Cfg()
cfg_alias = cfg


@dataclasses.dataclass
class Pair:
    a: torch.Tensor
    b: float = 2.0


@program(inputs=lambda: r(4, 4))
def object_attributes(x):
    return x * cfg.scale + cfg.layers


@program(inputs=lambda: (r(4, 4), Cfg()))
def object_argument(x, c):
    return x * c.scale


@program(inputs=lambda: r(4, 4))
def hasattr_present(x):
    return x * 2 if hasattr(cfg, "scale") else x


@program(inputs=lambda: r(4, 4))
def getattr_const(x):
    return x * getattr(cfg, "scale")


@program(inputs=lambda: r(4, 4))
def hasattr_branch(x):  # False, its absence guarded
    if hasattr(cfg, "missing"):
        return x
    return x + 1


@program(inputs=lambda: r(4, 4))
def math_functions(x):
    return x * math.exp(1.0) + math.log(2.0) - math.sqrt(9) + math.floor(2.7) + math.ceil(0.2)


@program(inputs=lambda: r(4, 4))
def math_trig(x):
    return x * math.cos(0.5) + math.sin(0.5) + math.tanh(0.1)


@program(inputs=lambda: r(4, 4))
def int_float_builtins(x):
    return x * float(3) + int(2.9) + bool(1)


@program(inputs=lambda: r(4, 4))
def integer_arithmetic(x):
    n = 17
    return x * (n // 5) + (n % 5) + (-n // 4) + (2 ** 3) + (n & 3) + (n | 8) + (n ^ 1) + (n << 1) + (n >> 2)


@program(inputs=lambda: r(4, 4))
def float_arithmetic(x):
    a = 7.5
    return x * (a / 2) + a // 2 + a % 2 + a ** 0.5


@program(inputs=lambda: r(4, 4), breaks="formatting a float")  # Python's repr of 1.5
def string_building(x):
    s = "ab" + "cd"
    t = f"{s}-{3}-{1.5}-{True}"
    return x * len(t)


@program(inputs=lambda: r(4, 4))
def string_compare(x):
    mode = "train"
    return x * 2 if mode == "train" and mode != "eval" and mode < "zz" else x


@program(inputs=lambda: r(4, 4))
def tuple_compare(x):
    version = (1, 2)
    return x + 1 if version == (1, 2) else x


@program(inputs=lambda: r(4, 4))
def dtype_checks(x):
    if x.dtype == torch.float32 and x.dtype.is_floating_point:
        return x.double()
    return x


@program(inputs=lambda: r(4, 4))
def device_checks(x):
    if x.device.type == "cpu" and not x.is_cuda:
        return x + 1
    return x


@program(inputs=lambda: r(4, 4), breaks="making a torch.nn")
def isinstance_module(x):
    m = nn.ReLU()
    return x if isinstance(m, nn.Linear) else x * 3


@program(inputs=lambda: r(4, 4))
def chained_comparison(x):
    n = x.shape[0]
    if 1 < n <= 4:
        return x * 2
    return x


@program(inputs=lambda: r(4, 4))
def none_checks(x):
    a = None
    return x + (1 if a is None else 2)


@program(inputs=lambda: r(4, 4))
def walrus(x):
    if (n := x.shape[1]) > 2:
        return x * n
    return x


@program(inputs=lambda: r(4, 4))
def conditional_expression_chain(x):
    k = 5
    return x * (1 if k < 3 else 2 if k < 6 else 3)


@program(inputs=lambda: r(4, 4))
def requires_grad_attr(x):
    return x * 2 if not x.requires_grad else x


@program(inputs=lambda: r(4, 4), breaks="made in the traced code")
def sets_an_attribute_of_a_new_object(x):
    c = Cfg.__new__(Cfg) if False else None
    s = State() if False else None
    (lambda: None).attr = 1 if False else None
    return x.new_attr if False else _set_on_new(x)


def _set_on_new(x):
    xs = [x]
    xs.append(1)
    d = {}
    d["k"] = x
    return _helper_sets(x)


def _helper_sets(x):
    f = lambda: None
    f.value = 3
    return x


class State:
    def __init__(self):
        self.calls = 0
        self.last = None
        self.log = []


@program(inputs=lambda: (r(4, 4), State()))
def side_effect_setattr(x, state):
    state.calls = state.calls + 1
    y = x * 2
    state.last = y
    return y + state.calls


@program(inputs=lambda: (r(4, 4), []))
def side_effect_append(x, out):
    out.append(x.sum())
    out.append("done")
    return x * len(out)


@program(inputs=lambda: (r(4, 4), State()))
def side_effect_list_attr(x, state):
    state.log.append(x.mean())
    state.log += [x.max()]
    return x


# Every argument a builtin takes is read, or the call is refused: never a result that
# leaves one out.
@program(inputs=lambda: r(4, 4))
def sum_with_a_start_keyword(x):
    return sum([x, x * 2], start=x + 1), sum([x], x)


@program(inputs=lambda: r(4, 4))
def enumerate_with_a_start_keyword(x):
    return [x * i for i, _ in enumerate([x, x], start=3)]


@program(inputs=lambda: r(4, 4))
def zip_strict_of_equal_lengths(x):
    return [a * b for a, b in zip([x, x + 1], [2, 3], strict=True)]


@program(inputs=lambda: r(4, 4))
def min_and_max_with_defaults(x):
    return x * max([], default=2) + min([1, 4], default=7)


@program(inputs=lambda: r(4, 4))
def max_with_a_key(x):
    return x * max([1, -5, 3], key=abs)


@program(inputs=lambda: r(4, 4), breaks="int() with 2 positional arguments")
def int_with_a_base(x):
    return x * int("11", 2)


@program(inputs=lambda: r(4, 4), breaks="len() with the keyword")
def len_with_a_keyword(x):
    return x * len([1], extra=1)


class _Scaled(nn.Linear):  # a subclass: isinstance(m, nn.Linear) and isinstance(m, nn.Module) hold
    pass


@program(inputs=lambda: (inference(_Scaled(4, 4)), r(2, 4)))
def isinstance_of_a_base_class(m, x):
    if isinstance(m, nn.Linear) and isinstance(m, nn.Module) and not isinstance(m, nn.ReLU):
        return m(x) * 2
    return x


@program(inputs=lambda: (r(2, 4), True))
def isinstance_of_a_bool_as_an_int(x, flag):
    return x * 2 if isinstance(flag, int) else x


@program(inputs=lambda: r(3, 4))
def max_values_and_indices_by_name(x):
    top = x.max(-1)
    return top.values * 2 + top.indices


@program(inputs=lambda: r(3, 4))
def min_returns_its_named_tuple(x):
    return x.min(0)


@program(inputs=lambda: (r(4), Pair(r(4))))
def dataclass_fields(x, p):  # fields() keeps those whose `_field_type is _FIELD`
    return x * len(dataclasses.fields(p)) + p.a


@program(inputs=lambda: r(4))
def is_through_two_paths(x):
    return x + 1 if cfg_alias is cfg else x - 1


class Attn(nn.Module):  # HF's sdpa_attention: hasattr(module, "num_key_value_groups") and ...
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        if hasattr(self, "num_key_value_groups") and self.num_key_value_groups > 1:
            x = x.repeat(1, self.num_key_value_groups)
        return self.proj(x)


attn = Attn()


@program(inputs=lambda: r(2, 4))
def hasattr_of_a_module_without_it(x):
    return attn(x)


@program(inputs=lambda: r(2, 4))
def getattr_with_a_default(x):  # HF's masking_utils: getattr(config, "is_causal", True)
    if not getattr(cfg, "is_causal", True):
        return x
    return x * getattr(cfg, "scale", 1.0) + getattr(cfg, "offset", 0.5)


def _forward(x, scale=1.0, **kwargs):
    return x * scale + len(kwargs)


@program(inputs=lambda: call(r(4), return_dict=False, scale=2.0, output_attentions=None))
def kwargs_popped_then_passed_on(x, **kwargs):  # HF's output wrappers: kwargs.pop("return_dict", ...)
    return_dict = kwargs.pop("return_dict", True)
    kwargs.pop("output_attentions", None)
    kwargs.setdefault("scale", 3.0)
    extra = kwargs.copy()
    extra.update(bias=1)
    out = _forward(x, **kwargs)
    return out if return_dict else (out, len(extra))


def _decorated(x, scale=2.0, shift=0.0):
    return x * scale + shift


def _with_defaults_from(func):  # HF's generic.py: arguments found by func.__code__.co_varnames
    def wrapper(x, **kwargs):
        for name in ("scale", "shift", "missing"):
            if name in func.__code__.co_varnames and name not in kwargs:
                kwargs[name] = 1.5
        return func(x, **kwargs)
    return wrapper


_wrapped = _with_defaults_from(_decorated)


@program(inputs=lambda: r(4))
def code_introspection_in_a_decorator(x):
    return _wrapped(x, shift=0.5)


@program(inputs=lambda: r(3, 4))
def format_specs_of_numbers_and_strings(x):
    n, f, s = x.shape[1] * 1234, 3.14159, "ab"
    texts = [f"{n:,}", f"{n:>8d}", f"{n:<8}|", f"{n:^9}|", f"{-n:08d}", f"{n:+d}", f"{n: d}", f"{n:x}",
             f"{n:X}", f"{n:o}", f"{n:b}", f"{n:_}", f"{f:.3f}", f"{f:10.2f}|", f"{-f:+.1e}", f"{f:E}",
             f"{0.25:.1%}", f"{f:*^12.4f}", f"{s:>5}", f"{s:.1}", f"{s:-<4}", f"{1e6:,.2f}", f"{n:.2f}",
             "{:>6.2f}|{:d}|{:s}".format(f, n, s), "{0:x}-{0:o}".format(255), f"{float('inf'):.2f}",
             f"{True:d}", f"{-0.0:.1f}"]
    return x * len(texts), texts


@program(inputs=lambda: r(2, 3))
def max_and_min_with_a_key_and_list_sort(x):
    sizes = [(2, "b"), (1, "a"), (3, "c"), (1, "z")]
    widest = max(sizes, key=lambda p: p[0])
    narrowest = min(sizes, key=lambda p: p[0])  # the first of the ties
    ordered = list(sizes)
    ordered.sort(key=lambda p: p[0], reverse=True)
    plain = [3, 1, 2]
    plain.sort()
    grid = [a * b for a, b in itertools.product([1, 2], repeat=2)]
    return x * widest[0] + narrowest[0], ordered, plain, grid
