"""Helpers the corpus calls across modules: their globals are this module's."""
import torch

SCALE = 10.0


def scaled(x):
    return x * SCALE + len([1, 2])


def activated(x):
    return torch.relu(x) * SCALE


def offset_by_scale(func):
    """A decorator whose wrapper reads this module's SCALE; functools.wraps gives the wrapper
    the wrapped function's __module__ (HF's decorators are such)."""
    import functools

    @functools.wraps(func)
    def wrapper(x):
        return func(x) + SCALE
    return wrapper
