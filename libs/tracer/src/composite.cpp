// Torch calls written as several graph ops. Each binds torch's signature (bindParams)
// and computes what torch computes from ops the IR has, so autograd and both
// backends take them as they are.
#include "composite.h"

#include <cmath>
#include <limits>
#include <set>

#include "kiln/ir/dtype.h"

namespace kiln::tracer {

namespace {

Var num(TraceState& s, int64_t k) { return integer(s.table.integer(k)); }

// The value `x` written into `self` (an in-place form: x.lerp_(...)): a where over an
// all-true mask, the IR's write of one tensor into another.
Var writeInto(TraceState& s, const Var& self, const Var& x) {
  if (s.meta(x).dtype != s.meta(self).dtype) unsupported("an in-place result of another dtype than its tensor's");
  Var all = make(Kind::DType);
  all->dtype = DType::Bool;
  Var mask = s.callOp("ones_like", {self}, {{"dtype", all}});
  return s.callOp("where_out", {mask, x, self, self}, {});
}

// lerp(self, end, weight): torch's two-sided form, exact at both ends.
Var lerp(TraceState& s, const Var& self, const Var& end, const Var& weight) {
  Var diff = s.callOp("sub", {end, self}, {});
  if (weight->kind != Kind::Tensor) {
    double w = s.number(weight);
    if (std::abs(w) < 0.5) return s.callOp("add", {self, s.callOp("mul", {diff, weight}, {})}, {});
    return s.callOp("sub", {end, s.callOp("mul", {diff, floating(1.0 - w)}, {})}, {});
  }
  Var small = s.callOp("lt", {s.callOp("abs", {weight}, {}), floating(0.5)}, {});
  Var fromStart = s.callOp("add", {self, s.callOp("mul", {weight, diff}, {})}, {});
  Var oneMinus = s.callOp("sub", {s.callOp("neg", {weight}, {}), num(s, -1)}, {});
  Var fromEnd = s.callOp("sub", {end, s.callOp("mul", {diff, oneMinus}, {})}, {});
  return s.callOp("where", {small, fromStart, fromEnd}, {});
}

// x.repeat(*sizes): x (padded with leading 1s) tiled sizes[d] times along each dim.
Var repeat(TraceState& s, const Var& x, const Var& sizes) {
  ir::TensorMeta meta = s.meta(x);
  std::vector<Var> reps = sizes->items;
  if (reps.size() < meta.dim()) unsupported("repeat with fewer sizes than the tensor has dims");
  std::vector<Var> spread, tiled, merged;
  size_t pad = reps.size() - meta.dim();
  for (size_t d = 0; d < reps.size(); ++d) {
    if (reps[d]->kind != Kind::Int) unsupported("repeat of a non-int size");
    Var size = d < pad ? num(s, 1) : integer(meta.sizes[d - pad]);
    spread.insert(spread.end(), {num(s, 1), size});
    tiled.insert(tiled.end(), {reps[d], size});
    merged.push_back(integer(reps[d]->symbolic * size->symbolic));
  }
  Var y = s.callOp("reshape", {x, sequence(Kind::Tuple, spread)}, {});
  y = s.callOp("expand", {y, sequence(Kind::Tuple, tiled)}, {});
  return s.callOp("reshape", {y, sequence(Kind::Tuple, merged)}, {});
}

// repeat_interleave(x, repeats: int, dim): each element `repeats` times in a row along dim
// (x flattened first without a dim).
Var repeatInterleave(TraceState& s, Var x, int64_t repeats, std::optional<int64_t> dim) {
  if (!dim) x = s.callOp("reshape", {x, sequence(Kind::Tuple, {num(s, -1)})}, {});
  ir::TensorMeta meta = s.meta(x);
  int64_t rank = static_cast<int64_t>(meta.dim()), d = dim.value_or(0);
  if (d < -rank || d >= rank) unsupported("repeat_interleave along dim " + std::to_string(d));
  size_t at = static_cast<size_t>(d < 0 ? d + rank : d);
  std::vector<Var> tiled, merged;
  for (size_t k = 0; k < meta.dim(); ++k) {
    tiled.push_back(integer(meta.sizes[k]));
    if (k == at) tiled.push_back(num(s, repeats));
    merged.push_back(integer(k == at ? meta.sizes[k] * s.table.integer(repeats) : meta.sizes[k]));
  }
  Var y = s.op("unsqueeze", {x->value}, {{"dim", static_cast<int64_t>(at + 1)}});
  y = s.callOp("expand", {y, sequence(Kind::Tuple, tiled)}, {});
  return s.callOp("reshape", {y, sequence(Kind::Tuple, merged)}, {});
}

// Whether x is contiguous as torch decides it: strides of dims of size 1 do not count.
bool isContiguous(TraceState& s, const Var& x) {
  ir::TensorMeta meta = s.meta(x);
  sym::Expr expected = s.table.integer(1);
  for (size_t d = meta.dim(); d-- > 0;) {
    if (s.decide(sym::eq(meta.sizes[d], s.table.integer(1)))) continue;
    if (!s.decide(sym::eq(meta.strides[d], expected))) return false;
    expected = expected * meta.sizes[d];
  }
  return true;
}

// nonzero(x, as_tuple=True) and torch.where(x): one index tensor per dim.
Var nonzeroColumns(TraceState& s, const Var& x) {
  size_t rank = s.meta(x).dim();
  if (rank == 0) unsupported("nonzero(as_tuple=True) of a 0-d tensor");
  Var indices = s.unbackedOp("nonzero", {x->value});
  std::vector<Var> columns;
  for (size_t d = 0; d < rank; ++d)
    columns.push_back(s.op("select", {indices->value}, {{"dim", int64_t{1}}, {"index", static_cast<int64_t>(d)}}));
  return sequence(Kind::Tuple, columns);
}

// torch.finfo's fields of a floating dtype: bits, eps, max, min, tiny (smallest_normal),
// resolution.
struct FloatInfo {
  int64_t bits;
  double eps, max, tiny, resolution;
};

FloatInfo floatInfo(DType dtype) {
  switch (dtype) {
  case DType::Float64: return {64, std::numeric_limits<double>::epsilon(), std::numeric_limits<double>::max(),
                               std::numeric_limits<double>::min(), 1e-15};
  case DType::Float32: return {32, std::numeric_limits<float>::epsilon(), std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::min(), 1e-6};
  case DType::Float16: return {16, 0.0009765625, 65504.0, 6.103515625e-05, 0.001};
  case DType::BFloat16: return {16, 0.0078125, 3.3895313892515355e+38, std::numeric_limits<float>::min(), 0.01};
  default: unsupported("torch.finfo of " + std::string(ir::name(dtype)));
  }
}

Var typeInfo(const std::string& kind, DType dtype, std::vector<std::pair<std::string, Var>> fields) {
  Var info = make(Kind::Dict);
  info->type = {"torch", kind};
  Var d = make(Kind::DType);
  d->dtype = dtype;
  fields.emplace_back("dtype", d);
  for (auto& [name, value] : fields) info->keys.push_back(string(name)), info->items.push_back(value);
  return info;
}


// A dim argument wrapped into [0, rank).
int64_t dimOf(TraceState& s, const std::string& what, const Var& v, size_t rank) {
  int64_t d = intArg(s, what, v), r = static_cast<int64_t>(rank == 0 ? 1 : rank);
  if (d < -r || d >= r) unsupported(what + " " + std::to_string(d) + " out of range");
  return d < 0 ? d + r : d;
}

// The positions [0, n) on x's device, in `step` order: arange(n) or its reverse.
Var positions(TraceState& s, const Var& x, sym::Expr n, bool reversed) {
  std::string device = ir::toString(s.meta(x).device);
  Var up = s.op("arange", {}, {{"end", n}, {"dtype", DType::Int64}, {"device", device}});
  if (!reversed) return up;
  return s.callOp("add", {s.callOp("neg", {up}, {}), integer(n + int64_t{-1})}, {}); // n - 1 - i
}

// x.flip(dims): each dim read backwards (an index_select of the reversed positions).
Var flip(TraceState& s, Var x, const std::vector<int64_t>& dims) {
  for (int64_t d : dims) {
    if (s.meta(x).dim() == 0) return s.callOp("clone", {x}, {});
    x = s.callOp("index_select", {x, num(s, d), positions(s, x, s.meta(x).sizes[static_cast<size_t>(d)], true)}, {});
  }
  return x;
}

// x.roll(shift, dim): the last `shift` entries along dim first (a cat of two slices).
Var roll(TraceState& s, const Var& x, int64_t shift, int64_t dim) {
  int64_t n = s.concrete(integer(s.meta(x).sizes[static_cast<size_t>(dim)]));
  if (n == 0) return s.callOp("clone", {x}, {});
  int64_t k = ((shift % n) + n) % n;
  if (k == 0) return s.callOp("clone", {x}, {});
  Var tail = s.callOp("narrow", {x, num(s, dim), num(s, n - k), num(s, k)}, {});
  Var head = s.callOp("narrow", {x, num(s, dim), num(s, 0), num(s, n - k)}, {});
  return s.callOp("cat", {sequence(Kind::List, {tail, head}), num(s, dim)}, {});
}

// A list of dims from an int or a tuple/list of ints.
std::vector<int64_t> dimsOf(TraceState& s, const std::string& what, const Var& v, size_t rank) {
  std::vector<int64_t> dims;
  if (v->kind == Kind::Tuple || v->kind == Kind::List) {
    for (const Var& d : v->items) dims.push_back(dimOf(s, what, d, rank));
  } else {
    dims.push_back(dimOf(s, what, v, rank));
  }
  return dims;
}
} // namespace

Var typeInfoOf(TraceState& s, const std::string& name, const std::vector<Var>& args, const Kwargs& kwargs) {
  bool floating = name == "torch.finfo";
  Params p = bindParams(name, args, kwargs, {"type"});
  DType dtype = DType::Float32; // torch.finfo(): the default dtype, which the entry guards
  if (auto t = p["type"]) {
    if ((*t)->kind != Kind::DType) unsupported(name + " of a " + kindName((*t)->kind));
    dtype = (*t)->dtype;
  } else if (!floating) {
    unsupported("torch.iinfo() without a dtype");
  }
  if (floating) {
    FloatInfo f = floatInfo(dtype);
    return typeInfo("finfo", dtype, {{"bits", num(s, f.bits)}, {"eps", tracer::floating(f.eps)},
                                     {"max", tracer::floating(f.max)}, {"min", tracer::floating(-f.max)},
                                     {"tiny", tracer::floating(f.tiny)}, {"smallest_normal", tracer::floating(f.tiny)},
                                     {"resolution", tracer::floating(f.resolution)}});
  }
  int64_t bits = static_cast<int64_t>(elementSize(dtype)) * 8;
  bool isUnsigned = dtype == DType::UInt8;
  if (!ir::isIntegral(dtype, false)) unsupported("torch.iinfo of " + std::string(ir::name(dtype)));
  int64_t max = bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - (isUnsigned ? 0 : 1))) - 1;
  int64_t min = isUnsigned ? 0 : (bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1)));
  return typeInfo("iinfo", dtype, {{"bits", num(s, bits)}, {"max", num(s, max)}, {"min", num(s, min)}});
}

