// convolution: torch's N-d convolution (conv1d/2d/3d, not transposed) as one op, with
// its inference, its one spelling and its decomposition into core ops (im2col: the
// windows gathered by views, then one matrix product a group).
// TODO(issue 45): on CUDA an extern call of cuDNN's convolutions (and their grads) instead.
#include <algorithm>
#include <string>

#include "convolution.h"
#include "infer.h"
#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"

namespace kiln::ir::detail {

ConvGeometry ConvGeometry::of(size_t spatial, const std::vector<int64_t>& stride,
                              const std::vector<int64_t>& padding,
                              const std::vector<int64_t>& dilation, int64_t groups,
                              const std::function<void(const char*, const std::string&)>& fail) {
  ConvGeometry g;
  g.groups = groups;
  auto spread = [&](const char* name, const std::vector<int64_t>& list, int64_t least) {
    if (list.size() != 1 && list.size() != spatial)
      fail(name, "needs 1 or " + std::to_string(spatial) + " values, got " +
                     std::to_string(list.size()));
    std::vector<int64_t> out(spatial, list.at(0));
    if (list.size() == spatial) out = list;
    for (int64_t v : out)
      if (v < least) fail(name, "must be at least " + std::to_string(least));
    return out;
  };
  g.stride = spread("stride", stride, 1);
  g.padding = spread("padding", padding, 0);
  g.dilation = spread("dilation", dilation, 1);
  if (groups < 1) fail("groups", "must be at least 1");
  return g;
}

sym::Expr ConvGeometry::outputSize(size_t i, sym::Expr in, int64_t kernel) const {
  int64_t reach = dilation[i] * (kernel - 1) + 1;
  return sym::floorDiv(in + 2 * padding[i] - reach, stride[i]) + 1;
}

bool channelsLastLike(const TensorMeta& t) {
  if (t.dim() != 4 && t.dim() != 5) return false;
  // torch's is_channels_last_strides_{2d,3d}: channels fastest, then the spatial dims from
  // the last, then the batch, dims of size 1 skipped; ambiguous layouts are contiguous.
  std::vector<size_t> order = t.dim() == 4 ? std::vector<size_t>{1, 3, 2, 0}
                                           : std::vector<size_t>{1, 4, 3, 2, 0};
  std::vector<int64_t> sizes, strides;
  for (size_t d = 0; d < t.dim(); ++d) {
    auto size = t.sizes[d].asInteger(), stride = t.strides[d].asInteger();
    if (!size || !stride) return false; // symbolic: not decided here, taken as contiguous
    sizes.push_back(*size);
    strides.push_back(*stride);
  }
  if (strides[1] == 0) return false;
  int64_t least = 0;
  for (size_t d : order) {
    if (strides[d] == 0 || strides[d] < least) return false;
    if (d == 0 && least == strides[1]) return false;
    least = strides[d] * (sizes[d] > 1 ? sizes[d] : 1);
  }
  return true;
}

bool channelsLastResult(const TensorMeta& input, const TensorMeta& weight) {
  if (input.dim() == 5 && input.device.type == DeviceType::Cpu) return false;
  return channelsLastLike(input) || channelsLastLike(weight);
}

namespace {

ConvGeometry geometryOf(const OpCall& call, size_t spatial) {
  return ConvGeometry::of(spatial, call.intList("stride"), call.intList("padding"),
                          call.intList("dilation"), call.intArg("groups"),
                          [&](const char* arg, const std::string& m) { call.fail(arg, m); });
}

// The kernel's spatial sizes, which must be known.
std::vector<int64_t> kernelOf(const OpCall& call, const TensorMeta& weight) {
  std::vector<int64_t> kernel;
  for (size_t d = 2; d < weight.dim(); ++d) {
    auto k = sym::knownValue(weight.sizes[d]);
    if (!k) throw Error(ErrorCode::Unsupported, "convolution: a symbolic kernel size");
    if (*k < 1) call.fail("weight", "has an empty kernel");
    kernel.push_back(*k);
  }
  return kernel;
}

// input [N, C, *S], weight [O, C / groups, *K], bias [O]: [N, O, *out], channels last as
// channelsLastResult says.
Value inferConvolution(const OpCall& call) {
  const TensorMeta& in = call.tensor("input");
  const TensorMeta& w = call.tensor("weight");
  if (in.dim() < 3 || in.dim() > 5)
    call.fail("input", "needs a batch, channels and 1 to 3 spatial dims, got " +
                           std::to_string(in.dim()) + " dims");
  if (w.dim() != in.dim()) call.fail("weight", "needs the input's rank");
  if (!isFloating(in.dtype))
    call.fail("input", "needs a floating dtype, got " + std::string(name(in.dtype)));
  if (w.dtype != in.dtype)
    call.fail("weight", "has dtype " + std::string(name(w.dtype)) + ", the input " +
                            std::string(name(in.dtype)));
  size_t spatial = in.dim() - 2;
  ConvGeometry geo = geometryOf(call, spatial);
  std::vector<int64_t> kernel = kernelOf(call, w);
  requireEqual(call, "weight", w.sizes[1] * geo.groups, in.sizes[1],
               "input channels must be weight.size(1) * groups");
  require(call, "weight", sym::eq(sym::mod(w.sizes[0], geo.groups), 0),
          "output channels must be a multiple of groups");
  bool grad = in.requiresGrad || w.requiresGrad;
  if (call.has("bias")) {
    const TensorMeta& b = call.tensor("bias");
    if (b.dim() != 1) call.fail("bias", "must be 1-d");
    requireEqual(call, "bias", b.sizes[0], w.sizes[0], "must have one value per output channel");
    if (b.dtype != in.dtype)
      call.fail("bias", "has dtype " + std::string(name(b.dtype)) + ", the input " +
                            std::string(name(in.dtype)));
    grad = grad || b.requiresGrad;
  }
  Device device = commonDevice(call, {"input", "weight", "bias"});
  Shape sizes = {in.sizes[0], w.sizes[0]};
  for (size_t i = 0; i < spatial; ++i) {
    sym::Expr o = geo.outputSize(i, in.sizes[2 + i], kernel[i]);
    require(call, "input", sym::ge(o, 1),
            "spatial dim " + std::to_string(i) + " of size " + sym::toString(in.sizes[2 + i]) +
                " (padded by " + std::to_string(geo.padding[i]) +
                ") is smaller than the dilated kernel");
    sizes.push_back(o);
  }
  TensorMeta out = fresh(call, in.dtype, sizes, device, grad);
  if (channelsLastResult(in, w)) {
    // Channels fastest, then the spatial dims from the last, then the batch.
    sym::Expr step = call.table().integer(1);
    std::vector<size_t> order = {1};
    for (size_t d = out.dim() - 1; d >= 2; --d) order.push_back(d);
    order.push_back(0);
    for (size_t d : order) {
      out.strides[d] = step;
      step = step * out.sizes[d];
    }
  }
  return out;
}

// A list whose values are all equal is spelled as one value ([2, 2] as [2]), so that
// the default ([1] or [0]) is dropped and one geometry has one spelling.
void canonicalConvolution(const OpCall&, const Value&, std::vector<Attr>& attrs) {
  for (Attr& a : attrs) {
    auto* list = std::get_if<std::vector<int64_t>>(&a.value);
    if (!list || list->empty()) continue;
    if (std::all_of(list->begin(), list->end(), [&](int64_t v) { return v == list->front(); }))
      list->resize(1);
  }
}

// x with `padding[i]` zeros before and after each spatial dim i.
ValueId zeroPadded(Graph& g, ValueId x, const std::vector<int64_t>& padding) {
  for (size_t i = 0; i < padding.size(); ++i) {
    if (padding[i] == 0) continue;
    const TensorMeta m = g.meta(x);
    auto dim = static_cast<int64_t>(2 + i);
    std::vector<sym::Expr> sizes = m.sizes;
    sizes[2 + i] = g.symbols().integer(padding[i]);
    ValueId zeros = g.call("full", {},
                           {{"size", sizes},
                            {"fill_value", int64_t{0}},
                            {"dtype", m.dtype},
                            {"device", toString(m.device)}});
    x = g.call("cat", {zeros, x, zeros}, {{"dim", dim}});
  }
  return x;
}

// im2col: for each kernel offset, the input elements it meets at each output position
// (a narrow and a strided slice of the padded input per spatial dim), stacked as
// [N, C, K, *out] (K the kernel's positions, first dim slowest), then for each group
// weight [O/G, C/G * K] times columns [C/G * K, L]. The result is [N, O, *out], or the
// product taken the other way round ([L, O/G]) where the result is channels last.
ValueId convolution(Graph& g, const Node& node, const std::vector<ValueId>& in) {
  // Copies: the graph's values move as nodes are added.
  const TensorMeta x = g.meta(in[0]), w = g.meta(in[1]);
  const TensorMeta& result = node.value.tensor();
  size_t spatial = x.dim() - 2;
  auto list = [&](const char* name, int64_t otherwise) {
    const AttrValue* v = node.attr(name);
    if (!v) return std::vector<int64_t>{otherwise};
    if (auto* i = std::get_if<int64_t>(v)) return std::vector<int64_t>{*i};
    return std::get<std::vector<int64_t>>(*v);
  };
  const AttrValue* groupsAttr = node.attr("groups");
  int64_t groups = groupsAttr ? std::get<int64_t>(*groupsAttr) : 1;
  ConvGeometry geo = ConvGeometry::of(
      spatial, list("stride", 1), list("padding", 0), list("dilation", 1), groups,
      [](const char* arg, const std::string& m) {
        throw Error(ErrorCode::Internal, "convolution: " + std::string(arg) + ": " + m);
      });
  sym::SymbolTable& table = g.symbols();
  auto integer = [&](int64_t v) { return table.integer(v); };

  ValueId padded = zeroPadded(g, in[0], geo.padding);
  std::vector<int64_t> kernel;
  for (size_t d = 2; d < w.dim(); ++d) kernel.push_back(*sym::knownValue(w.sizes[d]));
  std::vector<ValueId> windows;
  std::vector<int64_t> at(spatial, 0);
  for (bool more = true; more;) {
    ValueId v = padded;
    for (size_t i = 0; i < spatial; ++i) {
      auto dim = static_cast<int64_t>(2 + i);
      sym::Expr o = result.sizes[2 + i];
      v = g.call("narrow", {v},
                 {{"dim", dim},
                  {"start", at[i] * geo.dilation[i]},
                  {"length", (o - 1) * geo.stride[i] + 1}});
      if (geo.stride[i] > 1) v = g.call("slice", {v}, {{"dim", dim}, {"step", geo.stride[i]}});
    }
    windows.push_back(v);
    more = false;
    for (size_t i = spatial; i-- > 0;) { // the next offset, the last dim fastest
      if (++at[i] < kernel[i]) {
        more = true;
        break;
      }
      at[i] = 0;
    }
  }
  sym::Expr n = x.sizes[0], outChannels = w.sizes[0];
  sym::Expr perGroup = sym::floorDiv(outChannels, groups);
  sym::Expr reach = w.sizes[1] * integer(static_cast<int64_t>(windows.size()));
  sym::Expr positions = integer(1);
  for (size_t i = 0; i < spatial; ++i) positions = positions * result.sizes[2 + i];
  ValueId columns = g.call("stack", windows, {{"dim", int64_t{2}}});
  columns = g.call("reshape", {columns},
                   {{"size", std::vector<sym::Expr>{n, integer(groups), reach, positions}}});
  ValueId weights = g.call(
      "reshape", {in[1]}, {{"size", std::vector<sym::Expr>{integer(groups), perGroup, reach}}});

  std::vector<sym::Expr> outer = {n, outChannels};
  for (size_t i = 0; i < spatial; ++i) outer.push_back(result.sizes[2 + i]);
  ValueId y;
  if (!channelsLastResult(x, w)) {
    y = g.call("matmul", {weights, columns});      // [N, G, O/G, L]
    y = g.call("reshape", {y}, {{"size", outer}}); // [N, O, *out]
  } else {
    ValueId rows = g.call("transpose", {columns}, {{"dim0", int64_t{2}}, {"dim1", int64_t{3}}});
    ValueId w2 = g.call("transpose", {weights}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}});
    y = g.call("matmul", {rows, w2}); // [N, G, L, O/G]
    if (groups > 1)
      y = g.call("contiguous",
                 {g.call("permute", {y}, {{"dims", std::vector<int64_t>{0, 2, 1, 3}}})});
    std::vector<sym::Expr> last = {n};
    for (size_t i = 0; i < spatial; ++i) last.push_back(result.sizes[2 + i]);
    last.push_back(outChannels);
    y = g.call("reshape", {y}, {{"size", last}}); // [N, *out, O]
    std::vector<int64_t> dims = {0, static_cast<int64_t>(spatial + 1)};
    for (size_t i = 0; i < spatial; ++i) dims.push_back(static_cast<int64_t>(1 + i));
    y = g.call("permute", {y}, {{"dims", dims}});
  }
  if (in.size() > 2) {
    std::vector<sym::Expr> perChannel(spatial + 2, integer(1));
    perChannel[1] = outChannels;
    y = g.call("add", {y, g.call("reshape", {in[2]}, {{"size", perChannel}})});
  }
  return y;
}

} // namespace

void addConvolutionOps(std::vector<OpInfo>& ops) {
  OpInfo conv{"convolution",
              {{"input", ArgKind::Tensor},
               {"weight", ArgKind::Tensor},
               {"bias", ArgKind::Tensor, true},
               {"stride", ArgKind::IntList, false, std::vector<int64_t>{1}},
               {"padding", ArgKind::IntList, false, std::vector<int64_t>{0}},
               {"dilation", ArgKind::IntList, false, std::vector<int64_t>{1}},
               {"groups", ArgKind::Int, false, int64_t{1}}},
              inferConvolution};
  conv.decompose = convolution;
  conv.canonical = canonicalConvolution;
  ops.push_back(std::move(conv));
}

} // namespace kiln::ir::detail
