"""Programs exercising the torch surface that modeling code calls, written as real model code
writes it: torch.ops.aten overloads, tensors created on the inputs' device and dtype, random draws
inside the program, SDPA variants and grouped-query attention, rotary embeddings, cumulative ops,
indexed writes, gathers and scatters, elementwise odds and ends, losses, convolutions and pools,
norms and activations. Modules passed in fresh (not `inference`) train."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus import call, inference, program

aten = torch.ops.aten


def r(*shape):
    return torch.randn(*shape)


_g = torch.Generator().manual_seed(7)


def w(*shape):
    """A fixed weight made at import (the same tensor for eager and kiln)."""
    return torch.randn(*shape, generator=_g) * 0.3


# ---- torch.ops.aten -------------------------------------------------------------------------------

class AtenLinear(nn.Module):
    """A linear + relu written the way decompositions and custom kernels' fallbacks write it."""

    def __init__(self, d_in=8, d_out=6):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_out, d_in) * 0.3)
        self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(self, x):
        b, t, d = x.shape
        flat = aten.view.default(x, [b * t, d])
        h = aten.mm.default(flat, aten.t.default(self.weight))
        h = aten.add.Tensor(h, self.bias)
        h = aten.relu(h)
        return aten.view.default(h, [b, t, -1])


aten_linear = inference(AtenLinear())


@program(inputs=lambda n=3: r(2, n, 8))
def aten_overloads_in_a_linear_block(x):
    h = aten_linear(x)
    return h, aten.sum.dim_IntList(h, [1], True), aten.mul.Scalar(h, 0.5)


@program(inputs=lambda: (r(2, 4, 8), r(2, 4, 8)), breaks="no torch function or Tensor method of its name")
def aten_attention_scores_through_overload_packets(q, k):
    scores = aten.bmm.default(q, aten.transpose.int(k, 1, 2))
    scores = aten.mul.Scalar(scores, 8 ** -0.5)
    causal = aten.tril.default(aten.ones_like.default(scores)).bool()
    scores = aten.where.self(causal, scores, aten.full_like.default(scores, -1e9))
    probs = aten._softmax.default(scores, -1, False)
    return probs, aten.mean.dim(probs, [-1], True), aten.clamp.default(scores, -1.0, 1.0)


@program(inputs=lambda: (r(3, 8), r(8), r(8)), atol=1e-5, breaks="does not map torch.native_layer_norm")
def aten_functional_ops_as_decompositions_write_them(x, weight, bias):
    normed, mean, rstd = aten.native_layer_norm.default(x, [8], weight, bias, 1e-5)
    g = aten.gelu.default(normed, approximate="tanh")
    s = aten.silu.default(normed)
    a, b = aten.split.Tensor(g, 4, 1)
    first = aten.select.int(s, 0, 0)
    sliced = aten.slice.Tensor(s, 1, 2, 6)
    summed = aten.add.Tensor(a, b, alpha=2)
    return aten.cat.default([summed, sliced], 1), first, mean, rstd


@program(inputs=lambda: (AtenLinear(), r(2, 3, 8)))
def training_through_aten_overloads(layer, x):
    h = layer(x)
    return aten.mean.default(aten.pow.Tensor_Scalar(h, 2))


# ---- creation on the inputs' device and dtype ---------------------------------------------------

@program(inputs=lambda: r(2, 3, 6), breaks="indexing a tensor with a tensor of b8")
def anchor_constants_as_a_nested_tensor_literal(x):
    anchors = torch.tensor([[10, 13], [16, 30], [33, 23]], dtype=x.dtype, device=x.device)
    stride = torch.tensor(8.0, device=x.device)
    keep = torch.tensor([True, False, True], device=x.device)
    wh = x[..., 2:4].exp() * anchors * stride
    return wh, x[:, keep], torch.tensor(0.5) * x[..., :2]


@program(inputs=lambda n=5: r(2, n), breaks="calling torch.linspace")
def linspace_empty_and_arange_with_dtype(x):
    t = x.shape[-1]
    ramp = torch.linspace(0.0, 1.0, t, device=x.device, dtype=x.dtype)
    buf = torch.empty(2, t, device=x.device, dtype=x.dtype).fill_(0.25)
    steps = torch.arange(0, t, 0.5, dtype=torch.float32, device=x.device)
    flags = torch.ones(t, dtype=torch.bool, device=x.device)
    ids = torch.full((2, t), 7, dtype=torch.long, device=x.device)
    return x * ramp + buf, steps, flags, ids


@program(inputs=lambda n=4: torch.cat([r(n, 1).abs() + 0.1, r(n, 5)], 1))  # a positive column: no all -inf row
def like_constructors_with_a_dtype(x):
    counts = torch.zeros_like(x, dtype=torch.long)
    valid = torch.ones_like(x, dtype=torch.bool)
    neg_inf = torch.full_like(x, float("-inf"))
    half = torch.full_like(x, 0.5, dtype=torch.float64)
    masked = torch.where(x > 0, x, neg_inf).softmax(-1)
    return counts + 1, valid & (x < 1), masked, half * x


