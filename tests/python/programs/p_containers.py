"""Tuples, lists and dicts: built, unpacked, returned, passed in."""
import torch

from harness import call, program

r = torch.randn


@program(inputs=lambda: r(4, 4))
def return_tuple(x):
    return x, x * 2


@program(inputs=lambda: r(4, 4))
def return_nested(x):
    return (x, [x + 1, (x * 2, None)], 3)


@program(inputs=lambda: r(4, 4))
def return_dict(x):
    return {"out": x.exp(), "aux": {"sum": x.sum()}}


@program(inputs=lambda: r(4, 4))
def return_same_twice(x):
    y = x + 1
    return y, y


@program(inputs=lambda: r(4, 4))
def return_input(x):
    return x, x + 1


@program(inputs=lambda: ([r(4, 4), r(4, 4)],))
def list_argument(xs):
    return xs[0] * xs[1]


@program(inputs=lambda: ((r(4, 4), 3),))
def tuple_argument(pair):
    x, n = pair
    return x * n


@program(inputs=lambda: ({"a": r(4, 4), "b": r(4, 4)},))
def dict_argument(d):
    return d["a"] - d["b"]


@program(inputs=lambda: ({"a": r(4, 4), "b": r(4, 4)},))
def dict_items(d):
    out = 0
    for k, v in d.items():
        out = out + v
    return out


@program(inputs=lambda: r(4, 4))
def build_list_append(x):
    parts = []
    for i in range(3):
        parts.append(x * i)
    return torch.cat(parts)


@program(inputs=lambda: r(4, 4))
def list_comprehension(x):
    return torch.stack([x * i for i in range(4)])


@program(inputs=lambda: r(4, 4))
def dict_comprehension(x):
    d = {f"k{i}": x + i for i in range(3)}
    return d["k2"]


@program(inputs=lambda: r(4, 4))
def unpack_star(x):
    a, *rest = [x, x * 2, x * 3]
    return a + sum(rest)


@program(inputs=lambda: r(4, 4))
def list_slicing(x):
    xs = [x, x + 1, x + 2, x + 3]
    return xs[1:3], xs[-1], xs[::2]


@program(inputs=lambda: r(4, 4))
def list_mutation(x):
    xs = [x, x]
    xs[1] = x * 5
    xs += [x]
    xs.extend([x])
    return xs


@program(inputs=lambda: r(4, 4))
def dict_build_update(x):
    d = {"a": x}
    d["b"] = x * 2
    d.update({"c": x * 3}) if False else None
    return d


@program(inputs=lambda: r(4, 4))
def dict_get(x):
    cfg = {"scale": 2.0}
    return x * cfg.get("scale", 1.0) + cfg.get("shift", 0.5)


@program(inputs=lambda: r(4, 4))
def tuple_concat(x):
    t = (x,) + (x * 2,)
    return t * 2


@program(inputs=lambda: r(4, 4))
def len_of_containers(x):
    return x * len([1, 2, 3]) + len({"a": 1}) + len("abc")


@program(inputs=lambda: r(4, 4))
def tuple_constructor(x):
    return tuple([x, x]), list((x,))


@program(inputs=lambda: call(r(4, 4), opts={"scale": 3, "on": True}))
def config_dict(x, opts=None):
    if opts["on"]:
        x = x * opts["scale"]
    return x


@program(inputs=lambda: r(4, 4))
def return_int_constant(x):
    return x, 7, "done", 1.5, True
