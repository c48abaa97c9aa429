"""Views, shape arithmetic and indexing."""
import torch

from corpus import program

r = torch.randn


@program(inputs=lambda: r(2, 3, 4))
def view_batch(x):
    return x.view(x.shape[0], -1)


@program(inputs=lambda: r(2, 3, 4))
def view_size_call(x):
    return x.view(x.size(0), x.size(1) * x.size(2))


@program(inputs=lambda: r(2, 3, 4))
def reshape_tuple(x):
    return x.reshape((6, 4)) + 1


@program(inputs=lambda: r(2, 3, 4))
def reshape_varargs(x):
    return x.reshape(2, 12)


@program(inputs=lambda: r(2, 3, 4))
def permute_varargs(x):
    return x.permute(2, 0, 1).contiguous()


@program(inputs=lambda: r(2, 3, 4))
def permute_list(x):
    return x.permute([1, 2, 0]) * 2


@program(inputs=lambda: r(2, 3, 4))
def transpose_neg(x):
    return x.transpose(-1, -2)


@program(inputs=lambda: r(3, 4))
def t_and_T(x):
    return x.t() + x.T.T.t()


@program(inputs=lambda: r(3, 4))
def unsqueeze_squeeze(x):
    return x.unsqueeze(0).unsqueeze(-1).squeeze(0).squeeze(-1)


@program(inputs=lambda: r(2, 3, 4))
def flatten_dims(x):
    return x.flatten(1), torch.flatten(x), x.flatten(0, 1)


@program(inputs=lambda: r(3, 1))
def expand_op(x):
    return x.expand(3, 4) + x.expand(-1, 5).sum(1, keepdim=True)


@program(inputs=lambda: r(5, 6))
def index_int(x):
    return x[0] + x[-1]


@program(inputs=lambda: r(5, 6))
def index_slices(x):
    return x[1:3], x[:, ::2], x[::-1 if False else 1, 2:]


@program(inputs=lambda: r(5, 6))
def index_none_ellipsis(x):
    return x[None], x[..., 0], x[:, None, :], x[..., None]


@program(inputs=lambda: r(2, 5, 6))
def index_mixed(x):
    return x[1, 2:4, -1]


@program(inputs=lambda: r(4, 6))
def shape_attr(x):
    n, d = x.shape
    return x.view(n * d) + n


@program(inputs=lambda: r(4, 6))
def size_dims(x):
    return x.sum(dim=x.dim() - 1) * x.ndim


@program(inputs=lambda: r(4, 6))
def numel_scale(x):
    return x / x.numel()


@program(inputs=lambda: r(4, 6))
def chunk_split(x):
    a, b = x.chunk(2, dim=1)
    c, d, e = x.split(2, dim=1)
    return a * b, c + d + e


@program(inputs=lambda: r(4, 6))
def unbind_rows(x):
    rows = x.unbind(0)
    return rows[0] + rows[3]


@program(inputs=lambda: r(4, 6))
def narrow_select(x):
    return x.narrow(1, 2, 3), x.select(0, 1)


@program(inputs=lambda: r(4, 6))
def stride_query(x):
    return x * x.stride(0) + x.stride()[1]


@program(inputs=lambda: r(2, 3, 4))
def unflatten_op(x):
    return x.flatten(1).unflatten(1, (3, 4))


@program(inputs=lambda: r(8, 6))
def shape_arith(x):
    half = x.shape[0] // 2
    return x[:half] - x[half:]


@program(inputs=lambda: (r(4, 6), torch.tensor([0, 2])))
def index_by_tensor(x, idx):
    return x[idx]


@program(inputs=lambda: (r(4, 6), torch.tensor([-1, 2, -4, 2])))
def index_by_negative_and_repeated_indices(x, idx):
    return x[idx] + 1


@program(inputs=lambda: (r(3, 5, 2), torch.tensor([[4, 0], [-2, 1]]), torch.tensor([1])))
def index_by_a_2d_tensor_after_a_slice(x, idx, last):
    return x[:, idx] * 2, x[..., last]


@program(inputs=lambda: (r(4, 6), torch.tensor([0, 2])), breaks="ints beside a tensor")
def index_by_an_int_and_a_tensor(x, idx):
    return x[1, idx]


@program(inputs=lambda n=5: r(n, n))
def triu_of_a_bool_mask(x):
    mask = torch.ones(x.shape[0], x.shape[1], dtype=torch.bool).triu(1)  # stays bool, as torch's
    return mask, x.masked_fill(mask, 0.0), x.tril(-1)


@program(inputs=lambda: (r(3, 4), r(3, 2), r(3, 4) > 1, torch.tensor(0.5)))
def setitem_by_slices_ints_and_a_mask(x, y, m, half):
    z = x * 1
    z[:, :2] = y
    z[0] = 7
    z[m] = -1.0
    z[..., 3] = half
    return z


@program(inputs=lambda: (r(4, 3), r(3)))
def setitem_writes_into_an_input(x, v):
    x[1:3] = v
    return x.sum()


@program(inputs=lambda: (r(4, 3), torch.tensor([0, 2])))
def setitem_through_an_int_tensor(x, idx):
    x[idx] = 0.0
    return x