# ---- random draws inside the program --------------------------------------------------------------

@program(inputs=lambda: r(2, 8, 4), breaks="calling torch.rand")
def random_masking_as_mae_draws_it(x):
    b, l, d = x.shape
    len_keep = int(l * (1 - 0.75))
    noise = torch.rand(b, l, device=x.device)
    ids_shuffle = torch.argsort(noise, dim=1)
    ids_restore = torch.argsort(ids_shuffle, dim=1)
    ids_keep = ids_shuffle[:, :len_keep]
    kept = torch.gather(x, dim=1, index=ids_keep.unsqueeze(-1).repeat(1, 1, d))
    mask = torch.ones([b, l], device=x.device)
    mask[:, :len_keep] = 0
    mask = torch.gather(mask, dim=1, index=ids_restore)
    return kept, mask, ids_restore


@program(inputs=lambda: r(2, 3, 4, 4), breaks="calling torch.randint")
def diffusion_noising_with_randint_and_randn(x0):
    betas = torch.linspace(1e-4, 0.02, 10, dtype=torch.float64)
    alphas_cumprod = torch.cumprod(1.0 - betas, dim=0).to(x0.dtype)
    t = torch.randint(0, 10, (x0.shape[0],), device=x0.device)
    noise = torch.randn(x0.shape, dtype=x0.dtype, device=x0.device)
    a = alphas_cumprod[t].sqrt().view(-1, 1, 1, 1)
    s = (1 - alphas_cumprod[t]).sqrt().view(-1, 1, 1, 1)
    return a * x0 + s * noise, noise, t


def drop_path(x, drop_prob: float = 0.0, training: bool = False, scale_by_keep: bool = True):
    """timm's stochastic depth."""
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


@program(inputs=lambda: r(8, 3, 4), breaks="Tensor.bernoulli_")
def drop_path_draws_a_bernoulli_per_sample(x):
    return drop_path(x, 0.5, training=True), drop_path(x, 0.5, training=False)


@program(inputs=lambda: torch.randint(5, 30, (2, 8)), breaks="calling torch.bernoulli")
def bert_style_token_masking(input_ids):
    labels = input_ids.clone()
    masked = torch.bernoulli(torch.full(labels.shape, 0.3)).bool()
    labels[~masked] = -100
    replaced = torch.bernoulli(torch.full(labels.shape, 0.8)).bool() & masked
    ids = input_ids.clone()
    ids[replaced] = 4
    random_words = torch.randint(30, labels.shape, dtype=torch.long)
    randomized = torch.bernoulli(torch.full(labels.shape, 0.5)).bool() & masked & ~replaced
    ids[randomized] = random_words[randomized]
    return ids, labels


# ---- scaled dot-product attention and grouped-query attention -------------------------------------

def _padded_mask(n):
    return torch.cat([torch.ones(2, n - 1), torch.tensor([[1.0], [0.0]])], dim=1)


@program(inputs=lambda n=5: (r(2, 2, n, 4), r(2, 2, n, 4), r(2, 2, n, 4), _padded_mask(n)), atol=1e-5)
def sdpa_with_an_additive_float_mask(q, k, v, attention_mask):
    n = q.shape[-2]
    causal = torch.full((n, n), float("-inf"), dtype=q.dtype, device=q.device).triu(1)
    padding = (1.0 - attention_mask[:, None, None, :].to(q.dtype)) * -1e4
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal + padding)


@program(inputs=lambda n=5: (r(2, 4, n, 4), r(2, 2, n, 4), r(2, 2, n, 4)), atol=1e-5)
def sdpa_with_enable_gqa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def repeat_kv(hidden_states, n_rep):
    """transformers' repeat_kv: (b, kv, s, d) -> (b, kv * n_rep, s, d)."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class EagerGQA(nn.Module):
    """transformers' eager_attention_forward with repeat_kv, a causal float mask and eval dropout."""

    def __init__(self, hidden=16, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.scaling = self.head_dim ** -0.5

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        k, v = repeat_kv(k, self.heads // self.kv_heads), repeat_kv(v, self.heads // self.kv_heads)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores + torch.zeros(t, t, dtype=x.dtype, device=x.device).masked_fill(~causal, -1e9)
        probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        probs = nn.functional.dropout(probs, p=0.1, training=self.training)
        out = torch.matmul(probs, v).transpose(1, 2).contiguous()
        return self.o_proj(out.reshape(b, t, -1))


eager_gqa = inference(EagerGQA()).eval()


@program(inputs=lambda n=5: r(2, n, 16), atol=1e-5)
def grouped_query_attention_with_expand_and_reshape(x):
    return eager_gqa(x)


# ---- rotary embeddings ------------------------------------------------------------------------------

def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def sinusoidal_positions(num_pos, dim):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j", torch.arange(num_pos, dtype=torch.int64).float(), inv_freq).float()
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)), dim=1)


