"""In-place ops on intermediates and on inputs, grad-mode regions."""
import torch
import torch.nn.functional as F

from corpus import program

r = torch.randn


@program(inputs=lambda: r(4, 4))
def inplace_intermediate(x):
    y = x * 2
    y.add_(1)
    y.mul_(3)
    return y


@program(inputs=lambda: r(4, 4))
def inplace_augmented(x):
    y = x + 0
    y += 2
    y *= x
    y -= 1
    y /= 4
    return y


@program(inputs=lambda: r(4, 4))
def inplace_on_input(x):
    x.add_(1)
    return x * 2


@program(inputs=lambda: r(4, 4))
def inplace_relu_method(x):
    y = x.clone()
    y.relu_()
    return y


@program(inputs=lambda: (r(4, 4), r(4, 4)))
def inplace_input_from_other(x, y):
    x.mul_(y)
    return x.sum()


@program(inputs=lambda: r(4, 4))
def inplace_then_view(x):
    y = x.clone()
    y.sub_(1)
    return y.view(16)


@program(inputs=lambda: r(4, 4))
def no_grad_region(x):
    with torch.no_grad():
        y = x * 2
    return y + 1


@program(inputs=lambda n=4: r(n, 4))
def write_through_detach(x):
    y = x * 2
    d = y.detach()  # a view of all of y: a write through it shows in y, as eager's
    d.add_(1)
    return y + d, d.requires_grad


@program(inputs=lambda: r(4, 4))
def enable_grad_region(x):
    with torch.enable_grad():
        y = x.exp()
    return y


@program(inputs=lambda: r(4, 4))
def nested_no_grad(x):
    with torch.no_grad():
        with torch.no_grad():
            x = x + 1
        x = x * 2
    return x


@program(inputs=lambda: r(4, 4))
def inplace_clamp(x):
    y = x.clone()
    y.clamp_(min=0.0)
    return y


@program(inputs=lambda: r(4, 4))
def inplace_chain_sigmoid(x):
    y = torch.zeros_like(x)
    y.add_(x).sigmoid_()
    return y


@program(inputs=lambda: (r(4, 8), r(8, 6)), rtol=2e-2, atol=2e-2)
def autocast_matmul(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        z = torch.softmax(y, dim=-1)
    return y, z, y.float() + 1


@program(inputs=lambda: (r(4, 8), r(6, 8), r(6)), rtol=2e-2, atol=2e-2)
def autocast_linear_default_dtype(x, w, b):
    with torch.autocast(device_type="cpu"):
        return F.linear(x, w, b).relu()


@program(inputs=lambda: (r(4, 8), r(8, 6)))
def autocast_disabled(x, w):
    with torch.autocast("cpu", enabled=False):
        return x @ w


@program(inputs=lambda: (r(4, 8).double(), r(8, 6).double()))
def autocast_leaves_float64(x, w):
    with torch.autocast("cpu"):
        return x @ w


@program(inputs=lambda n=4: (torch.randn(2, n), torch.ones(2, n, dtype=torch.int64), torch.randn(n)))
def buffers_zeroed_and_filled_in_place(x, counts, scale):
    counts.zero_()
    scale.fill_(0.5)
    return x * scale + counts, x.clone().fill_(2)