namespace {

// cumsum / cumprod(x, dim, dtype=None): each position's sum (product) of the elements up to it,
// as a masked reduction over [..., n, n] (a quadratic number of terms: exact for integers, and
// the grad comes through where and sum/prod's rules). Integers and bools give int64, as torch.
// TODO(issue 45): a scan op, linear in n.
Var cumulative(TraceState& s, const std::string& name, bool product, Var x, int64_t dim,
               const std::optional<Var>& dtype) {
  ir::TensorMeta m = s.meta(x);
  if (dtype && (*dtype)->kind != Kind::None) {
    if ((*dtype)->kind != Kind::DType) unsupported(name + " with a dtype that is not a torch.dtype");
    x = s.op("to_dtype", {x->value}, {{"dtype", (*dtype)->dtype}});
  } else if (!ir::isFloating(m.dtype)) {
    x = s.op("to_dtype", {x->value}, {{"dtype", DType::Int64}});
  }
  if (m.dim() == 0) return s.op("clone", {x->value});
  auto rank = static_cast<int64_t>(m.dim());
  if (dim < -rank || dim >= rank) unsupported(name + " along dim " + std::to_string(dim));
  if (dim < 0) dim += rank;
  bool last = dim == rank - 1;
  if (!last) x = s.op("transpose", {x->value}, {{"dim0", dim}, {"dim1", rank - 1}});
  sym::Expr n = m.sizes[static_cast<size_t>(dim)];
  std::string device = ir::toString(m.device);
  Var rows = s.op("unsqueeze", {s.op("arange", {}, {{"end", n}, {"dtype", DType::Int64}, {"device", device}})->value},
                  {{"dim", int64_t{1}}});
  Var cols = s.op("arange", {}, {{"end", n}, {"dtype", DType::Int64}, {"device", device}});
  Var upTo = s.op("le", {cols->value, rows->value}); // [n, n]: column j counts for row i when j <= i
  Var spread = s.op("unsqueeze", {x->value}, {{"dim", rank - 1}});
  Var kept = s.callOp("where", {upTo, spread, integer(s.table.integer(product ? 1 : 0))}, {});
  Var y = s.op(product ? "prod" : "sum", {kept->value}, {{"dim", product ? ir::AttrValue(int64_t{-1}) : ir::AttrValue(std::vector<int64_t>{-1})}});
  if (!last) y = s.op("transpose", {y->value}, {{"dim0", dim}, {"dim1", rank - 1}});
  return y;
}

} // namespace

