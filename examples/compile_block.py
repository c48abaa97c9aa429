"""The README's main job: a nanoGPT-style transformer block compiled by the running
stack with kiln.compile, checked against eager, and what kiln made of it.

    PYTHONPATH=build/python .venv/bin/python examples/compile_block.py
"""
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln


class Block(nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        hd = c // self.heads
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(torch.ones(t, t).tril() == 0, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


def main():
    torch.manual_seed(0)
    block = Block().eval()
    fast = kiln.compile(block)
    with torch.no_grad():
        for batch in (2, 3, 8):  # the second size makes the batch dim symbolic; the third reuses it
            x = torch.randn(batch, 16, 64)
            start = time.perf_counter()
            y = fast(x)
            took = time.perf_counter() - start
            torch.testing.assert_close(y, block(x), rtol=1e-4, atol=1e-4)
            print(f"batch {batch}: matches eager ({took * 1e3:.1f} ms, first calls include compiling)")
    print(kiln.explain(fast))


if __name__ == "__main__":
    main()
