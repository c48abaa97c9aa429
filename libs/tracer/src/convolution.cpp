// Convolutions as the IR's convolution op, and pooling from windows of the input: each
// kernel offset's elements (a narrow and a strided slice per spatial dim) stacked along a
// dim of their own, then reduced. Max pooling under grad picks its element by argmax and
// gather, so the grad reaches the first maximum of each window, as torch's kernels send it.
#include "convolution.h"

#include "composite.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "kiln/ir/dtype.h"
#include "kiln/sym/expr.h"
#include "kiln/sym/range.h"

namespace kiln::tracer {

namespace {

bool given(const std::optional<Var>& v) { return v && (*v)->kind != Kind::None; }

// An int or a sequence of ints (kernel_size=3, stride=(2, 1)), one per spatial dim (one
// value stands for all).
std::vector<int64_t> perDim(TraceState& s, const std::string& what, const Var& v, size_t dims) {
  if (v->kind == Kind::Int) return std::vector<int64_t>(dims, intArg(s, what, v));
  if (v->kind != Kind::List && v->kind != Kind::Tuple)
    unsupported(what + ": expected an int or a tuple of ints, got a " + kindName(v->kind));
  std::vector<int64_t> out;
  for (const Var& item : v->items) out.push_back(intArg(s, what, item));
  if (out.size() == 1) out.resize(dims, out[0]);
  if (out.size() != dims)
    unsupported(what + " with " + std::to_string(out.size()) + " values for " +
                std::to_string(dims) + " spatial dims");
  return out;
}

std::vector<int64_t> perDimOr(TraceState& s, const std::string& what, const std::optional<Var>& v,
                              size_t dims, int64_t otherwise) {
  if (!given(v)) return std::vector<int64_t>(dims, otherwise);
  return perDim(s, what, *v, dims);
}

Var op(TraceState& s, const std::string& name, const Var& x, std::vector<ir::Attr> attrs = {}) {
  return s.op(name, {x->value}, std::move(attrs));
}

// w, its sizes specialised (guarded) where they are symbolic (a weight the call passes may be
// dynamic): each pinned value is a fact the convolution's geometry reads.
Var staticSizes(TraceState& s, const Var& w) {
  ir::TensorMeta m = s.meta(w);
  for (size_t d = 0; d < m.dim(); ++d) {
    if (sym::knownValue(m.sizes[d])) continue;
    int64_t k = s.concrete(integer(m.sizes[d]));
    s.table.assume(sym::eq(m.sizes[d], k));
  }
  return w;
}

// The input as [N, C, *S]: an unbatched [C, *S] gains a batch of one (`unbatched` says so).
Var batched(TraceState& s, const std::string& name, const Var& x, size_t spatial, bool& unbatched) {
  size_t rank = s.meta(x).dim();
  unbatched = rank == spatial + 1;
  if (!unbatched && rank != spatial + 2)
    unsupported(name + " of a " + std::to_string(rank) + "-d input");
  return unbatched ? op(s, "unsqueeze", x, {{"dim", int64_t{0}}}) : x;
}

Var unbatch(TraceState& s, const Var& y, bool unbatched) {
  return unbatched ? op(s, "squeeze", y, {{"dim", std::vector<int64_t>{0}}}) : y;
}

// x [N, C, *S] with `before[i]` and `after[i]` elements of `fill` around spatial dim i.
Var padded(TraceState& s, Var x, const std::vector<int64_t>& before, const std::vector<int64_t>& after,
           double fill) {
  for (size_t i = 0; i < before.size(); ++i) {
    auto dim = static_cast<int64_t>(2 + i);
    std::vector<ir::ValueId> parts;
    for (int64_t n : {before[i], int64_t{-1}, after[i]}) {
      if (n == 0) continue;
      if (n < 0) {
        parts.push_back(x->value);
        continue;
      }
      ir::TensorMeta m = s.meta(x);
      std::vector<sym::Expr> sizes = m.sizes;
      sizes[2 + i] = s.table.integer(n);
      parts.push_back(s.op("full", {},
                           {{"size", sizes},
                            {"fill_value", fill},
                            {"dtype", m.dtype},
                            {"device", ir::toString(m.device)}})
                          ->value);
    }
    if (parts.size() > 1) x = s.op("cat", parts, {{"dim", dim}});
  }
  return x;
}

// The windows of a padded x [N, C, *P]: [N, C, K, *out], K the kernel's offsets (the last
// spatial dim fastest, as torch's kernels scan a window).
Var windows(TraceState& s, const Var& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
            const std::vector<int64_t>& dilation, const std::vector<sym::Expr>& out) {
  size_t spatial = kernel.size();
  std::vector<ir::ValueId> parts;
  std::vector<int64_t> at(spatial, 0);
  for (bool more = true; more;) {
    Var v = x;
    for (size_t i = 0; i < spatial; ++i) {
      auto dim = static_cast<int64_t>(2 + i);
      v = op(s, "narrow", v,
             {{"dim", dim}, {"start", at[i] * dilation[i]}, {"length", (out[i] - 1) * stride[i] + 1}});
      if (stride[i] > 1) v = op(s, "slice", v, {{"dim", dim}, {"step", stride[i]}});
    }
    parts.push_back(v->value);
    more = false;
    for (size_t i = spatial; i-- > 0;) {
      if (++at[i] < kernel[i]) {
        more = true;
        break;
      }
      at[i] = 0;
    }
  }
  return s.op("stack", parts, {{"dim", int64_t{2}}});
}

// The largest element along `dim`. Under grad, the first largest taken by index, so that its
// grad goes to that one element alone (amax's would share it among ties).
Var largest(TraceState& s, const Var& x, int64_t dim) {
  if (!(s.gradEnabled && s.meta(x).requiresGrad))
    return op(s, "amax", x, {{"dim", std::vector<int64_t>{dim}}});
  Var at = op(s, "argmax", x, {{"dim", dim}, {"keepdim", true}});
  Var picked = s.op("gather", {x->value, at->value}, {{"dim", dim}});
  return op(s, "squeeze", picked, {{"dim", std::vector<int64_t>{dim}}});
}

// A pooling window's output size along one dim, as torch's pooling_output_shape: with
// ceil_mode the last window may run past the padding but must start inside the input or
// its left padding. ceil_mode specialises the input size.
sym::Expr pooledSize(TraceState& s, const std::string& name, sym::Expr in, int64_t kernel, int64_t stride,
                     int64_t pad, int64_t dilation, bool ceil) {
  int64_t reach = dilation * (kernel - 1) + 1;
  sym::Expr out = sym::floorDiv(in + 2 * pad - reach, stride) + 1;
  if (ceil) {
    int64_t n = s.concrete(integer(in));
    int64_t o = (n + 2 * pad - reach + stride - 1) / stride + 1;
    if ((o - 1) * stride >= n + pad) --o;
    out = s.table.integer(o);
  }
  if (!s.decide(sym::ge(out, 1))) unsupported(name + ": the output would be empty (torch raises)");
  return out;
}

struct Pooling {
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil = false;
};

// kernel_size, stride (None or empty: the kernel's), padding, dilation and ceil_mode; a padding
// over half the (dilated) kernel is refused, as torch refuses it.
Pooling poolingOf(TraceState& s, const std::string& name, const Params& p, size_t spatial, bool dilated) {
  Pooling pool;
  if (!p["kernel_size"]) unsupported(name + " without kernel_size");
  pool.kernel = perDim(s, name + " kernel_size", *p["kernel_size"], spatial);
  std::optional<Var> stride = p["stride"];
  bool emptyStride = given(stride) && ((*stride)->kind == Kind::List || (*stride)->kind == Kind::Tuple) &&
                     (*stride)->items.empty();
  pool.stride = given(stride) && !emptyStride ? perDim(s, name + " stride", *stride, spatial) : pool.kernel;
  pool.padding = perDimOr(s, name + " padding", p["padding"], spatial, 0);
  pool.dilation = dilated ? perDimOr(s, name + " dilation", p["dilation"], spatial, 1)
                          : std::vector<int64_t>(spatial, 1);
  pool.ceil = boolArg(name + " ceil_mode", p["ceil_mode"], false);
  for (size_t i = 0; i < spatial; ++i) {
    if (pool.kernel[i] < 1 || pool.stride[i] < 1 || pool.dilation[i] < 1 || pool.padding[i] < 0)
      unsupported(name + " with a kernel, stride or dilation under 1 or a negative padding");
    int64_t reach = pool.dilation[i] * (pool.kernel[i] - 1) + 1;
    if (pool.padding[i] > (dilated ? reach : pool.kernel[i]) / 2)
      unsupported(name + ": padding over half the kernel (torch raises)");
  }
  return pool;
}

// The windows of x [N, C, *S] for `pool`, padded with `fill`: [N, C, K, *out].
Var pooledWindows(TraceState& s, const std::string& name, const Var& x, const Pooling& pool, double fill) {
  size_t spatial = pool.kernel.size();
  ir::TensorMeta m = s.meta(x);
  std::vector<sym::Expr> out;
  std::vector<int64_t> after = pool.padding;
  for (size_t i = 0; i < spatial; ++i) {
    out.push_back(pooledSize(s, name, m.sizes[2 + i], pool.kernel[i], pool.stride[i], pool.padding[i],
                             pool.dilation[i], pool.ceil));
    if (pool.ceil) { // ceil_mode's last window may need more than the padding
      int64_t reach = pool.dilation[i] * (pool.kernel[i] - 1) + 1;
      int64_t end = (*out[i].asInteger() - 1) * pool.stride[i] + reach;
      after[i] = std::max<int64_t>(pool.padding[i], end - pool.padding[i] - s.concrete(integer(m.sizes[2 + i])));
    }
  }
  return windows(s, padded(s, x, pool.padding, after, fill), pool.kernel, pool.stride, pool.dilation, out);
}

// The transposed convolution as a convolution: the input spread out by the stride (stride - 1
// zeros between its elements), padded by dilation (kernel - 1) - padding on each side (plus
// output_padding on the right; a negative pad crops), convolved at stride 1 with the kernel
// flipped and each group's input and output channels swapped.
Var transposedConvolution(TraceState& s, const std::string& name, Var x, Var w, const std::optional<Var>& bias,
                          std::vector<int64_t> stride, std::vector<int64_t> padding,
                          std::vector<int64_t> outputPadding, std::vector<int64_t> dilation, int64_t groups) {
  size_t spatial = stride.size();
  ir::TensorMeta wm = s.meta(w);
  if (groups < 1) unsupported(name + " with groups under 1 (torch raises)");
  for (size_t i = 0; i < spatial; ++i) {
    if (stride[i] < 1 || dilation[i] < 1 || padding[i] < 0 || outputPadding[i] < 0)
      unsupported(name + " with a stride or dilation under 1 or a negative padding (torch raises)");
    if (outputPadding[i] >= std::max(stride[i], dilation[i]))
      unsupported(name + ": output_padding must be smaller than stride or dilation (torch raises)");
  }
  std::vector<int64_t> kernel;
  for (size_t i = 0; i < spatial; ++i) {
    auto k = sym::knownValue(wm.sizes[2 + i]);
    if (!k) unsupported(name + " with a symbolic kernel size");
    kernel.push_back(*k);
  }
  auto in = sym::knownValue(wm.sizes[0]), out = sym::knownValue(wm.sizes[1]);
  if (!in || !out || *in % groups != 0) unsupported(name + ": weight's input channels are not a multiple of groups");
  // Spread: each element followed by stride - 1 zeros, the trailing ones dropped.
  for (size_t i = 0; i < spatial; ++i) {
    if (stride[i] == 1) continue;
    auto dim = static_cast<int64_t>(2 + i);
    Var zeros = op(s, "zeros_like", x);
    std::vector<ir::ValueId> parts(static_cast<size_t>(stride[i]), zeros->value);
    parts[0] = x->value;
    std::vector<sym::Expr> sizes = s.meta(x).sizes;
    sym::Expr n = sizes[2 + i];
    sizes[2 + i] = n * stride[i];
    Var spread = op(s, "reshape", s.op("stack", parts, {{"dim", dim + 1}}), {{"size", sizes}});
    x = op(s, "narrow", spread, {{"dim", dim}, {"start", int64_t{0}}, {"length", (n - 1) * stride[i] + 1}});
  }
  std::vector<int64_t> before(spatial), after(spatial), cropBefore(spatial), cropAfter(spatial);
  for (size_t i = 0; i < spatial; ++i) {
    int64_t left = dilation[i] * (kernel[i] - 1) - padding[i], right = left + outputPadding[i];
    before[i] = std::max<int64_t>(left, 0), cropBefore[i] = std::max<int64_t>(-left, 0);
    after[i] = std::max<int64_t>(right, 0), cropAfter[i] = std::max<int64_t>(-right, 0);
  }
  x = padded(s, x, before, after, 0.0);
  for (size_t i = 0; i < spatial; ++i) {
    if (cropBefore[i] == 0 && cropAfter[i] == 0) continue;
    sym::Expr length = s.meta(x).sizes[2 + i] - (cropBefore[i] + cropAfter[i]);
    if (!s.decide(sym::ge(length, 1))) unsupported(name + ": the output would be empty (torch raises)");
    x = op(s, "narrow", x, {{"dim", static_cast<int64_t>(2 + i)}, {"start", cropBefore[i]}, {"length", length}});
  }
  // [C_in, C_out / G, *k] as [C_out, C_in / G, *k], the kernel read backwards.
  std::vector<sym::Expr> grouped = {s.table.integer(groups), s.table.integer(*in / groups), s.table.integer(*out)};
  std::vector<sym::Expr> swapped = {s.table.integer(*out * groups), s.table.integer(*in / groups)};
  std::vector<int64_t> spatialDims;
  for (size_t i = 0; i < spatial; ++i) {
    grouped.push_back(wm.sizes[2 + i]);
    swapped.push_back(wm.sizes[2 + i]);
    spatialDims.push_back(static_cast<int64_t>(2 + i));
  }
  w = op(s, "reshape", w, {{"size", grouped}});
  w = op(s, "transpose", w, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}});
  w = flipped(s, op(s, "reshape", w, {{"size", swapped}}), spatialDims);
  std::vector<ir::ValueId> inputs = {x->value, w->value};
  if (given(bias)) inputs.push_back((*bias)->value);
  return s.op("convolution", inputs,
              {{"stride", std::vector<int64_t>(spatial, 1)},
               {"padding", std::vector<int64_t>(spatial, 0)},
               {"dilation", dilation},
               {"groups", groups}});
}