Var flipped(TraceState& s, const Var& x, const std::vector<int64_t>& dims) { return flip(s, x, dims); }

std::optional<Var> callComposite(TraceState& s, const std::string& name, const std::string& m, bool method,
                                 const std::vector<Var>& args, const Kwargs& kwargs) {
  bool functional = name.rfind("torch.nn.functional.", 0) == 0;
  if (m == "clamp_min" || m == "clamp_max") {
    Params p = bindParams(name, args, kwargs, {"self", m == "clamp_min" ? "min" : "max"});
    Var bound = *p[m == "clamp_min" ? "min" : "max"];
    return s.callOp("clamp", {tensorArg(name, p["self"])}, {{m == "clamp_min" ? "min" : "max", bound}});
  }
  if (m == "lerp" || (m == "lerp_" && method)) {
    Params p = bindParams(name, args, kwargs, {"self", "end", "weight"});
    Var self = tensorArg(name, p["self"]);
    Var out = lerp(s, self, tensorArg(name, p["end"]), *p["weight"]);
    return m == "lerp_" ? writeInto(s, self, out) : out;
  }
  if (m == "addcmul" || m == "addcdiv" || ((m == "addcmul_" || m == "addcdiv_") && method)) {
    Params p = bindParams(name, args, kwargs, {"self", "tensor1", "tensor2", "value"}, 3);
    Var self = tensorArg(name, p["self"]);
    Var value = p["value"].value_or(num(s, 1));
    if (value->kind != Kind::Int && value->kind != Kind::Float) unsupported(name + "'s value: expected a number");
    Var scaled = s.callOp("mul", {tensorArg(name, p["tensor1"]), value}, {});
    bool product = m.rfind("addcmul", 0) == 0;
    Var term = s.callOp(product ? "mul" : "div", {scaled, tensorArg(name, p["tensor2"])}, {});
    return s.callOp(m.back() == '_' ? "add_" : "add", {self, term}, {});
  }
  if (m == "bitwise_not" && !functional) {
    Var x = tensorArg(name, bindParams(name, args, kwargs, {"self"})["self"]);
    DType dtype = s.meta(x).dtype;
    if (dtype == DType::Bool) return s.callOp("logical_not", {x}, {});
    if (!ir::isIntegral(dtype, false)) unsupported("bitwise_not of a " + std::string(ir::name(dtype)) + " tensor");
    return s.callOp("sub", {s.callOp("neg", {x}, {}), num(s, 1)}, {}); // ~x == -x - 1
  }
  if (m == "sgn" && !functional) return s.callOp("sign", {tensorArg(name, bindParams(name, args, kwargs, {"self"})["self"])}, {});
  if (m == "element_size" && method) {
    Var x = tensorArg(name, bindParams(name, args, kwargs, {"self"})["self"]);
    return num(s, static_cast<int64_t>(elementSize(s.meta(x).dtype)));
  }
  if (m == "is_contiguous" && method) {
    Var x = tensorArg(name, bindParams(name, args, kwargs, {"self"})["self"]); // memory_format= refused
    return boolean(isContiguous(s, x));
  }
  if ((m == "hardtanh" || m == "hardtanh_" || m == "relu6") && functional) {
    // min if x <= min, max if x >= max, else x: NaN stays, and the grad reaches x strictly
    // inside the bounds, as torch's hardtanh_backward sends it.
    bool relu6 = m == "relu6";
    Params p = relu6          ? bindParams(name, args, kwargs, {"input", "inplace"})
               : m == "hardtanh_" ? bindParams(name, args, kwargs, {"input", "min_val", "max_val"})
                                  : bindParams(name, args, kwargs, {"input", "min_val", "max_val", "inplace"});
    Var x = tensorArg(name, p["input"]);
    if (!ir::isFloating(s.meta(x).dtype)) unsupported(name + " of a " + std::string(ir::name(s.meta(x).dtype)) + " tensor");
    double low = relu6 ? 0.0 : numberArg(s, name + "'s min_val", p["min_val"], -1.0);
    double high = relu6 ? 6.0 : numberArg(s, name + "'s max_val", p["max_val"], 1.0);
    if (low > high) unsupported(name + " with min_val over max_val (torch raises)");
    Var y = s.callOp("where", {s.callOp("ge", {x, floating(high)}, {}), floating(high), x}, {});
    y = s.callOp("where", {s.callOp("le", {x, floating(low)}, {}), floating(low), y}, {});
    return m == "hardtanh_" || boolArg(name + "'s inplace", p["inplace"], false) ? writeInto(s, x, y) : y;
  }
  if ((m == "softplus" || m == "mish" || m == "hardswish") && functional) {
    Params p = m == "softplus" ? bindParams(name, args, kwargs, {"input", "beta", "threshold"})
                               : bindParams(name, args, kwargs, {"input", "inplace"});
    if (boolArg(name + "'s inplace", p["inplace"], false)) unsupported(name + "(inplace=True)");
    Var x = tensorArg(name, p["input"]);
    if (m == "hardswish") { // x * relu6(x + 3) / 6
      Var gate = s.callOp("clamp", {s.callOp("add", {x, num(s, 3)}, {})}, {{"min", num(s, 0)}, {"max", num(s, 6)}});
      return s.callOp("div", {s.callOp("mul", {x, gate}, {}), num(s, 6)}, {});
    }
    if (m == "mish") // x * tanh(log1p(exp(x)))
      return s.callOp("mul", {x, s.callOp("tanh", {s.callOp("log1p", {s.callOp("exp", {x}, {})}, {})}, {})}, {});
    double beta = numberArg(s, name + "'s beta", p["beta"], 1.0), threshold = numberArg(s, name + "'s threshold", p["threshold"], 20.0);
    Var scaled = s.callOp("mul", {x, floating(beta)}, {});
    Var soft = s.callOp("div", {s.callOp("log1p", {s.callOp("exp", {scaled}, {})}, {}), floating(beta)}, {});
    return s.callOp("where", {s.callOp("gt", {scaled, floating(threshold)}, {}), x, soft}, {});
  }
  if ((m == "cumsum" || m == "cumprod" || m == "cumsum_" || m == "cumprod_") && !functional) {
    bool inPlace = m.back() == '_';
    Params p = method ? bindParams(name, args, kwargs, {"self", "dim", "dtype"}, 2)
                      : bindParams(name, args, kwargs, {"input", "dim", "dtype", "out"}, 2);
    if (p["out"]) unsupported(name + "(out=...)");
    Var x = tensorArg(name, method ? p["self"] : p["input"]);
    if (!p["dim"]) unsupported(name + " without a dim");
    Var y = cumulative(s, name, m.rfind("cumprod", 0) == 0, x, intArg(s, name + "'s dim", *p["dim"]), p["dtype"]);
    return inPlace ? writeInto(s, x, y) : y;
  }
  if (m == "var_mean" && !method) { // (var, mean), each as var and mean reduce
    Var var = callTorch(s, "torch.var", args, kwargs).value();
    Params p = bindParams(name, args, kwargs, {"self", "dim", "unbiased", "keepdim", "correction"}, 4);
    if (args.size() > 1 && args[1]->kind == Kind::Bool) p.given.erase("dim");
    Kwargs mean;
    if (auto dim = p["dim"]; dim && (*dim)->kind != Kind::None) mean.emplace_back("dim", *dim);
    mean.emplace_back("keepdim", boolean(boolArg(name + "'s keepdim", p["keepdim"], false)));
    return sequence(Kind::Tuple, {var, s.callOp("mean", {*p["self"]}, mean)});
  }
  if (m == "nan_to_num" && !functional) {
    Params p = bindParams(name, args, kwargs, {"self", "nan", "posinf", "neginf"});
    Var x = tensorArg(name, p["self"]);
    auto replacement = [&](const char* key, double otherwise) {
      std::optional<Var> v = p[key];
      return (v && (*v)->kind != Kind::None) ? floating(numberArg(s, name + "'s " + key, v, 0)) : floating(otherwise);
    };
    for (const char* key : {"nan", "posinf", "neginf"}) replacement(key, 0); // each a number or None, as torch checks
    DType dtype = s.meta(x).dtype;
    if (!ir::isFloating(dtype)) return s.callOp("clone", {x}, {});
    FloatInfo info = floatInfo(dtype);
    double inf = std::numeric_limits<double>::infinity();
    Var out = s.callOp("where", {s.callOp("eq", {x, floating(-inf)}, {}), replacement("neginf", -info.max), x}, {});
    out = s.callOp("where", {s.callOp("eq", {x, floating(inf)}, {}), replacement("posinf", info.max), out}, {});
    return s.callOp("where", {s.callOp("isnan", {x}, {}), replacement("nan", 0.0), out}, {});
  }
  if (m == "repeat" && method) {
    if (!kwargs.empty()) unsupported(name + " with keywords");
    std::vector<Var> rest(args.begin() + 1, args.end());
    Var sizes = rest.size() == 1 && (rest[0]->kind == Kind::Tuple || rest[0]->kind == Kind::List)
                    ? rest[0] : sequence(Kind::Tuple, rest);
    return repeat(s, tensorArg(name, args.at(0)), sizes);
  }
  if (m == "repeat_interleave" && !functional) {
    Params p = bindParams(name, args, kwargs, {"self", "repeats", "dim", "output_size"}, 3);
    Var x = tensorArg(name, p["self"]);
    std::optional<Var> repeats = p["repeats"];
    if (!repeats || (*repeats)->kind != Kind::Int) unsupported(name + " with repeats that are not an int");
    if (p["output_size"] && (*p["output_size"])->kind != Kind::None) unsupported(name + "(output_size=...)");
    std::optional<int64_t> dim;
    if (auto d = p["dim"]; d && (*d)->kind != Kind::None) dim = intArg(s, name + "'s dim", *d);
    return repeatInterleave(s, x, intArg(s, name + "'s repeats", *repeats), dim);
  }
  if ((m == "fill_" || m == "zero_") && method) { // a full_like of the value written into self
    Params p = m == "zero_" ? bindParams(name, args, kwargs, {"self"}) : bindParams(name, args, kwargs, {"self", "value"});
    Var self = tensorArg(name, p["self"]);
    Var value = m == "zero_" ? num(s, 0) : *p["value"];
    DType dtype = s.meta(self).dtype;
    bool fits = dtype == DType::Bool ? value->kind == Kind::Bool
                : ir::isFloating(dtype) ? value->kind == Kind::Int || value->kind == Kind::Float
                                        : value->kind == Kind::Int;
    if (!fits) unsupported(name + " of a " + kindName(value->kind) + " into a " + std::string(ir::name(dtype)) + " tensor");
    return writeInto(s, self, s.callOp("full_like", {self, value}, {}));
  }
  if ((m == "view_as" || m == "reshape_as" || m == "expand_as") && method) { // to other's shape
    Params p = bindParams(name, args, kwargs, {"self", "other"});
    Var other = tensorArg(name, p["other"]);
    return s.callOp(m.substr(0, m.size() - 3), {tensorArg(name, p["self"]), *tensorAttribute(s, other, "shape")}, {});
  }
  if ((m == "outer" || m == "ger") && !functional) { // self[:, None] * vec2[None, :]
    Params p = bindParams(name, args, kwargs, {"self", "vec2"});
    Var a = tensorArg(name, p["self"]), b = tensorArg(name, p["vec2"]);
    if (s.meta(a).dim() != 1 || s.meta(b).dim() != 1) unsupported(name + " of tensors that are not 1-d");
    return s.callOp("mul", {s.op("unsqueeze", {a->value}, {{"dim", int64_t{1}}}),
                            s.op("unsqueeze", {b->value}, {{"dim", int64_t{0}}})}, {});
  }
  if (m == "where" && !method && args.size() == 1 && kwargs.empty()) // torch.where(condition)
    return nonzeroColumns(s, tensorArg(name, args[0]));
  if (m == "nonzero" && kwarg(kwargs, "as_tuple")) {
    Params p = bindParams(name, args, kwargs, {"self", "as_tuple"}, 1);
    if (boolArg(name + "'s as_tuple", p["as_tuple"], false)) return nonzeroColumns(s, tensorArg(name, p["self"]));
  }
  if (m == "logsumexp" && !functional) { // max + log(sum(exp(x - max))), a max of inf taken as 0
    Params p = bindParams(name, args, kwargs, {"self", "dim", "keepdim"});
    Var x = tensorArg(name, p["self"]);
    if (!ir::isFloating(s.meta(x).dtype)) unsupported(name + " of a " + std::string(ir::name(s.meta(x).dtype)) + " tensor");
    if (!p["dim"]) unsupported(name + " without dim");
    bool keepdim = boolArg(name + "'s keepdim", p["keepdim"], false);
    Var max = s.callOp("amax", {x}, {{"dim", *p["dim"]}, {"keepdim", boolean(true)}});
    max = s.callOp("where", {s.callOp("isinf", {max}, {}), floating(0.0), max}, {});
    Var summed = s.callOp("sum", {s.callOp("exp", {s.callOp("sub", {x, max}, {})}, {})}, {{"dim", *p["dim"]}, {"keepdim", boolean(keepdim)}});
    Var shift = keepdim ? max : s.callOp("squeeze", {max, *p["dim"]}, {});
    return s.callOp("add", {s.callOp("log", {summed}, {}), shift}, {});
  }
  if (m == "isfinite" && !functional) { // neither nan nor ±inf; every integer is finite
    Var x = tensorArg(name, bindParams(name, args, kwargs, {"self"})["self"]);
    if (!ir::isFloating(s.meta(x).dtype)) {
      Var all = make(Kind::DType);
      all->dtype = DType::Bool;
      return s.callOp("ones_like", {x}, {{"dtype", all}});
    }
    Var nan = s.callOp("isnan", {x}, {}), inf = s.callOp("isinf", {x}, {});
    return s.callOp("logical_not", {s.callOp("logical_or", {nan, inf}, {})}, {});
  }
  if (m == "flip" && !functional) {
    Params p = method && kwargs.empty() && args.size() > 2 ? Params{{{"self", args[0]}, {"dims", sequence(Kind::Tuple, {args.begin() + 1, args.end()})}}}
                                                             : bindParams(name, args, kwargs, {"self", "dims"});
    Var x = tensorArg(name, p["self"]);
    if (!p["dims"]) unsupported(name + " without dims");
    std::vector<int64_t> dims = dimsOf(s, name + "'s dims", *p["dims"], s.meta(x).dim());
    if (std::set<int64_t>(dims.begin(), dims.end()).size() != dims.size()) unsupported(name + " with a dim given twice");
    return flip(s, x, dims);
  }
  if (m == "roll" && !functional) {
    Params p = bindParams(name, args, kwargs, {"self", "shifts", "dims"});
    Var x = tensorArg(name, p["self"]);
    if (!p["dims"] || (*p["dims"])->kind == Kind::None) unsupported(name + " without dims (of the flattened tensor)");
    if (!p["shifts"]) unsupported(name + " without shifts");
    Var shifts = *p["shifts"];
    std::vector<Var> each = shifts->kind == Kind::Tuple || shifts->kind == Kind::List ? shifts->items : std::vector<Var>{shifts};
    std::vector<int64_t> dims = dimsOf(s, name + "'s dims", *p["dims"], s.meta(x).dim());
    if (each.size() != dims.size()) unsupported(name + " with as many shifts as dims, expected");
    if (s.meta(x).dim() == 0) return s.callOp("clone", {x}, {});
    Var out = x;
    for (size_t k = 0; k < dims.size(); ++k) out = roll(s, out, intArg(s, name + "'s shifts", each[k]), dims[k]);
    return out;
  }
  if (m == "one_hot" && functional) { // rows of the identity (an index_select: a class out of range fails as torch's)
    Params p = bindParams(name, args, kwargs, {"tensor", "num_classes"});
    Var x = tensorArg(name, p["tensor"]);
    if (s.meta(x).dtype != DType::Int64) unsupported(name + " of a tensor that is not int64");
    int64_t classes = p["num_classes"] ? intArg(s, name + "'s num_classes", *p["num_classes"]) : -1;
    if (classes < 0) unsupported(name + " without num_classes (its size is the data's max)");
    Var rows = positions(s, x, s.table.integer(classes), false);
    Var identity = s.callOp("eq", {s.callOp("unsqueeze", {rows, num(s, 1)}, {}), s.callOp("unsqueeze", {rows, num(s, 0)}, {})}, {});
    identity = s.op("to_dtype", {identity->value}, {{"dtype", DType::Int64}});
    Var picked = s.callOp("index_select", {identity, num(s, 0), s.callOp("reshape", {x, sequence(Kind::Tuple, {num(s, -1)})}, {})}, {});
    std::vector<Var> shape;
    for (const sym::Expr& d : s.meta(x).sizes) shape.push_back(integer(d));
    shape.push_back(num(s, classes));
    return s.callOp("reshape", {picked, sequence(Kind::Tuple, shape)}, {});
  }
  return std::nullopt;
}

