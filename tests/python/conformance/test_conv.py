"""Conformance of convolution (torch's conv1d/2d/3d, not transposed) against torch on CPU:
stride, padding, dilation and groups, with and without bias, every floating dtype, channels
last and non-contiguous operands, and the calls torch refuses."""
import pytest
import torch
import torch.nn.functional as F

from harness import cases, check
from kiln import KilnError, ir

TOL = {
    torch.float64: dict(atol=1e-10, rtol=1e-10),
    torch.float32: dict(atol=1e-4, rtol=1e-5),
    torch.float16: dict(atol=1e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=8e-2, rtol=2e-2),
}
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def conv(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    return CONV[x.dim() - 2](x, w, b, stride, padding, dilation, groups)


def as_list(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


def check_conv(x, w, b=None, tol=None, **geometry):
    """kiln's convolution against torch's, attributes as lists (one value or one per dim)."""
    kwargs = {k: (v if k == "groups" else as_list(v)) for k, v in geometry.items()}
    args = (x, w) if b is None else (x, w, b)
    return check("convolution", lambda *a, **_: conv(*a, **geometry), *args,
                 **(tol or TOL[x.dtype]), **kwargs)


# (input sizes, weight sizes, bias, geometry)
GEOMETRY = [
    ((2, 3, 9), (4, 3, 3), True, {}),
    ((2, 4, 10), (6, 2, 3), True, dict(stride=2, padding=1, groups=2)),
    ((1, 2, 11), (3, 2, 4), False, dict(dilation=3, padding=2)),
    ((2, 3, 7, 6), (5, 3, 3, 3), True, {}),
    ((2, 3, 7, 6), (5, 3, 3, 3), True, dict(padding=1)),
    ((2, 4, 9, 8), (6, 2, 3, 2), True, dict(stride=(2, 1), padding=(1, 0), groups=2)),
    ((1, 3, 10, 9), (4, 3, 3, 3), False, dict(dilation=(2, 1), padding=(2, 1), stride=(1, 3))),
    ((2, 6, 5, 5), (6, 1, 3, 3), True, dict(padding=1, groups=6)),  # depthwise
    ((2, 8, 4, 4), (16, 8, 1, 1), True, {}),                        # pointwise
    ((2, 3, 7, 7), (8, 3, 7, 7), False, dict(stride=2, padding=3)),  # a stem
    ((1, 2, 5, 4, 6), (3, 2, 2, 3, 2), True, dict(padding=(1, 0, 1))),
    ((2, 4, 4, 5, 4), (4, 2, 3, 3, 3), False, dict(stride=2, padding=1, groups=2)),
    ((3, 2, 3, 3), (4, 2, 3, 3), True, {}),                         # a 1x1 result
]


@pytest.mark.parametrize("case", cases("convolution", GEOMETRY))
def test_geometry(case):
    xs, ws, bias, geometry = case
    b = torch.randn(ws[0], dtype=torch.float64) if bias else None
    check_conv(torch.randn(xs, dtype=torch.float64), torch.randn(ws, dtype=torch.float64), b,
               **geometry)


@pytest.mark.parametrize("dtype", cases("convolution",
                                        [torch.float32, torch.float16, torch.bfloat16]),
                         ids=str)
def test_dtypes(dtype):
    x = torch.randn(2, 4, 6, 5).to(dtype)
    w = (torch.randn(6, 2, 3, 3) * 0.3).to(dtype)
    b = torch.randn(6).to(dtype)
    check_conv(x, w, b, padding=1, groups=2)


LAYOUTS = ["channels_last", "weight_channels_last", "transposed", "sliced"]


@pytest.mark.parametrize("layout", cases("convolution", LAYOUTS))
def test_layouts(layout):
    """The result is channels last where the input or weight is, as torch's; other layouts
    read as they are."""
    x = torch.randn(2, 3, 6, 7, dtype=torch.float64)
    w = torch.randn(4, 3, 3, 2, dtype=torch.float64)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    elif layout == "weight_channels_last":
        w = w.to(memory_format=torch.channels_last)
    elif layout == "transposed":
        x = x.transpose(2, 3).contiguous().transpose(2, 3)
    else:
        x = torch.randn(2, 3, 6, 14, dtype=torch.float64)[..., ::2]
    out = check_conv(x, w, torch.randn(4, dtype=torch.float64), padding=1)
    assert out.is_contiguous(memory_format=torch.channels_last) == layout.endswith("channels_last")


@pytest.mark.op("convolution")
def test_channels_last_3d():
    """On the CPU a 3-d convolution's result is contiguous, as torch's f32 and f64 kernels."""
    x = torch.randn(1, 3, 4, 5, 6, dtype=torch.float64).to(memory_format=torch.channels_last_3d)
    w = torch.randn(2, 3, 2, 2, 2, dtype=torch.float64)
    assert check_conv(x, w, stride=2).is_contiguous()


@pytest.mark.op("convolution")
@pytest.mark.parametrize("args, match", [
    (((2, 4, 5, 5), (3, 3, 3, 3)), "input channels"),
    (((2, 4, 5, 5), (3, 2, 3, 3), dict(groups=2)), "output channels must be a multiple"),
    (((2, 3, 2, 2), (4, 3, 3, 3)), "smaller than the dilated kernel"),
    (((2, 3, 5), (4, 3, 3, 3)), "rank"),
    (((3, 5), (4, 3, 3)), "1 to 3 spatial dims"),
    (((2, 3, 5, 5), (4, 3, 3, 3), dict(stride=[1, 2, 3])), "needs 1 or 2 values"),
    (((2, 3, 5, 5), (4, 3, 3, 3), dict(stride=[0])), "at least 1"),
    (((2, 3, 5, 5), (4, 3, 3, 3), dict(padding=[-1])), "at least 0"),
])
def test_errors(args, match):
    xs, ws, *kw = args
    with pytest.raises(KilnError) as info:
        ir.eval_op("convolution", torch.randn(xs), torch.randn(ws), **(kw[0] if kw else {}))
    assert info.value.code == "invalid_argument"
    assert match in str(info.value)


@pytest.mark.op("convolution")
def test_dtype_errors():
    x, w = torch.randn(1, 2, 4), torch.randn(3, 2, 2)
    for args, match in [((x.long(), w.long()), "floating dtype"), ((x, w.double()), "dtype"),
                        ((x, w, torch.randn(3).double()), "bias")]:
        with pytest.raises(KilnError, match=match):
            ir.eval_op("convolution", *args)


@pytest.mark.op("convolution")
def test_one_spelling():
    """[2, 2] and [2] are one geometry: one graph text and hash."""
    x, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
    a = ir.op_graph("convolution", x, w, stride=[2, 2], padding=[0, 0])[0]
    b = ir.op_graph("convolution", x, w, stride=[2])[0]
    assert str(a) == str(b) and a.structural_hash() == b.structural_hash()