// F.conv_transpose1d/2d/3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
// groups=1, dilation=1).
Var convTranspose(TraceState& s, const std::string& name, size_t spatial, const std::vector<Var>& args,
                  const Kwargs& kwargs) {
  Params p = bindParams(name, args, kwargs,
                        {"input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"});
  Var x = tensorArg(name + " input", p["input"]);
  Var w = staticSizes(s, tensorArg(name + " weight", p["weight"]));
  std::optional<Var> bias = p["bias"];
  if (given(bias) && (*bias)->kind != Kind::Tensor) unsupported(name + " with a non-tensor bias");
  if (s.meta(w).dim() != spatial + 2) unsupported(name + " of a " + std::to_string(s.meta(w).dim()) + "-d weight");
  bool unbatched = false;
  x = batched(s, name, x, spatial, unbatched);
  if (given(p["padding"]) && (*p["padding"])->kind == Kind::Str) unsupported(name + " with a padding string");
  Var y = transposedConvolution(s, name, x, w, bias, perDimOr(s, name + " stride", p["stride"], spatial, 1),
                                perDimOr(s, name + " padding", p["padding"], spatial, 0),
                                perDimOr(s, name + " output_padding", p["output_padding"], spatial, 0),
                                perDimOr(s, name + " dilation", p["dilation"], spatial, 1),
                                given(p["groups"]) ? intArg(s, name + " groups", *p["groups"]) : 1);
  return unbatch(s, y, unbatched);
}

