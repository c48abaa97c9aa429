"""nn.Modules: built-ins lowered directly, user modules inlined."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus import inference, program

r = torch.randn
torch.manual_seed(0)

linear = inference(nn.Linear(8, 4))
linear_nobias = inference(nn.Linear(8, 4, bias=False))
norm = inference(nn.LayerNorm(8))
emb = inference(nn.Embedding(10, 8))
seq = inference(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8), nn.Tanh()))
acts = nn.ModuleList([nn.GELU(), nn.SiLU(), nn.Sigmoid(), nn.Identity(), nn.ReLU()])
drop_eval = nn.Dropout(0.3).eval()
soft = nn.Softmax(dim=-1)


@program(inputs=lambda: r(4, 8))
def module_linear(x):
    return linear(x)


@program(inputs=lambda: r(4, 8))
def module_linear_nobias(x):
    return linear_nobias(x)


@program(inputs=lambda: r(4, 8))
def module_layer_norm(x):
    return norm(x)


@program(inputs=lambda: torch.randint(0, 10, (3, 5)))
def module_embedding(idx):
    return emb(idx)


@program(inputs=lambda: r(4, 8))
def module_sequential(x):
    return seq(x)


@program(inputs=lambda: r(4, 8))
def module_list_loop(x):
    for act in acts:
        x = act(x)
    return x


@program(inputs=lambda: r(4, 8))
def module_list_index(x):
    return acts[0](x) + acts[-1](x) * len(acts)


@program(inputs=lambda: r(4, 8))
def module_dropout_eval(x):
    return drop_eval(x)


@program(inputs=lambda: r(4, 8))
def module_softmax(x):
    return soft(x)


@program(inputs=lambda: r(4, 8))
def module_weight_direct(x):
    return x @ linear.weight.t() + linear.bias


class MLP(nn.Module):
    def __init__(self, d=8, hidden=32):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.scale = 0.5

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x))) * self.scale


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.mlp = MLP()
        self.register_buffer("shift", torch.ones(8))

    def forward(self, x):
        return x + self.mlp(self.norm(x)) + self.shift


class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 3)})

    def forward(self, x):
        return {name: head(x) for name, head in self.heads.items()}


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Residual() for _ in range(3)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) if i % 2 == 0 else layer(x) * 0.5
        return x


class CausalSelfAttention(nn.Module):
    def __init__(self, d=16, heads=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
        mask = torch.ones(t, t).tril() if False else None
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


mlp, residual, heads, stack, block = (inference(m) for m in (MLP(), Residual(), Heads(), Stack(), Block()))
trained = MLP()  # its parameters require grad


@program(inputs=lambda: r(4, 8))
def user_mlp(x):
    return mlp(x)


@program(inputs=lambda: r(4, 8))
def user_residual(x):
    return residual(x)


@program(inputs=lambda: r(4, 8))
def user_module_dict(x):
    return heads(x)


@program(inputs=lambda: r(4, 8))
def user_stack(x):
    return stack(x)


@program(inputs=lambda: r(2, 5, 16), atol=1e-4)
def transformer_block(x):
    return block(x)


@program(inputs=lambda: (block, r(2, 5, 16)), atol=1e-4)
def module_as_argument(m, x):
    return m(x)


@program(inputs=lambda: r(2, 5, 16), atol=1e-4)
def module_forward_method(x):
    return block.forward(x)


@program(inputs=lambda: r(4, 8))
def module_training_flag(x):
    return x * 2 if mlp.training else x


@program(inputs=lambda: r(4, 8))
def module_that_requires_grad(x):
    return trained(x)


@program(inputs=lambda: r(4, 8))
def module_that_requires_grad_under_no_grad(x):
    with torch.no_grad():
        return trained(x)


attention = inference(nn.MultiheadAttention(16, 4, batch_first=True))
batch_norm = inference(nn.BatchNorm1d(8)).eval()
group_norm = inference(nn.GroupNorm(2, 8))
block_with_helper = inference(nn.Sequential(nn.Linear(8, 8), nn.GELU()))


@program(inputs=lambda n=5: r(2, n, 16), atol=1e-4)
def module_multihead_attention(x):
    out, weights = attention(x, x, x, attn_mask=torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1))
    return out, weights


@program(inputs=lambda n=6: r(n, 8))
def module_batch_norm_eval(x):
    return batch_norm(x)


@program(inputs=lambda n=3: r(n, 8, 5), atol=1e-4)
def module_group_norm(x):
    return group_norm(x)


@program(inputs=lambda: r(4, 8))
def checkpointed_block(x):
    return torch.utils.checkpoint.checkpoint(block_with_helper, x, use_reentrant=False) + x


relu_in_place = nn.ReLU(inplace=True)
silu_in_place = nn.SiLU(inplace=True)


@program(inputs=lambda: r(4, 8))
def module_activations_in_place(x):
    h = x * 1.0
    y = relu_in_place(h)  # writes h, as eager: the sum reads the written h
    g = x + 1.0
    z = silu_in_place(g)
    return h + y, g * z


class MultiTaskHeads(nn.Module):
    """Task heads in a ModuleDict picked by name, a user container's __getitem__ left to it."""

    def __init__(self, tasks=("sentiment", "topic", "toxicity")):
        super().__init__()
        self.trunk = nn.Linear(8, 8)
        self.heads = nn.ModuleDict({task: nn.Linear(8, 2 + k) for k, task in enumerate(tasks)})
        self.order = list(tasks)

    def forward(self, x, task):
        h = torch.relu(self.trunk(x))
        chosen = self.heads[task](h)
        every = {name: self.heads[f"{name}"](h).mean(-1) for name in self.order}
        return chosen, every, self.heads["topic"].out_features


@program(inputs=lambda n=4: (MultiTaskHeads(), r(n, 8), "topic"), atol=1e-5)
def module_dict_heads_picked_by_name(m, x, task):
    return m(x, task)


class NamedLikeContainerMethods(nn.Module):
    """Attributes named as ModuleDict's methods: Module.__getattr__ finds the buffer and the
    submodule, not a method."""

    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.arange(4.0))
        self.values = nn.Linear(4, 4)

    def forward(self, x):
        return self.values(x) + self.keys


named_like_methods = inference(NamedLikeContainerMethods())


@program(inputs=lambda: r(2, 4))
def module_attributes_named_keys_and_values(x):
    return named_like_methods(x)