embed_positions = sinusoidal_positions(32, 4)


@program(inputs=lambda n=5: (r(2, n, 3, 4), torch.arange(n)[None].expand(2, -1)), atol=1e-5)
def gptj_interleaved_rotary(q, position_ids):
    sincos = embed_positions[position_ids]
    sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return (q * cos) + (rotate_every_two(q) * sin)


def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


freqs_cis_table = precompute_freqs_cis(8, 16)


@program(inputs=lambda: (r(2, 5, 2, 8), r(2, 5, 2, 8)), atol=1e-5,
         breaks="calling torch.view_as_complex")
def llama_complex_rotary_with_view_as_complex(xq, xk):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis_table[: xq.shape[1]].view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


# ---- cumulative ops -----------------------------------------------------------------------------------

def create_position_ids_from_input_ids(input_ids, padding_idx, past_key_values_length=0):
    """RoBERTa's: positions count from padding_idx + 1, padding keeps padding_idx."""
    mask = input_ids.ne(padding_idx).int()
    incremental_indices = (torch.cumsum(mask, dim=1).type_as(mask) + past_key_values_length) * mask
    return incremental_indices.long() + padding_idx


@program(inputs=lambda: torch.tensor([[5, 6, 7, 1, 1], [8, 9, 10, 11, 12]]))
def roberta_position_ids_from_an_int_cumsum(input_ids):
    return create_position_ids_from_input_ids(input_ids, padding_idx=1)


@program(inputs=lambda n=6: r(2, n), atol=1e-5, breaks="calling torch.sort")
def top_p_filtering_with_sort_cumsum_and_scatter(scores):
    top_p, min_tokens_to_keep = 0.7, 1
    sorted_logits, sorted_indices = torch.sort(scores, descending=False)
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    sorted_indices_to_remove = cumulative_probs <= (1 - top_p)
    sorted_indices_to_remove[..., -min_tokens_to_keep:] = 0
    indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
    return scores.masked_fill(indices_to_remove, -float("inf")), cumulative_probs


@program(inputs=lambda n=6: r(2, n), breaks="calling torch.topk")
def top_k_filtering_and_greedy_argmax(scores):
    top_k = min(3, scores.size(-1))
    indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
    filtered = scores.masked_fill(indices_to_remove, -float("inf"))
    return filtered, torch.argmax(filtered, dim=-1), filtered.argmax(-1, keepdim=True)


@program(inputs=lambda: (r(2, 6).sigmoid(), r(2, 6)), atol=1e-5)
def cumprod_of_keep_probabilities_and_float_cumsum(gates, x):
    """Stick-breaking weights (cumprod of 1 - p, shifted) and a running mean by cumsum."""
    remaining = torch.cumprod(1 - gates, dim=-1)
    shifted = torch.cat([torch.ones_like(remaining[:, :1]), remaining[:, :-1]], dim=-1)
    weights = gates * shifted
    counts = torch.arange(1, x.shape[-1] + 1, device=x.device, dtype=x.dtype)
    return weights, torch.cumsum(x, dim=-1) / counts, x.cumprod(1)


# ---- indexed writes, where, masked_fill, gathers and scatters -------------------------------------------

@program(inputs=lambda: (r(6, 4), torch.tensor([0, 2, 2, 5]), r(4, 4)))
def index_put_accumulates_repeated_rows(table, idx, rows):
    out = torch.zeros_like(table)
    out.index_put_((idx,), rows, accumulate=True)
    summed = torch.zeros_like(table).index_add_(0, idx, rows)
    return out, summed


@program(inputs=lambda: (r(4, 3), torch.tensor([3, 0]), torch.tensor([1, 2]), r(2)),
         breaks="Tensor.index_put_")
def index_put_with_a_row_and_a_column_index(x, rows, cols, values):
    out = x.clone()
    out.index_put_((rows, cols), values)
    out[rows, cols] = out[rows, cols] * 2
    return out


embedding = inference(nn.Embedding(12, 4, padding_idx=None))


@program(inputs=lambda: torch.tensor([[3, 0, 5, 0], [1, 2, 0, 7]]), breaks="through a tensor index")
def padding_positions_zeroed_with_a_bool_mask(input_ids):
    h = embedding(input_ids)
    h[input_ids == 0] = 0
    return h


class PaddedAttentionScores(nn.Module):
    def forward(self, q, k, attention_mask):
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        probs = scores.softmax(-1)
        return torch.where(attention_mask[:, None, :, None].bool(), probs, 0.0)