// torch.nn.modules.utils._single/_pair/_triple/_quadruple(x): a tuple of x's items, or of n x's.
Var repeatedTuple(TraceState& s, const std::string& name, size_t n, const std::vector<Var>& args,
                  const Kwargs& kwargs) {
  Params p = bindParams(name, args, kwargs, {"x"});
  if (!p["x"]) unsupported(name + "() without an argument");
  Var x = *p["x"];
  if (x->kind == Kind::List || x->kind == Kind::Tuple) return sequence(Kind::Tuple, x->items);
  if (x->kind == Kind::Tensor || x->kind == Kind::Str || x->kind == Kind::Dict || x->kind == Kind::Object)
    unsupported(name + " of a " + kindName(x->kind));
  (void)s;
  return sequence(Kind::Tuple, std::vector<Var>(n, x));
}

// F.conv1d/2d/3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) and
// torch.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
// groups). padding='same' pads the left by half the dilated kernel and the right by the rest,
// as torch does.
Var convolution(TraceState& s, const std::string& name, size_t spatial, const std::vector<Var>& args,
                const Kwargs& kwargs) {
  bool aten = spatial == 0;
  Params p = aten ? bindParams(name, args, kwargs,
                               {"input", "weight", "bias", "stride", "padding", "dilation", "transposed",
                                "output_padding", "groups"})
                  : bindParams(name, args, kwargs,
                               {"input", "weight", "bias", "stride", "padding", "dilation", "groups"});
  Var x = tensorArg(name + " input", p["input"]);
  Var w = staticSizes(s, tensorArg(name + " weight", p["weight"]));
  if (aten) {
    if (!p["transposed"] || !p["output_padding"] || !p["groups"]) unsupported(name + " with arguments missing");
    spatial = s.meta(w).dim() < 3 ? 1 : s.meta(w).dim() - 2;
    if (boolArg(name + " transposed", p["transposed"], false)) {
      bool unbatched = false;
      x = batched(s, name, x, spatial, unbatched);
      Var y = transposedConvolution(s, name, x, w, p["bias"], perDim(s, name + " stride", *p["stride"], spatial),
                                    perDim(s, name + " padding", *p["padding"], spatial),
                                    perDim(s, name + " output_padding", *p["output_padding"], spatial),
                                    perDim(s, name + " dilation", *p["dilation"], spatial),
                                    intArg(s, name + " groups", *p["groups"]));
      return unbatch(s, y, unbatched);
    }
  }
  std::optional<Var> bias = p["bias"];
  if (given(bias) && (*bias)->kind != Kind::Tensor) unsupported(name + " with a non-tensor bias");
  std::vector<int64_t> stride = perDimOr(s, name + " stride", p["stride"], spatial, 1);
  std::vector<int64_t> dilation = perDimOr(s, name + " dilation", p["dilation"], spatial, 1);
  int64_t groups = given(p["groups"]) ? intArg(s, name + " groups", *p["groups"]) : 1;
  bool unbatched = false;
  x = batched(s, name, x, spatial, unbatched);
  if (s.meta(w).dim() != spatial + 2) unsupported(name + " of a " + std::to_string(s.meta(w).dim()) + "-d weight");

  std::vector<int64_t> padding(spatial, 0), extra(spatial, 0);
  std::optional<Var> pad = p["padding"];
  if (given(pad) && (*pad)->kind == Kind::Str) {
    const std::string& mode = (*pad)->name;
    if (mode == "same") {
      for (int64_t st : stride)
        if (st != 1) unsupported(name + "(padding='same') with a stride (torch raises)");
      for (size_t i = 0; i < spatial; ++i) {
        auto k = sym::knownValue(s.meta(w).sizes[2 + i]);
        if (!k) unsupported(name + " with a symbolic kernel size");
        int64_t total = dilation[i] * (*k - 1);
        padding[i] = total / 2;
        extra[i] = total - 2 * padding[i];
      }
    } else if (mode != "valid") {
      unsupported(name + "(padding='" + mode + "')");
    }
  } else {
    padding = perDimOr(s, name + " padding", pad, spatial, 0);
  }
  if (std::any_of(extra.begin(), extra.end(), [](int64_t e) { return e > 0; }))
    x = padded(s, x, std::vector<int64_t>(spatial, 0), extra, 0.0);
  std::vector<ir::ValueId> inputs = {x->value, w->value};
  if (given(bias)) inputs.push_back((*bias)->value);
  Var y = s.op("convolution", inputs,
               {{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}});
  return unbatch(s, y, unbatched);
}