std::optional<Var> typeInfoAttribute(const Var& info, const std::string& name) {
  if (info->kind != Kind::Dict || info->type.module != "torch" ||
      (info->type.qualname != "finfo" && info->type.qualname != "iinfo"))
    return std::nullopt;
  for (size_t k = 0; k < info->keys.size(); ++k)
    if (info->keys[k]->name == name) return info->items[k];
  unsupported("attribute '" + name + "' of a torch." + info->type.qualname);
}

// F.scaled_dot_product_attention(..., enable_gqa=True): key and value's heads repeated to
// the query's, as torch repeats them (repeat_interleave along dim -3).
std::pair<Var, Var> groupedKeyValue(TraceState& s, const Var& query, const Var& key, const Var& value) {
  ir::TensorMeta q = s.meta(query), k = s.meta(key);
  if (q.dim() < 3 || k.dim() < 3) unsupported("scaled_dot_product_attention(enable_gqa=True) of tensors under 3 dims");
  int64_t heads = s.concrete(integer(q.sizes[q.dim() - 3])), groups = s.concrete(integer(k.sizes[k.dim() - 3]));
  if (groups == 0 || heads % groups != 0)
    unsupported("scaled_dot_product_attention(enable_gqa=True) with " + std::to_string(heads) + " query heads over " +
                std::to_string(groups) + " key heads");
  if (heads == groups) return {key, value};
  return {repeatInterleave(s, key, heads / groups, -3), repeatInterleave(s, value, heads / groups, -3)};
}

} // namespace kiln::tracer