padded_scores = PaddedAttentionScores()


@program(inputs=lambda: (r(2, 2, 4, 3), r(2, 2, 4, 3), torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])),
         atol=1e-5)
def masked_fill_with_finfo_min_then_where(q, k, attention_mask):
    return padded_scores(q, k, attention_mask)


def selective_log_softmax(logits, index):
    logps = torch.gather(logits.log_softmax(-1), dim=-1, index=index.unsqueeze(-1)).squeeze(-1)
    return logps


@program(inputs=lambda: (r(2, 5, 7), torch.randint(0, 7, (2, 5))), atol=1e-5)
def per_token_logprobs_by_gather(logits, labels):
    per_token = selective_log_softmax(logits, labels)
    return per_token, per_token.sum(-1)


@program(inputs=lambda: (r(3, 2, 4), torch.tensor([2, 0, 0]), r(3, 5)),
         breaks="calling torch.take_along_dim")
def beam_reorder_with_index_select_and_take_along_dim(past, beam_idx, scores):
    reordered = past.index_select(0, beam_idx.to(past.device))
    order = scores.argsort(dim=-1, descending=True)
    ranked = torch.take_along_dim(scores, order, dim=-1)
    best = torch.take_along_dim(scores, order[:, :1], dim=1)
    return reordered, ranked, best


class TopKRouter(nn.Module):
    """A mixture of experts routed densely: topk, scatter of the weights, one_hot counts."""

    def __init__(self, d=8, experts=4, top_k=2):
        super().__init__()
        self.top_k, self.num_experts = top_k, experts
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(experts))

    def forward(self, x):
        logits = self.gate(x)
        probs = logits.softmax(-1)
        weights, selected = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        dense = torch.zeros_like(logits).scatter(1, selected, weights)
        flat = selected.flatten()
        counts = torch.zeros(self.num_experts, dtype=torch.long).scatter_add(0, flat, torch.ones_like(flat))
        expert_mask = F.one_hot(selected, num_classes=self.num_experts).sum(1)
        out = sum(dense[:, e:e + 1] * expert(x) for e, expert in enumerate(self.experts))
        aux = (expert_mask.float().mean(0) * probs.mean(0)).sum() * self.num_experts
        return out, counts, aux


@program(inputs=lambda: (TopKRouter(), r(6, 8)), atol=1e-5, breaks="calling torch.topk")
def training_a_densely_routed_mixture_of_experts(moe, x):
    out, counts, aux = moe(x)
    return out.square().mean() + 0.01 * aux, counts


class SparseMoe(nn.Module):
    """Mixtral's loop: torch.where over the expert mask, then index_add_ back."""

    def __init__(self, d=8, experts=4, top_k=2):
        super().__init__()
        self.top_k, self.num_experts = top_k, experts
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(experts))

    def forward(self, hidden_states):
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final = torch.zeros_like(hidden_states)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            idx, top_x = torch.where(expert_mask[expert_idx])
            current = hidden_states[None, top_x].reshape(-1, hidden_states.shape[-1])
            current = self.experts[expert_idx](current) * routing_weights[top_x, idx, None]
            final.index_add_(0, top_x, current.to(hidden_states.dtype))
        return final, router_logits


sparse_moe = inference(SparseMoe())


@program(inputs=lambda: r(6, 8), atol=1e-5, breaks="calling torch.topk")
def mixtral_sparse_moe_with_where_and_index_add(x):
    return sparse_moe(x)


# ---- elementwise odds and ends ----------------------------------------------------------------------

@program(inputs=lambda: (r(4, 3), r(4, 3), r(4, 3).abs(), r(4, 3)))
def adam_step_by_hand_with_lerp_addcmul_addcdiv(param, grad, exp_avg_sq, exp_avg):
    beta1, beta2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    with torch.no_grad():
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = exp_avg_sq.sqrt().add_(eps)
        param.addcdiv_(exp_avg, denom, value=-lr)
    return param


@program(inputs=lambda: torch.tensor([[1.0, -2.0, 3.0, 0.0], [4.0, 0.5, -1.0, 2.0]]), atol=1e-5)
def nan_to_num_then_var_mean_normalize(x):
    log_ratio = x.log()  # nan where negative, -inf at zero
    x = log_ratio.nan_to_num(nan=0.0, posinf=1e4, neginf=-1e4)
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    unbiased_var, _ = torch.var_mean(x, dim=0)
    return (x - mean) / var.clamp_min(1e-5).sqrt(), unbiased_var, torch.nan_to_num(x / 0.0)