Var maxPool(TraceState& s, const std::string& name, size_t spatial, const std::vector<Var>& args,
            const Kwargs& kwargs) {
  Params p = bindParams(name, args, kwargs,
                        {"input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"});
  bool withIndices = boolArg(name + " return_indices", p["return_indices"], false);
  Var x = tensorArg(name + " input", p["input"]);
  if (!ir::isFloating(s.meta(x).dtype)) unsupported(name + " of a " + std::string(ir::name(s.meta(x).dtype)) + " tensor");
  Pooling pool = poolingOf(s, name, p, spatial, true);
  bool unbatched = false;
  x = batched(s, name, x, spatial, unbatched);
  Var all = pooledWindows(s, name, x, pool, -std::numeric_limits<double>::infinity());
  if (!withIndices) return unbatch(s, largest(s, all, 2), unbatched);
  // The first maximum's offset in its window, as the flat index of its input position
  // (((d * H) + h) * W + w), as torch's max_pool returns it.
  Var offset = op(s, "argmax", all, {{"dim", int64_t{2}}, {"keepdim", true}});
  Var values = op(s, "squeeze", s.op("gather", {all->value, offset->value}, {{"dim", int64_t{2}}}),
                  {{"dim", std::vector<int64_t>{2}}});
  offset = op(s, "squeeze", offset, {{"dim", std::vector<int64_t>{2}}});
  ir::TensorMeta in = s.meta(x), out = s.meta(values);
  std::string device = ir::toString(in.device);
  Var flat;
  int64_t after = 1; // the kernel positions of the dims after i
  for (size_t i = spatial; i-- > 0;) {
    Var k = s.op("remainder", {s.op("div", {offset->value}, {{"other", after}, {"rounding_mode", std::string("floor")}})->value},
                 {{"other", pool.kernel[i]}});
    after *= pool.kernel[i];
    std::vector<sym::Expr> along(out.dim(), s.table.integer(1));
    along[2 + i] = out.sizes[2 + i];
    Var o = s.op("reshape", {s.op("arange", {}, {{"end", out.sizes[2 + i]}, {"dtype", DType::Int64}, {"device", device}})->value},
                 {{"size", along}});
    Var start = s.op("add", {s.op("mul", {o->value}, {{"other", pool.stride[i]}})->value}, {{"other", -pool.padding[i]}});
    Var at = s.op("add", {start->value, s.op("mul", {k->value}, {{"other", pool.dilation[i]}})->value});
    if (!flat) {
      flat = at;
      continue;
    }
    sym::Expr stride = s.table.integer(1);
    for (size_t j = i + 1; j < spatial; ++j) stride = stride * in.sizes[2 + j];
    flat = s.op("add", {flat->value, s.op("mul", {at->value}, {{"other", stride}})->value});
  }
  return sequence(Kind::Tuple, {unbatch(s, values, unbatched), unbatch(s, flat, unbatched)});
}

