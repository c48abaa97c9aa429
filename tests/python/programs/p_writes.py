"""Writes through index tensors as modeling code does them: a static KV cache updated with
index_copy_, graph message passing with index_add_, token masking with x[idx] = v, and
the in-place and functional forms of index_put, index_fill and index_add."""
import torch
import torch.nn as nn

from corpus import inference, program

r = torch.randn
torch.manual_seed(0)


class StaticCache(nn.Module):
    """A decoder's static key/value cache (HF StaticCache.update): the step's keys and values
    written at their positions, then the whole cache read by attention."""

    def __init__(self, heads=2, length=8, dim=4):
        super().__init__()
        self.register_buffer("keys", torch.zeros(1, heads, length, dim))
        self.register_buffer("values", torch.zeros(1, heads, length, dim))

    def forward(self, k, v, cache_position):
        self.keys.index_copy_(2, cache_position, k)
        self.values.index_copy_(2, cache_position, v)
        return self.keys.clone(), self.values.clone()


@program(inputs=lambda: (StaticCache(), r(1, 2, 3, 4), r(1, 2, 3, 4), torch.tensor([2, 3, 4])))
def static_kv_cache_update_with_index_copy(cache, k, v, cache_position):
    return cache(k, v, cache_position), cache.keys


@program(inputs=lambda: (r(5, 3), torch.tensor([0, 1, 1, 2, 3, 4, 4]), torch.tensor([1, 0, 2, 1, 4, 3, 0])))
def message_passing_with_index_add(h, src, dst):
    messages = h[src] * 0.5
    out = torch.zeros_like(h).index_add_(0, dst, messages)
    degree = torch.zeros(h.shape[0]).index_add(0, dst, torch.ones(dst.shape[0]))
    return out / degree.clamp(min=1).unsqueeze(1)


@program(inputs=lambda: (r(2, 6, 4), torch.tensor([1, 4])))
def masking_tokens_at_positions(hidden, positions):
    masked = hidden.clone()
    masked[:, positions] = 0.0
    mask_token = torch.ones(4)
    replaced = hidden.clone()
    replaced[:, positions, :] = mask_token
    return masked, replaced


@program(inputs=lambda: (r(6, 3), torch.tensor([5, -1, 0])))
def index_put_with_negative_and_repeated_indices(x, idx):
    a = x.clone()
    a[idx] = torch.arange(9.0).view(3, 3)  # -1 and 5 name one row: the later value stays
    b = x.index_put((idx,), torch.ones(3), accumulate=True)
    c = torch.index_put(x, (idx.abs(),), torch.full((3,), 2.0))
    return a, b, c


@program(inputs=lambda: (r(3, 5), torch.tensor([4, 0])))
def index_fill_and_index_add_with_alpha(x, idx):
    filled = x.index_fill(1, idx, float("-inf")).softmax(-1)
    y = x.clone()
    y.index_fill_(0, idx[1:], 3.5)
    added = x.index_add(1, idx, torch.ones(3, 2), alpha=-2)
    return filled, y, added


embedding_update = inference(nn.Embedding(10, 4))


@program(inputs=lambda: torch.tensor([[1, 3, 3], [0, 9, 2]]))
def sparse_style_embedding_grad_accumulation(tokens):
    weight = embedding_update.weight
    grads = torch.ones(tokens.numel(), 4)
    accumulated = torch.zeros_like(weight).index_add_(0, tokens.flatten(), grads)
    return weight - 0.1 * accumulated


@program(inputs=lambda: (r(4, 3), torch.tensor([2, 0])))
def index_copy_functional_and_dim1(x, idx):
    return x.index_copy(0, idx, torch.zeros(2, 3)), x.index_copy(1, idx[:1], torch.ones(4, 1))


@program(inputs=lambda: (r(5, 2), torch.tensor([[0, 1], [2, 3]])), breaks="index of 2 dims")
def index_add_with_a_2d_index_is_a_break(x, idx):
    return x.index_add(0, idx, torch.ones(2, 2, 2)) * 2