@program(inputs=lambda: (r(3, 4), torch.tensor([True, False, True, True])))
def sign_sgn_bitwise_not_and_introspection(x, keep):
    binary = x + (x.sign() - x).detach()
    dropped = torch.bitwise_not(keep)
    nbytes = x.numel() * x.element_size()
    xt = x.t()
    cont = xt if xt.is_contiguous() else xt.contiguous()
    tiled = x.repeat(2, 1)
    return binary, torch.sgn(x), dropped, nbytes, cont, tiled * keep.type_as(x), keep.element_size()


@program(inputs=lambda: (r(2, 4), r(2, 4)))
def ema_with_lerp_and_clamp_min(shadow, param):
    decay = 0.99
    updated = shadow.lerp(param, 1 - decay)
    weight = torch.tensor([0.25, 0.5, 0.75, 1.0])
    blended = torch.lerp(shadow, param, weight)
    return updated, blended, (param - shadow).clamp_min(0.0), torch.clamp_min(param, -0.5)


def build_alibi_tensor(attention_mask, num_heads, dtype):
    """BLOOM's ALiBi: slopes from powers of two, positions from the mask's cumsum."""
    batch_size, seq_length = attention_mask.shape
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), device=attention_mask.device,
                        dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, device=attention_mask.device, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


@program(inputs=lambda: (r(4, 5, 3), r(4, 3, 5), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])), atol=1e-5,
         breaks="Tensor.baddbmm")
def bloom_alibi_with_baddbmm(q, k_t, attention_mask):
    alibi = build_alibi_tensor(attention_mask, 2, q.dtype)
    scores = alibi.baddbmm(batch1=q, batch2=k_t, beta=1.0, alpha=1 / math.sqrt(3))
    causal = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    scores = scores.masked_fill(~causal, -1e4)
    return scores.softmax(-1), torch.bmm(scores, q)


@program(inputs=lambda n=5: (r(2, 2, n, 4), r(2, 2, n, 4), r(2, 2, n, 4)), atol=1e-5,
         breaks="calling torch.einsum")
def lucidrains_einsum_attention_with_triu_mask(q, k, v):
    scale = q.shape[-1] ** -0.5
    sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * scale
    i, j = sim.shape[-2:]
    mask = torch.ones((i, j), device=q.device, dtype=torch.bool).triu(j - i + 1)
    sim = sim.masked_fill(mask, -torch.finfo(sim.dtype).max)
    attn = sim.softmax(dim=-1)
    out = torch.einsum("b h i j, b h j d -> b h i d", attn, v)
    return out, torch.einsum("bhid->bid", out), torch.einsum("ii->i", sim[0, 0])


@program(inputs=lambda: (r(4, 5), torch.tensor([0, 4, 2, 1])), atol=1e-5,
         breaks="one_hot without num_classes")
def soft_target_cross_entropy_from_one_hot(logits, labels):
    smoothing, classes = 0.1, logits.shape[-1]
    targets = F.one_hot(labels, num_classes=classes).float() * (1 - smoothing) + smoothing / classes
    loss = torch.sum(-targets * F.log_softmax(logits, dim=-1), dim=-1)
    return loss.mean(), F.one_hot(labels)


# ---- losses -------------------------------------------------------------------------------------------

def _logits_and_labels():
    logits = r(2, 6, 10)
    labels = torch.randint(0, 10, (2, 6))
    labels[0, :3] = -100
    labels[1, -1] = -100
    return logits, labels


@program(inputs=_logits_and_labels, atol=1e-5)
def cross_entropy_reductions_over_shifted_labels(logits, labels):
    vocab = logits.shape[-1]
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    per_token = F.cross_entropy(shift_logits.view(-1, vocab), shift_labels.view(-1), reduction="none")
    total = F.cross_entropy(shift_logits.transpose(1, 2), shift_labels, reduction="sum", ignore_index=-100)
    smoothed = F.cross_entropy(shift_logits.view(-1, vocab), shift_labels.view(-1), label_smoothing=0.1)
    num_items = (shift_labels != -100).sum()
    return per_token.view_as(shift_labels), total / num_items, smoothed


@program(inputs=lambda: (r(4, 3), torch.randint(0, 2, (4, 3)).float(), r(4, 2), r(4, 2), r(4, 5),
                         torch.tensor([0, 4, 2, 1])), atol=1e-5)
def multitask_head_losses(obj_logits, obj_targets, box, box_target, cls_logits, cls):
    pos_weight = torch.tensor([1.0, 2.0, 0.5], dtype=obj_logits.dtype)
    obj = F.binary_cross_entropy_with_logits(obj_logits, obj_targets, pos_weight=pos_weight)
    reg = F.mse_loss(box, box_target, reduction="none").sum(-1)
    weight = torch.tensor([1.0, 1.0, 2.0, 1.0, 0.5], dtype=cls_logits.dtype)
    cls_loss = F.nll_loss(F.log_softmax(cls_logits, -1), cls, weight=weight)
    return obj, reg, cls_loss, F.mse_loss(box, box_target)