// avg_pool: the window's sum over its divisor — divisor_override, or the window's size clipped
// to the padded input (count_include_pad) or to the input, per output position as torch counts it.
Var avgPool(TraceState& s, const std::string& name, size_t spatial, const std::vector<Var>& args,
            const Kwargs& kwargs) {
  std::vector<std::string> names = {"input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"};
  if (spatial > 1) names.push_back("divisor_override");
  Params p = bindParams(name, args, kwargs, names);
  Var x = tensorArg(name + " input", p["input"]);
  DType dtype = s.meta(x).dtype;
  if (!ir::isFloating(dtype)) unsupported(name + " of a " + std::string(ir::name(dtype)) + " tensor");
  Pooling pool = poolingOf(s, name, p, spatial, false);
  bool includePad = boolArg(name + " count_include_pad", p["count_include_pad"], true);
  std::optional<Var> override = p["divisor_override"];
  bool unbatched = false;
  x = batched(s, name, x, spatial, unbatched);
  bool half = dtype == DType::Float16 || dtype == DType::BFloat16;
  if (half) x = op(s, "to_dtype", x, {{"dtype", DType::Float32}}); // summed and divided in f32
  Var all = pooledWindows(s, name, x, pool, 0.0);
  Var y = op(s, "sum", all, {{"dim", std::vector<int64_t>{2}}});
  ir::TensorMeta m = s.meta(x), out = s.meta(y);
  bool allPadCounted = includePad || std::all_of(pool.padding.begin(), pool.padding.end(), [](int64_t v) { return v == 0; });
  if (given(override)) {
    int64_t d = intArg(s, name + " divisor_override", *override);
    if (d == 0) unsupported(name + " with divisor_override=0 (torch raises)");
    y = s.op("div", {y->value}, {{"other", static_cast<double>(d)}});
  } else if (!pool.ceil && allPadCounted) {
    int64_t size = 1;
    for (int64_t k : pool.kernel) size *= k;
    y = s.op("div", {y->value}, {{"other", static_cast<double>(size)}});
  } else {
    // Per dim, each window's count: its span clipped to [-pad, S + pad) or to [0, S).
    std::string device = ir::toString(m.device);
    Var divisor;
    for (size_t i = 0; i < spatial; ++i) {
      int64_t n = s.concrete(integer(m.sizes[2 + i])), k = pool.kernel[i], pad = pool.padding[i];
      Var start = s.op("arange", {}, {{"end", out.sizes[2 + i]}, {"dtype", DType::Int64}, {"device", device}});
      start = s.op("add", {s.op("mul", {start->value}, {{"other", pool.stride[i]}})->value}, {{"other", -pad}});
      Var end = s.op("clamp", {s.op("add", {start->value}, {{"other", k}})->value}, {{"max", n + pad}});
      if (!includePad) {
        start = s.op("clamp", {start->value}, {{"min", int64_t{0}}});
        end = s.op("clamp", {end->value}, {{"max", n}});
      }
      Var count = s.op("sub", {end->value, start->value});
      std::vector<sym::Expr> along(spatial + 2, s.table.integer(1));
      along[2 + i] = out.sizes[2 + i];
      count = op(s, "reshape", count, {{"size", along}});
      divisor = divisor ? s.op("mul", {divisor->value, count->value}) : count;
    }
    y = s.op("div", {y->value, divisor->value});
  }
  if (half) y = op(s, "to_dtype", y, {{"dtype", dtype}});
  return unbatch(s, y, unbatched);
}

// x pooled along `dim` into `out` windows of torch's adaptive pooling, window i spanning
// [floor(i S / out), ceil((i + 1) S / out)): they vary in size and may overlap. An average is a
// product with the windows' weights; a maximum is taken over the input masked to each window.
// Pooling dim by dim gives the whole window's average, and its maximum at the first position
// in scan order (the first row holding it, then its first column), as torch's kernels pick it.
Var pooledAlong(TraceState& s, Var x, int64_t dim, sym::Expr in, int64_t out, bool max) {
  ir::TensorMeta m = s.meta(x);
  auto last = static_cast<int64_t>(m.dim()) - 1;
  if (dim != last) x = op(s, "transpose", x, {{"dim0", dim}, {"dim1", last}});
  std::string device = ir::toString(m.device);
  auto arange = [&](sym::Expr end) {
    return s.op("arange", {}, {{"end", end}, {"dtype", DType::Int64}, {"device", device}});
  };
  Var window = s.op("unsqueeze", {arange(s.table.integer(out))->value}, {{"dim", int64_t{1}}}); // [out, 1]
  Var start = s.op("div", {s.op("mul", {window->value}, {{"other", in}})->value},
                   {{"other", out}, {"rounding_mode", std::string("floor")}});
  Var end = s.op("div", {s.op("add", {s.op("mul", {window->value}, {{"other", in}})->value}, {{"other", in + (out - 1)}})->value},
                 {{"other", out}, {"rounding_mode", std::string("floor")}});
  Var position = s.op("unsqueeze", {arange(in)->value}, {{"dim", int64_t{0}}}); // [1, S]
  Var inside = s.op("logical_and", {s.op("ge", {position->value, start->value})->value,
                                    s.op("lt", {position->value, end->value})->value}); // [out, S]
  Var y;
  if (max) {
    Var spread = s.op("unsqueeze", {x->value}, {{"dim", last}}); // [..., 1, S]
    Var masked = s.callOp("where", {inside, spread, floating(-std::numeric_limits<double>::infinity())}, {});
    y = largest(s, masked, last + 1);
  } else {
    Var count = s.op("sub", {end->value, start->value});
    Var weights = s.op("div", {s.op("to_dtype", {inside->value}, {{"dtype", m.dtype}})->value, count->value});
    weights = s.op("to_dtype", {weights->value}, {{"dtype", m.dtype}});
    y = s.op("matmul", {x->value, s.op("transpose", {weights->value}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}})->value});
  }
  if (dim != last) y = op(s, "transpose", y, {{"dim0", dim}, {"dim1", last}});
  return y;
}

