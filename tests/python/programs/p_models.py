"""Whole small models: MLPs, norms written out, GPT-style blocks."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus import inference, program

r = torch.randn
torch.manual_seed(1)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MaskedAttention(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        hd = c // self.heads
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v)) if False else (
            q.view(b, t, self.heads, hd).transpose(1, 2),
            k.view(b, t, self.heads, hd).transpose(1, 2),
            v.view(b, t, self.heads, hd).transpose(1, 2))
        att = q @ k.transpose(-2, -1) / math.sqrt(hd)
        mask = torch.ones(t, t).tril()
        att = att.masked_fill(mask == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, c))


class LlamaBlock(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.n1 = RMSNorm(d)
        self.attn = MaskedAttention(d)
        self.n2 = RMSNorm(d)
        self.ff = SwiGLU(d, 32)

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.ff(self.n2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=20, d=16, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(8, d)
        self.blocks = nn.ModuleList([LlamaBlock(d) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        b, t = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(t))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


class ConvFree(nn.Module):
    """A classifier head: pooling by mean, dropout in eval, logits and log-probs."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 10)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        pooled = x.mean(dim=1)
        logits = self.proj(self.drop(pooled))
        return logits, F.log_softmax(logits, dim=-1)


rms, swiglu, attn, llama, gpt, head = (inference(m) for m in (RMSNorm(16), SwiGLU(16, 32), MaskedAttention(), LlamaBlock(),
                                                                TinyGPT(), ConvFree()))
gpt.eval()
head.eval()


@program(inputs=lambda: r(3, 16))
def rms_norm_module(x):
    return rms(x)


@program(inputs=lambda: r(3, 16))
def swiglu_module(x):
    return swiglu(x)


@program(inputs=lambda: r(2, 5, 16), atol=1e-4)
def masked_attention(x):
    return attn(x)


@program(inputs=lambda: r(2, 5, 16), atol=1e-4)
def llama_block(x):
    return llama(x)


@program(inputs=lambda: torch.randint(0, 20, (2, 6)), atol=1e-4)
def tiny_gpt(idx):
    return gpt(idx)


@program(inputs=lambda: r(4, 7, 16), atol=1e-5)
def classifier_head(x):
    return head(x)


@program(inputs=lambda: r(5, 5))
def tril_triu(x):
    return torch.tril(x), x.triu(1), torch.tril(x, -1)


@program(inputs=lambda: r(4, 8))
def manual_layer_norm(x):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5)


@program(inputs=lambda: r(4, 8))
def manual_softmax(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


@program(inputs=lambda: r(4, 8))
def manual_gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


@program(inputs=lambda: (r(4, 8), torch.randint(0, 8, (4,))))
def nll_by_hand(logits, target):
    logp = logits.log_softmax(-1)
    return -logp.gather(1, target.unsqueeze(1)).mean()


@program(inputs=lambda: (r(8, 4), r(8, 4)))
def cosine_similarity(a, b):
    num = (a * b).sum(-1)
    den = a.pow(2).sum(-1).sqrt() * b.pow(2).sum(-1).sqrt()
    return num / den.clamp(min=1e-8)


@program(inputs=lambda: (r(6, 3), r(6, 3)))
def mse_loss(pred, target):
    return ((pred - target) ** 2).mean()


@program(inputs=lambda: r(2, 3, 8))
def residual_stack(x):
    for scale in (0.5, 0.25, 0.125):
        x = x + scale * torch.tanh(x)
    return x


@program(inputs=lambda: r(4, 8))
def float_inf_constant(x):
    return x.masked_fill(x > 1, float("inf")).clamp(max=5.0)