# ---- convolutions and pools ---------------------------------------------------------------------------

class CausalDepthwiseConv1d(nn.Module):
    """Mamba's short convolution: depthwise, padded by kernel - 1, cut back to the sequence."""

    def __init__(self, channels=6, kernel=4):
        super().__init__()
        self.conv1d = nn.Conv1d(channels, channels, kernel, groups=channels, padding=kernel - 1)

    def forward(self, x):
        seq = x.shape[1]
        h = self.conv1d(x.transpose(1, 2))[..., :seq]
        return F.silu(h).transpose(1, 2)


causal_conv = inference(CausalDepthwiseConv1d())


@program(inputs=lambda n=5: r(2, n, 6), atol=1e-4)
def mamba_causal_depthwise_conv1d(x):
    return causal_conv(x)


W1, B1 = w(6, 2, 3), w(6)
W2, B2 = w(5, 4, 3, 3), w(5)
W2_DW = w(4, 1, 3, 3)
W3 = w(8, 2, 2, 4, 4)


@program(inputs=lambda: (r(1, 4, 9), r(1, 4, 7, 7), r(1, 2, 4, 8, 8)), atol=1e-4)
def functional_convolutions_with_stride_padding_dilation_groups(x1, x2, x3):
    a = F.conv1d(x1, W1, B1, stride=2, padding=1, groups=2)
    b = F.conv2d(x2, W2, B2, stride=1, padding=2, dilation=2)
    c = F.conv2d(x2, W2_DW, padding="same", groups=4)
    d = F.conv3d(x3, W3, stride=(2, 4, 4))
    tokens = d.flatten(2).transpose(1, 2)
    return a, b, c, tokens


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim=8, layer_scale_init_value=1e-1):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones(dim))

    def forward(self, x):
        shortcut = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)
        x = self.norm(x)
        x = self.pwconv2(F.gelu(self.pwconv1(x)))
        x = self.gamma * x
        x = x.permute(0, 3, 1, 2)
        return shortcut + drop_path(x, 0.0, self.training)


@program(inputs=lambda: (ConvNeXtBlock(), r(2, 8, 6, 6)), atol=1e-4)
def training_a_convnext_block(block, x):
    return block(x).square().mean()