// adaptive pooling: to sizes that divide the input's, x as [N, C, o0, k0, o1, k1, ...] with each
// window's k's reduced; to other sizes dim by dim (pooledAlong).
Var adaptivePool(TraceState& s, const std::string& name, size_t spatial, bool max, const std::vector<Var>& args,
                 const Kwargs& kwargs) {
  Params p = max ? bindParams(name, args, kwargs, {"input", "output_size", "return_indices"})
                 : bindParams(name, args, kwargs, {"input", "output_size"});
  if (boolArg(name + " return_indices", p["return_indices"], false))
    unsupported(name + "(return_indices=True)"); // TODO(issue 45): the window's flat index
  Var x = tensorArg(name + " input", p["input"]);
  if (!p["output_size"]) unsupported(name + " without output_size");
  DType dtype = s.meta(x).dtype;
  if (!ir::isFloating(dtype)) unsupported(name + " of a " + std::string(ir::name(dtype)) + " tensor");
  bool unbatched = false;
  x = batched(s, name, x, spatial, unbatched);
  ir::TensorMeta m = s.meta(x);
  Var size = *p["output_size"];
  std::vector<Var> sizes = size->kind == Kind::List || size->kind == Kind::Tuple
                               ? size->items
                               : std::vector<Var>(spatial, size);
  if (sizes.size() == 1) sizes.resize(spatial, sizes[0]);
  if (sizes.size() != spatial) unsupported(name + " with " + std::to_string(sizes.size()) + " output sizes");
  std::vector<sym::Expr> split = {m.sizes[0], m.sizes[1]}, outer = split;
  std::vector<int64_t> inner;
  std::vector<std::optional<int64_t>> uneven(spatial);
  for (size_t i = 0; i < spatial; ++i) {
    sym::Expr in = m.sizes[2 + i];
    if (sizes[i]->kind == Kind::None) { // the input's own size: windows of one
      split.insert(split.end(), {in, s.table.integer(1)});
      outer.push_back(in);
    } else {
      int64_t o = intArg(s, name + " output_size", sizes[i]);
      if (o < 1) unsupported(name + " to an empty size");
      if (!s.decide(sym::eq(sym::mod(in, o), 0))) uneven[i] = o;
      split.insert(split.end(), {s.table.integer(o), sym::floorDiv(in, o)});
      outer.push_back(s.table.integer(o));
    }
    inner.push_back(static_cast<int64_t>(3 + 2 * i));
  }
  if (std::any_of(uneven.begin(), uneven.end(), [](const std::optional<int64_t>& o) { return o.has_value(); })) {
    bool half = dtype == DType::Float16 || dtype == DType::BFloat16;
    if (half && !max) x = op(s, "to_dtype", x, {{"dtype", DType::Float32}}); // averaged in f32
    for (size_t i = 0; i < spatial; ++i) {
      if (sizes[i]->kind == Kind::None) continue;
      int64_t o = intArg(s, name + " output_size", sizes[i]);
      x = pooledAlong(s, x, static_cast<int64_t>(2 + i), m.sizes[2 + i], o, max);
    }
    if (half && !max) x = op(s, "to_dtype", x, {{"dtype", dtype}});
    return unbatch(s, x, unbatched);
  }
  Var y = op(s, "reshape", x, {{"size", split}});
  if (!max) {
    y = op(s, "mean", y, {{"dim", inner}});
  } else {
    // The windows' elements last, in scan order: [N, C, *out, k0 * k1 ...].
    std::vector<int64_t> order = {0, 1};
    for (size_t i = 0; i < spatial; ++i) order.push_back(static_cast<int64_t>(2 + 2 * i));
    order.insert(order.end(), inner.begin(), inner.end());
    y = op(s, "permute", y, {{"dims", order}});
    std::vector<sym::Expr> flat = outer;
    flat.push_back(s.table.integer(-1));
    y = largest(s, op(s, "reshape", y, {{"size", flat}}), static_cast<int64_t>(spatial + 2));
  }
  return unbatch(s, y, unbatched);
}

// F.interpolate's source positions along one dim, as torch's upsample kernels compute them:
// `scale` is in/out, or 1/scale_factor where a factor is given (and not recomputed), rounded to
// the kernels' float (f64 inputs: double).
struct Resampling {
  std::string mode;
  bool alignCorners = false;
};

double sourceScale(int64_t in, int64_t out, std::optional<double> factor, bool alignCorners, bool wide) {
  auto round = [&](double v) { return wide ? v : static_cast<double>(static_cast<float>(v)); };
  if (alignCorners) return out > 1 ? round(static_cast<double>(in - 1) / static_cast<double>(out - 1)) : 0.0;
  if (factor) return round(1.0 / *factor);
  return wide ? static_cast<double>(in) / static_cast<double>(out)
              : static_cast<double>(static_cast<float>(in) / static_cast<float>(out));
}

