"""Helpers the corpus calls across modules: their globals are this module's."""
import torch

SCALE = 10.0


def scaled(x):
    return x * SCALE + len([1, 2])


def activated(x):
    return torch.relu(x) * SCALE