class UpBlock(nn.Module):
    """A UNet decoder step: transposed conv up, concat the skip, conv, BN (eval), ReLU."""

    def __init__(self, c_in=6, c_skip=3, c_out=4):
        super().__init__()
        self.up = nn.ConvTranspose2d(c_in, c_in // 2, kernel_size=2, stride=2)
        self.conv = nn.Conv2d(c_in // 2 + c_skip, c_out, kernel_size=3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x, skip):
        x = self.up(x)
        if x.shape[-2:] != skip.shape[-2:]:
            x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        x = torch.cat([skip, x], dim=1)
        return F.relu(self.bn(self.conv(x)))


up_block = UpBlock()
with torch.no_grad():
    up_block.bn.running_mean.uniform_(-0.5, 0.5, generator=_g)
    up_block.bn.running_var.uniform_(0.5, 2.0, generator=_g)
up_block = inference(up_block).eval()


@program(inputs=lambda: (r(2, 6, 3, 3), r(2, 3, 7, 7)), atol=1e-4,
         )
def unet_up_block_with_conv_transpose_and_interpolate(x, skip):
    return up_block(x, skip), F.interpolate(x, scale_factor=2, mode="nearest")


@program(inputs=lambda: r(2, 3, 9, 9), atol=1e-4)
def resnet_stem_pools_and_adaptive_average(x):
    m = F.max_pool2d(x, kernel_size=3, stride=2, padding=1)
    a = F.avg_pool2d(x, kernel_size=2, stride=2, ceil_mode=True, count_include_pad=False)
    g = F.adaptive_avg_pool2d(x, (1, 1)).flatten(1)
    uneven = F.adaptive_avg_pool2d(x, 4)
    return m, a, g, uneven


class BasicBlock(nn.Module):
    def __init__(self, c_in=4, c_out=6, stride=2):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.downsample(x))


basic_block = BasicBlock()
with torch.no_grad():
    for bn in (basic_block.bn1, basic_block.bn2, basic_block.downsample[1]):
        bn.running_mean.normal_(0, 0.3, generator=_g)
        bn.running_var.uniform_(0.5, 1.5, generator=_g)
        bn.weight.uniform_(0.5, 1.5, generator=_g)
basic_block = inference(basic_block).eval()


@program(inputs=lambda n=6: r(2, 4, n, n), atol=1e-4)
def resnet_basic_block_with_batchnorm_in_eval(x):
    return basic_block(x)


POS = w(1, 1 + 9, 4)


@program(inputs=lambda: r(2, 16, 4), atol=1e-4)
def vit_position_embedding_resampled_bicubic(tokens):
    cls_pos, grid_pos = POS[:, :1], POS[:, 1:]
    old = int(math.sqrt(grid_pos.shape[1]))
    new = int(math.sqrt(tokens.shape[1]))
    grid = grid_pos.reshape(1, old, old, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(new, new), mode="bicubic", align_corners=False, antialias=False)
    grid = grid.permute(0, 2, 3, 1).reshape(1, new * new, -1)
    return torch.cat([cls_pos.expand(tokens.shape[0], -1, -1), tokens + grid], dim=1)


# ---- norms and activations ------------------------------------------------------------------------------

class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class GemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


llama_norm = inference(LlamaRMSNorm(8))
gemma_norm = inference(GemmaRMSNorm(8))
with torch.no_grad():
    llama_norm.weight.uniform_(0.5, 1.5, generator=_g)
    gemma_norm.weight.uniform_(-0.5, 0.5, generator=_g)


@program(inputs=lambda n=3: (r(2, n, 8), r(2, 8, n, 2)), atol=1e-5, breaks="calling torch.linspace")
def layer_group_and_rms_norms(x, image):
    ln = F.layer_norm(x, (8,), eps=1e-5)
    ln_affine = F.layer_norm(x, x.shape[-1:], weight=torch.full((8,), 2.0, dtype=x.dtype), bias=None)
    gn = F.group_norm(image, 4, weight=torch.linspace(0.5, 1.5, 8, dtype=image.dtype), eps=1e-5)
    return ln, ln_affine, gn, llama_norm(x), gemma_norm(x)


@program(inputs=lambda n=4: r(n, 8))
def activations_as_mlps_call_them(x):
    return (F.gelu(x, approximate="tanh"), F.gelu(x), F.silu(x), F.softplus(x), F.softplus(x, beta=2.0, threshold=1.0),
            F.dropout(x, p=0.3, training=False), nn.functional.mish(x), F.hardswish(x), x * torch.sigmoid(1.702 * x))


# ---- training through several of the above ----------------------------------------------------------------

def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class TinyLlamaBlock(nn.Module):
    """RMSNorm, rotary, GQA through SDPA's enable_gqa, SwiGLU, tied head, shifted-label loss."""

    def __init__(self, vocab=20, hidden=16, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.embed = nn.Embedding(vocab, hidden)
        self.input_norm = LlamaRMSNorm(hidden)
        self.qkv = nn.Linear(hidden, (heads + 2 * kv_heads) * self.head_dim, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.post_norm = LlamaRMSNorm(hidden)
        self.gate_up = nn.Linear(hidden, 2 * 24, bias=False)
        self.down = nn.Linear(24, hidden, bias=False)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, input_ids, labels):
        b, t = input_ids.shape
        h = self.embed(input_ids)
        position_ids = torch.arange(t, device=h.device)
        freqs = torch.outer(position_ids.float(), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(h.dtype), emb.sin().to(h.dtype)
        x = self.input_norm(h)
        q, k, v = self.qkv(x).view(b, t, -1, self.head_dim).transpose(1, 2).split(
            [self.heads, self.kv_heads, self.kv_heads], dim=1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        h = h + self.o(attn.transpose(1, 2).reshape(b, t, -1))
        gate, up = self.gate_up(self.post_norm(h)).chunk(2, dim=-1)
        h = h + self.down(F.silu(gate) * up)
        logits = F.linear(h, self.embed.weight)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                               ignore_index=-100)
        return loss, logits


def _llama_inputs():
    ids = torch.randint(0, 20, (2, 6))
    labels = ids.masked_fill(torch.tensor([[1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=torch.bool), -100)
    return TinyLlamaBlock(), ids, labels


@program(inputs=_llama_inputs, atol=1e-5)
def training_a_tiny_llama_block(block, input_ids, labels):
    loss, logits = block(input_ids, labels)
    return loss, logits.detach().argmax(-1)


class SmallCNN(nn.Module):
    """Conv, BatchNorm in training (its running stats move), pools, dropout, label-smoothed CE."""

    def __init__(self, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 8, 3, stride=2, padding=1, groups=2)
        self.gn = nn.GroupNorm(2, 8)
        self.head = nn.Linear(8, classes)

    def forward(self, x, target):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.gelu(self.gn(self.conv2(x)), approximate="tanh")
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        logits = self.head(F.dropout(x, p=0.0, training=self.training))
        return F.cross_entropy(logits, target, label_smoothing=0.1)


@program(inputs=lambda: (SmallCNN(), r(4, 3, 8, 8), torch.tensor([0, 3, 1, 4])), atol=1e-4)
def training_a_small_cnn_with_batchnorm(model, x, target):
    return model(x, target)


class ConvTransposeDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 6 * 2 * 2)
        self.up = nn.ConvTranspose2d(6, 3, kernel_size=3, stride=2, padding=1, output_padding=1)
        self.refine = nn.Conv2d(3, 3, 3, padding=2, dilation=2)

    def forward(self, z, image):
        x = self.proj(z).view(-1, 6, 2, 2)
        x = F.silu(self.up(x))
        x = self.refine(F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True))
        return F.mse_loss(torch.sigmoid(x), image) + F.softplus(x).mean() * 1e-3


@program(inputs=lambda: (ConvTransposeDecoder(), r(2, 4), torch.rand(2, 3, 8, 8)), atol=1e-4,
         )
def training_a_conv_transpose_decoder(decoder, z, image):
    return decoder(z, image)


# ---- losses, norms and reorderings written as several ops ----------------------------------------------

class RegressionHead(nn.Module):
    """A detection-style head: box regression with three robust losses, objectness with a
    class-balanced BCE, a distillation KL term; trained."""

    def __init__(self, d=8):
        super().__init__()
        self.box = nn.Linear(d, 4)
        self.obj = nn.Linear(d, 3)
        self.cls = nn.Linear(d, 5)

    def forward(self, h, box_target, obj_target, teacher_logits):
        box = self.box(h)
        losses = {
            "l1": F.l1_loss(box, box_target),
            "smooth_l1": F.smooth_l1_loss(box, box_target, beta=0.5, reduction="sum") / h.shape[0],
            "huber": F.huber_loss(box, box_target, delta=2.0),
            "mse": F.mse_loss(box, box_target, reduction="none").mean(-1),
            "obj": F.binary_cross_entropy_with_logits(self.obj(h), obj_target, weight=torch.tensor([1.0, 0.5, 2.0]),
                                                      reduction="none").sum(-1),
            "prob_bce": F.binary_cross_entropy(torch.sigmoid(self.obj(h)), obj_target),
        }
        student = F.log_softmax(self.cls(h), dim=-1)
        losses["kd"] = F.kl_div(student, F.softmax(teacher_logits, -1), reduction="batchmean")
        losses["kd_log"] = F.kl_div(student, F.log_softmax(teacher_logits, -1), reduction="sum", log_target=True)
        return sum(v.sum() for v in losses.values()), losses


@program(inputs=lambda n=4: (RegressionHead(), r(n, 8), r(n, 4), torch.randint(0, 2, (n, 3)).float(), r(n, 5)),
         atol=1e-5)
def detection_head_losses_train(head, h, box_target, obj_target, teacher_logits):
    total, parts = head(h, box_target, obj_target, teacher_logits)
    return total, parts


@program(inputs=lambda n=6: (r(n, 5), torch.tensor([0, 4, -100, 1, 2, 3] * 8)[:n]), atol=1e-5)
def nll_loss_of_log_probs_with_class_weights_and_ignore(logits, labels):
    log_probs = torch.log_softmax(logits, dim=-1)
    weight = torch.tensor([0.5, 1.0, 1.5, 1.0, 2.0])
    mean = F.nll_loss(log_probs, labels, weight=weight)
    summed = F.nll_loss(log_probs, labels, reduction="sum", ignore_index=-100)
    per_row = F.nll_loss(log_probs, labels.clamp_min(0), reduction="none")
    return mean, summed, per_row, torch.logsumexp(logits, dim=-1), logits.logsumexp(0, keepdim=True)


@program(inputs=lambda n=5: (r(2, n, 8), r(2, 8)), atol=1e-5)
def contrastive_similarity_with_normalized_embeddings(tokens, queries):
    with torch.no_grad():
        pooled = F.normalize(tokens.mean(1), dim=-1)
        q = F.normalize(queries, p=2.0, dim=1, eps=1e-6)
        sim = pooled @ q.T
        norms = torch.linalg.vector_norm(tokens, dim=-1), tokens.norm(dim=-1, keepdim=True), torch.norm(queries)
        l1 = tokens.norm(p=1, dim=(1, 2)), torch.linalg.vector_norm(queries, ord=float("inf"), dim=1)
    return sim, norms, l1


@program(inputs=lambda: (r(2, 6, 4), torch.tensor([[0, 2, 1], [3, 3, 0]])), atol=1e-6)
def reversed_and_rolled_sequences_with_one_hot_routing(x, experts):
    backwards = x.flip(1)                       # a reverse-direction RNN's input
    both = torch.flip(x, dims=(0, 2))
    shifted = torch.roll(x, shifts=1, dims=1)   # a cyclic shift of the sequence
    shifted_back = x.roll((-2, 1), (1, 2))
    routing = F.one_hot(experts, num_classes=4).float().sum(1)
    finite = torch.isfinite(x / (x - x.flip(1))).all(-1)
    return backwards, both, shifted, shifted_back, routing, finite