// x resampled to `out` entries along dim (nearest, nearest-exact or linear).
Var resampled(TraceState& s, Var x, int64_t dim, int64_t in, int64_t out, std::optional<double> factor,
              const Resampling& how) {
  ir::TensorMeta m = s.meta(x);
  bool wide = m.dtype == DType::Float64;
  DType math = wide ? DType::Float64 : DType::Float32;
  std::string device = ir::toString(m.device);
  double scale = sourceScale(in, out, factor, how.alignCorners, wide);
  Var position = s.op("arange", {}, {{"end", out}, {"dtype", math}, {"device", device}});
  auto indexOf = [&](const Var& real) { // floor, as int64, at most in - 1
    Var i = s.op("to_dtype", {s.op("floor", {real->value})->value}, {{"dtype", DType::Int64}});
    return s.op("clamp", {i->value}, {{"max", in - 1}});
  };
  if (how.mode == "nearest" || how.mode == "nearest-exact") {
    Var index;
    if (out == in) index = s.op("arange", {}, {{"end", out}, {"dtype", DType::Int64}, {"device", device}});
    else if (how.mode == "nearest" && out == 2 * in)
      index = s.op("div", {s.op("arange", {}, {{"end", out}, {"dtype", DType::Int64}, {"device", device}})->value},
                   {{"other", int64_t{2}}, {"rounding_mode", std::string("floor")}});
    else {
      if (how.mode == "nearest-exact") position = s.op("add", {position->value}, {{"other", 0.5}});
      index = indexOf(s.op("mul", {position->value}, {{"other", scale}}));
    }
    return s.op("index_select", {x->value, index->value}, {{"dim", dim}});
  }
  if (how.mode == "bicubic") {
    // Keys' cubic convolution (A = -0.75) over x[i - 1 .. i + 2], each index clamped to the
    // input, from the source position unclamped, as torch's upsample_bicubic2d.
    Var real = how.alignCorners
                   ? s.op("mul", {position->value}, {{"other", scale}})
                   : s.op("sub", {s.op("mul", {s.op("add", {position->value}, {{"other", 0.5}})->value}, {{"other", scale}})->value},
                          {{"other", 0.5}});
    Var floor = s.op("floor", {real->value});
    Var t = s.op("sub", {real->value, floor->value});
    Var base = s.op("to_dtype", {floor->value}, {{"dtype", DType::Int64}});
    const double a = -0.75;
    auto outer = [&](Var x) { // ((a x - 5a) x + 8a) x - 4a, for 1 <= |x| < 2
      Var y = s.op("add", {s.op("mul", {x->value}, {{"other", a}})->value}, {{"other", -5 * a}});
      y = s.op("add", {s.op("mul", {y->value, x->value})->value}, {{"other", 8 * a}});
      return s.op("add", {s.op("mul", {y->value, x->value})->value}, {{"other", -4 * a}});
    };
    auto inner = [&](Var x) { // ((a + 2) x - (a + 3)) x x + 1, for |x| <= 1
      Var y = s.op("add", {s.op("mul", {x->value}, {{"other", a + 2}})->value}, {{"other", -(a + 3)}});
      return s.op("add", {s.op("mul", {s.op("mul", {y->value, x->value})->value, x->value})->value}, {{"other", 1.0}});
    };
    Var oneMinus = s.op("add", {s.op("neg", {t->value})->value}, {{"other", 1.0}});
    std::vector<Var> weights = {outer(s.op("add", {t->value}, {{"other", 1.0}})), inner(t), inner(oneMinus),
                                outer(s.op("add", {oneMinus->value}, {{"other", 1.0}}))};
    std::vector<sym::Expr> along(m.dim(), s.table.integer(1));
    along[static_cast<size_t>(dim)] = s.table.integer(out);
    Var sum;
    for (int64_t k = 0; k < 4; ++k) {
      Var at = s.op("clamp", {s.op("add", {base->value}, {{"other", k - 1}})->value},
                    {{"min", int64_t{0}}, {"max", in - 1}});
      Var w = s.op("reshape", {weights[static_cast<size_t>(k)]->value}, {{"size", along}});
      Var term = s.op("mul", {s.op("index_select", {x->value, at->value}, {{"dim", dim}})->value, w->value});
      sum = sum ? s.op("add", {sum->value, term->value}) : term;
    }
    return sum;
  }
  // linear: (1 - l) x[i0] + l x[i1] from the source position, clamped to the input.
  Var real = how.alignCorners
                 ? s.op("mul", {position->value}, {{"other", scale}})
                 : s.op("clamp", {s.op("sub", {s.op("mul", {s.op("add", {position->value}, {{"other", 0.5}})->value},
                                                     {{"other", scale}})->value},
                                         {{"other", 0.5}})->value},
                        {{"min", 0.0}});
  Var i0 = indexOf(real);
  Var lambda = s.op("clamp", {s.op("sub", {real->value, s.op("to_dtype", {i0->value}, {{"dtype", math}})->value})->value},
                    {{"min", 0.0}, {"max", 1.0}});
  Var i1 = s.op("clamp", {s.op("add", {i0->value}, {{"other", int64_t{1}}})->value}, {{"max", in - 1}});
  std::vector<sym::Expr> along(m.dim(), s.table.integer(1));
  along[static_cast<size_t>(dim)] = s.table.integer(out);
  Var l = s.op("reshape", {lambda->value}, {{"size", along}});
  Var keep = s.op("add", {s.op("neg", {l->value})->value}, {{"other", 1.0}});
  Var a = s.op("mul", {s.op("index_select", {x->value, i0->value}, {{"dim", dim}})->value, keep->value});
  Var b = s.op("mul", {s.op("index_select", {x->value, i1->value}, {{"dim", dim}})->value, l->value});
  return s.op("add", {a->value, b->value});
}

// F.interpolate(input, size=None, scale_factor=None, mode='nearest', align_corners=None,
// recompute_scale_factor=None, antialias=False) in modes nearest, nearest-exact, linear,
// bilinear and trilinear (dim by dim), and area (adaptive average pooling). The spatial
// sizes are specialised (guarded): the source positions are numbers of them.
Var interpolate(TraceState& s, const std::string& name, const std::vector<Var>& args, const Kwargs& kwargs) {
  Params p = bindParams(name, args, kwargs,
                        {"input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias"});
  Var x = tensorArg(name + " input", p["input"]);
  ir::TensorMeta m = s.meta(x);
  if (m.dim() < 3 || m.dim() > 5) unsupported(name + " of a " + std::to_string(m.dim()) + "-d input");
  size_t spatial = m.dim() - 2;
  std::string mode = "nearest";
  if (given(p["mode"])) {
    if ((*p["mode"])->kind != Kind::Str) unsupported(name + " with a mode that is not a str");
    mode = (*p["mode"])->name;
  }
  const std::map<std::string, size_t> linear = {{"linear", 1}, {"bilinear", 2}, {"trilinear", 3}};
  bool isLinear = linear.count(mode) > 0;
  if (isLinear && linear.at(mode) != spatial)
    unsupported(name + "(mode='" + mode + "') of a " + std::to_string(m.dim()) + "-d input (torch raises)");
  if (mode == "bicubic" && spatial != 2)
    unsupported(name + "(mode='bicubic') of a " + std::to_string(m.dim()) + "-d input (torch raises)");
  if (!isLinear && mode != "nearest" && mode != "nearest-exact" && mode != "area" && mode != "bicubic")
    unsupported(name + "(mode='" + mode + "')");
  Resampling how{mode, given(p["align_corners"]) && boolArg(name + " align_corners", p["align_corners"], false)};
  if (given(p["align_corners"]) && !isLinear && mode != "bicubic") unsupported(name + ": align_corners with mode '" + mode + "' (torch raises)");
  if (given(p["antialias"]) && boolArg(name + " antialias", p["antialias"], false))
    unsupported(name + "(antialias=True)");
  if (!ir::isFloating(m.dtype)) unsupported(name + " of a " + std::string(ir::name(m.dtype)) + " tensor");
  bool bySize = given(p["size"]), byFactor = given(p["scale_factor"]);
  if (bySize == byFactor) unsupported(name + " needs exactly one of size and scale_factor (torch raises)");
  std::vector<int64_t> in, out;
  std::vector<std::optional<double>> factors(spatial);
  for (size_t i = 0; i < spatial; ++i) in.push_back(s.concrete(integer(m.sizes[2 + i])));
  if (bySize) {
    out = perDim(s, name + " size", *p["size"], spatial);
  } else {
    Var f = *p["scale_factor"];
    std::vector<Var> items = f->kind == Kind::List || f->kind == Kind::Tuple ? f->items : std::vector<Var>(spatial, f);
    if (items.size() != spatial) unsupported(name + " with " + std::to_string(items.size()) + " scale factors");
    bool recompute = given(p["recompute_scale_factor"]) && boolArg(name + " recompute_scale_factor", p["recompute_scale_factor"], false);
    for (size_t i = 0; i < spatial; ++i) {
      double factor = s.number(items[i]);
      if (!(factor > 0)) unsupported(name + " with a scale factor that is not positive");
      out.push_back(static_cast<int64_t>(std::floor(static_cast<double>(in[i]) * factor)));
      if (!recompute) factors[i] = factor;
    }
  }
  for (int64_t o : out)
    if (o < 1) unsupported(name + " to an empty size (torch raises)");
  if (mode == "area") {
    std::vector<Var> sizes;
    for (int64_t o : out) sizes.push_back(integer(s.table.integer(o)));
    return adaptivePool(s, name, spatial, false, {x, sequence(Kind::Tuple, sizes)}, {});
  }
  DType dtype = m.dtype;
  bool half = dtype == DType::Float16 || dtype == DType::BFloat16;
  bool weighted = isLinear || mode == "bicubic";
  if (half && weighted) x = op(s, "to_dtype", x, {{"dtype", DType::Float32}}); // interpolated in f32
  for (size_t i = 0; i < spatial; ++i)
    x = resampled(s, x, static_cast<int64_t>(2 + i), in[i], out[i], factors[i], how);
  if (half && weighted) x = op(s, "to_dtype", x, {{"dtype", dtype}});
  return x;
}

// The spatial dims a name's suffix says ("max_pool2d" -> 2, "max_pool2d_with_indices" -> 2),
// 0 when it has none.
size_t spatialOf(const std::string& m, const std::string& stem) {
  if (m.size() < stem.size() + 2 || m.compare(0, stem.size(), stem) != 0) return 0;
  char digit = m[stem.size()];
  if (digit < '1' || digit > '3' || m[stem.size() + 1] != 'd') return 0;
  return static_cast<size_t>(digit - '0');
}

} // namespace

std::optional<Var> callConvolution(TraceState& s, const std::string& name, const std::string& m,
                                   const std::vector<Var>& args, const Kwargs& kwargs) {
  if (name.rfind("Tensor.", 0) == 0) return std::nullopt;
  if (name.rfind("torch.nn.", 0) == 0) {
    std::string last = name.substr(name.rfind('.') + 1);
    const std::vector<std::string> tuples = {"_single", "_pair", "_triple", "_quadruple"};
    for (size_t n = 0; n < tuples.size(); ++n)
      if (last == tuples[n]) return repeatedTuple(s, name, n + 1, args, kwargs);
  }
  auto rest = [&](const std::string& stem) { return m.substr(std::min(m.size(), stem.size() + 2)); };
  if (m == "interpolate" || m == "upsample") return interpolate(s, name, args, kwargs);
  if (m == "convolution") return convolution(s, name, 0, args, kwargs);
  if (size_t k = spatialOf(m, "conv_transpose"); k && rest("conv_transpose").empty())
    return convTranspose(s, name, k, args, kwargs);
  if (size_t k = spatialOf(m, "conv"); k && rest("conv").empty()) return convolution(s, name, k, args, kwargs);
  if (size_t k = spatialOf(m, "max_pool"); k) {
    if (rest("max_pool") == "_with_indices") {
      Kwargs withIndices = kwargs;
      withIndices.emplace_back("return_indices", boolean(true));
      if (args.size() > 6) unsupported(name + " with return_indices given");
      return maxPool(s, name, k, args, withIndices);
    }
    if (rest("max_pool").empty()) return maxPool(s, name, k, args, kwargs);
  }
  if (size_t k = spatialOf(m, "avg_pool"); k && rest("avg_pool").empty()) return avgPool(s, name, k, args, kwargs);
  for (bool max : {false, true}) {
    std::string stem = max ? "adaptive_max_pool" : "adaptive_avg_pool";
    size_t k = spatialOf(m, stem);
    if (!k) continue;
    // torch.adaptive_max_pool1d and the _with_indices forms return the indices too.
    if (!rest(stem).empty() || (max && name.rfind("torch.nn.functional.", 0) != 0))
      unsupported(name + ": the windows' indices"); // TODO(issue 45)
    return adaptivePool(s, name, k, max, args, kwargs);
  }
  return std::nullopt;
}

} // namespace kiln::tracer
