// The reference interpreter's pointwise ops and reductions, one element at a time.
// Operands are first cast to the dtype torch computes in (the result's, or the
// promoted one for comparisons), then combined in double or int64.
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include "interpreter_ops.h"
#include "kiln/common/error.h"

namespace kiln::ir::detail {
namespace {

struct Num {
  bool isFloat;
  double f;
  int64_t i;
};
Num fromF(double f) {
  return {true, f, 0};
}
Num fromI(int64_t i) {
  return {false, 0, i};
}
Num fromBool(bool b) {
  return {false, 0, b ? 1 : 0};
}
bool truthy(Num n) {
  return n.isFloat ? n.f != 0 : n.i != 0;
}

[[noreturn]] void invalid(const std::string& op, const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, "interpret: " + op + ": " + message);
}

Num load(const HostTensor& t, const std::vector<int64_t>& idx, std::optional<DType> as) {
  DType d = as.value_or(t.dtype);
  if (isFloating(d)) return fromF(castToF(d, loadElementF(t, idx)));
  if (d == DType::Bool && isFloating(t.dtype)) return fromBool(loadElementF(t, idx) != 0);
  return fromI(castToI(d, loadElementI(t, idx)));
}

void store(const HostTensor& t, const std::vector<int64_t>& idx, Num n) {
  if (n.isFloat)
    storeElementF(t, idx, n.f);
  else
    storeElementI(t, idx, n.i);
}

int64_t wrapAdd(int64_t a, int64_t b) {
  return int64_t(uint64_t(a) + uint64_t(b));
}
int64_t wrapMul(int64_t a, int64_t b) {
  return int64_t(uint64_t(a) * uint64_t(b));
}

int64_t floorDiv(const std::string& op, int64_t a, int64_t b) {
  if (b == 0) invalid(op, "integer division by zero");
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t pyMod(const std::string& op, int64_t a, int64_t b) {
  if (b == 0) invalid(op, "integer division by zero");
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

double sigmoid(double x) {
  return 1 / (1 + std::exp(-x));
}

Num unary(const std::string& op, Num a, const std::string& mode) {
  if (op == "logical_not") return fromBool(!truthy(a));
  if (op == "isnan") return fromBool(a.isFloat && std::isnan(a.f));
  if (op == "isinf") return fromBool(a.isFloat && std::isinf(a.f));
  if (!a.isFloat) {
    int64_t x = a.i;
    if (op == "neg") return fromI(int64_t(0 - uint64_t(x)));
    if (op == "abs") return fromI(x < 0 ? int64_t(0 - uint64_t(x)) : x);
    if (op == "relu") return fromI(x > 0 ? x : 0);
    if (op == "floor" || op == "ceil" || op == "round" || op == "trunc") return a;
    if (op == "sign") return fromI((x > 0) - (x < 0));
    throw Error(ErrorCode::Unsupported, "interpret: " + op + " of an integral tensor");
  }
  double x = a.f;
  if (op == "exp") return fromF(std::exp(x));
  if (op == "exp2") return fromF(std::exp2(x));
  if (op == "log") return fromF(std::log(x));
  if (op == "log1p") return fromF(std::log1p(x));
  if (op == "expm1") return fromF(std::expm1(x));
  if (op == "sqrt") return fromF(std::sqrt(x));
  if (op == "rsqrt") return fromF(1 / std::sqrt(x));
  if (op == "sin") return fromF(std::sin(x));
  if (op == "cos") return fromF(std::cos(x));
  if (op == "tan") return fromF(std::tan(x));
  if (op == "tanh") return fromF(std::tanh(x));
  if (op == "sigmoid") return fromF(sigmoid(x));
  if (op == "erf") return fromF(std::erf(x));
  if (op == "reciprocal") return fromF(1 / x);
  if (op == "silu") return fromF(x * sigmoid(x));
  if (op == "gelu") {
    if (mode == "tanh") {
      double k = std::sqrt(2 / M_PI);
      return fromF(0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x))));
    }
    return fromF(0.5 * x * (1 + std::erf(x / std::sqrt(2.0))));
  }
  if (op == "neg") return fromF(-x);
  if (op == "abs") return fromF(std::fabs(x));
  if (op == "relu") return fromF(std::isnan(x) || x > 0 ? x : 0.0);
  if (op == "floor") return fromF(std::floor(x));
  if (op == "ceil") return fromF(std::ceil(x));
  if (op == "round") return fromF(std::nearbyint(x)); // half to even
  if (op == "trunc") return fromF(std::trunc(x));
  if (op == "sign") return fromF(double((x > 0) - (x < 0))); // torch: sign(nan) = 0
  return {};
}

const std::set<std::string> kUnary = {
    "exp",  "exp2",  "log",     "log1p", "expm1",      "sqrt", "rsqrt",       "sin",   "cos",
    "tan",  "tanh",  "sigmoid", "erf",   "reciprocal", "silu", "gelu",        "neg",   "abs",
    "relu", "floor", "ceil",    "round", "trunc",      "sign", "logical_not", "isnan", "isinf"};
const std::set<std::string> kBinary = {
    "add",        "sub",         "mul",          "div",         "pow",        "fmod",
    "remainder",  "maximum",     "minimum",      "eq",          "ne",         "lt",
    "le",         "gt",          "ge",           "logical_and", "logical_or", "bitwise_and",
    "bitwise_or", "bitwise_xor", "gelu_backward"};
const std::set<std::string> kCompare = {"eq", "ne", "lt", "le", "gt", "ge"};

Num compare(const std::string& op, Num a, Num b) {
  auto cmp = [&](auto x, auto y) {
    if (op == "eq") return x == y;
    if (op == "ne") return x != y;
    if (op == "lt") return x < y;
    if (op == "le") return x <= y;
    if (op == "gt") return x > y;
    return x >= y;
  };
  return fromBool(a.isFloat ? cmp(a.f, b.f) : cmp(a.i, b.i));
}

// `compute`: the dtype torch computes in, for the ops whose steps round.
Num binary(const std::string& op, Num a, Num b, double alpha, const std::string& mode,
           DType compute) {
  if (kCompare.count(op)) return compare(op, a, b);
  if (op == "logical_and") return fromBool(truthy(a) && truthy(b));
  if (op == "logical_or") return fromBool(truthy(a) || truthy(b));
  if (!a.isFloat) {
    int64_t x = a.i, y = b.i;
    int64_t k = static_cast<int64_t>(alpha);
    if (op == "add") return fromI(wrapAdd(x, wrapMul(k, y)));
    if (op == "sub") return fromI(wrapAdd(x, wrapMul(-k, y)));
    if (op == "mul") return fromI(wrapMul(x, y));
    if (op == "div" && mode == "floor") return fromI(floorDiv(op, x, y));
    if (op == "div") {
      if (y == 0) invalid(op, "integer division by zero");
      return fromI(x / y);
    }
    if (op == "remainder") return fromI(pyMod(op, x, y));
    if (op == "fmod") {
      if (y == 0) invalid(op, "integer division by zero");
      return fromI(x % y);
    }
    if (op == "pow") {
      if (y < 0) // as torch's powi: only 1 and -1 have integral reciprocals
        return fromI(x == 1 ? 1 : x == -1 ? (y % 2 ? -1 : 1) : 0);
      int64_t r = 1;
      for (; y > 0; y >>= 1, x = wrapMul(x, x)) // by squaring
        if (y & 1) r = wrapMul(r, x);
      return fromI(r);
    }
    if (op == "maximum") return fromI(std::max(x, y));
    if (op == "minimum") return fromI(std::min(x, y));
    if (op == "bitwise_and") return fromI(x & y);
    if (op == "bitwise_or") return fromI(x | y);
    if (op == "bitwise_xor") return fromI(x ^ y);
    return {};
  }
  double x = a.f, y = b.f;
  if (op == "add") return fromF(x + alpha * y);
  if (op == "sub") return fromF(x - alpha * y);
  if (op == "mul") return fromF(x * y);
  if (op == "div" && mode == "floor") return fromF(floorDivide(compute, x, y));
  if (op == "div" && mode == "trunc") return fromF(std::trunc(castToF(compute, x / y)));
  if (op == "div") return fromF(x / y);
  if (op == "pow") return fromF(std::pow(x, y));
  if (op == "fmod") return fromF(std::fmod(x, y));
  if (op == "remainder") { // Python's: the sign of the divisor
    double r = std::fmod(x, y);
    return fromF(r != 0 && ((r < 0) != (y < 0)) ? r + y : r);
  }
  if (op == "gelu_backward") { // x: the grad, y: gelu's input
    if (mode == "tanh") {
      double beta = std::sqrt(2 / M_PI), kappa = 0.044715;
      double t = std::tanh(beta * (y + kappa * y * y * y));
      return fromF(x * (0.5 * (1 + t) + 0.5 * y * (1 - t * t) * beta * (1 + 3 * kappa * y * y)));
    }
    double pdf = std::exp(-0.5 * y * y) / std::sqrt(2 * M_PI);
    return fromF(x * (0.5 * (1 + std::erf(y / std::sqrt(2.0))) + y * pdf));
  }
  if (op == "maximum" || op == "minimum") {
    if (std::isnan(x) || std::isnan(y)) return fromF(std::numeric_limits<double>::quiet_NaN());
    return fromF(op == "maximum" ? std::max(x, y) : std::min(x, y));
  }
  throw Error(ErrorCode::Unsupported, "interpret: " + op + " of floating operands");
}

} // namespace

bool runPointwise(const std::string& op, const std::vector<const HostTensor*>& operands,
                  const std::vector<Operand>& kinds, double alpha, const std::string& mode,
                  bool inPlace, HostTensor& out) {
  bool isUnary = kUnary.count(op) > 0, isBinary = kBinary.count(op) > 0;
  if (!isUnary && !isBinary && op != "where" && op != "clamp" && op != "to_dtype") return false;
  ResultType promoted;
  for (size_t j = 0; j < operands.size(); ++j) {
    DType d = operands[j]->dtype;
    if (kinds[j] == Operand::Scalar)
      d = isFloating(d) ? DType::Float64 : d == DType::Bool ? DType::Bool : DType::Int64;
    promoted.add(d, kinds[j]);
  }
  // The dtype each operand is cast to before computing; nullopt: its own. In place, torch
  // computes in the promoted dtype and casts the result to self's.
  DType compute = inPlace ? promoted.result() : out.dtype;
  std::vector<std::optional<DType>> as(operands.size(), compute);
  if (kCompare.count(op)) {
    as.assign(operands.size(), promoted.result());
  } else if (op == "logical_and" || op == "logical_or" || op == "logical_not" || op == "isnan" ||
             op == "isinf" || op == "to_dtype") {
    as.assign(operands.size(), std::nullopt);
  } else if (op == "where") {
    as[0] = std::nullopt;
  }
  std::vector<Num> v(operands.size());
  eachIndex(out.sizes, [&](const std::vector<int64_t>& idx) {
    for (size_t j = 0; j < operands.size(); ++j) v[j] = load(*operands[j], idx, as[j]);
    Num r;
    if (op == "to_dtype")
      r = v[0];
    else if (op == "where")
      r = truthy(v[0]) ? v[1] : v[2];
    else if (op == "clamp") {
      r = v[0];
      size_t next = 1;
      bool nan = r.isFloat && std::isnan(r.f);
      for (const char* bound : {"min", "max"}) {
        if (mode.find(bound) == std::string::npos) continue;
        Num b = v[next++];
        if (b.isFloat && std::isnan(b.f)) nan = true;
        bool lower = std::string(bound) == "min";
        bool outside =
            r.isFloat ? (lower ? r.f < b.f : r.f > b.f) : (lower ? r.i < b.i : r.i > b.i);
        if (outside) r = b;
      }
      if (nan) r = fromF(std::numeric_limits<double>::quiet_NaN());
    } else if (isUnary)
      r = unary(op, v[0], mode);
    else
      r = binary(op, v[0], v[1], alpha, mode, compute);
    store(out, idx, r);
  });
  return true;
}

bool runReduction(const std::string& op, const HostTensor& self,
                  const std::optional<std::vector<int64_t>>& dims, double correction,
                  HostTensor& out) {
  static const std::set<std::string> kOps = {"sum",    "prod", "mean", "amax", "amin", "argmax",
                                             "argmin", "any",  "all",  "var",  "std"};
  if (!kOps.count(op)) return false;
  size_t rank = self.sizes.size();
  std::vector<bool> reduced(rank, !dims || dims->empty());
  if (dims)
    for (int64_t d : *dims)
      if (rank > 0) reduced[d < 0 ? d + int64_t(rank) : d] = true;
  bool spread = op == "var" || op == "std";
  bool accumulate = op == "sum" || op == "prod" || op == "mean" || spread;
  bool logical = op == "any" || op == "all";
  std::optional<DType> as = accumulate ? out.dtype : self.dtype;
  bool isMax = op == "amax" || op == "argmax";
  bool isArg = op == "argmax" || op == "argmin";

  int64_t outCount = out.numel();
  std::vector<Num> acc(outCount);
  std::vector<int64_t> count(outCount, 0), argIndex(outCount, 0);
  std::vector<std::vector<double>> members(spread ? outCount : 0); // var, std: the values
  eachIndex(self.sizes, [&](const std::vector<int64_t>& idx) {
    int64_t pos = 0, inner = 0; // the output element; the position among the reduced
    for (size_t d = 0; d < rank; ++d) {
      if (!reduced[d])
        pos = pos * self.sizes[d] + idx[d];
      else
        inner = inner * self.sizes[d] + idx[d];
    }
    Num x = load(self, idx, as);
    if (spread) members[pos].push_back(x.f);
    Num& a = acc[pos];
    if (count[pos]++ == 0) {
      a = x;
      argIndex[pos] = inner;
      return;
    }
    if (logical) {
      a = fromBool(op == "any" ? truthy(a) || truthy(x) : truthy(a) && truthy(x));
    } else if (op == "sum" || op == "mean" || spread) {
      a = a.isFloat ? fromF(a.f + x.f) : fromI(wrapAdd(a.i, x.i));
    } else if (op == "prod") {
      a = a.isFloat ? fromF(a.f * x.f) : fromI(wrapMul(a.i, x.i));
    } else { // amax amin argmax argmin: NaN wins, then the first extreme
      bool better;
      if (a.isFloat)
        better = !std::isnan(a.f) && (std::isnan(x.f) || (isMax ? x.f > a.f : x.f < a.f));
      else
        better = isMax ? x.i > a.i : x.i < a.i;
      if (better) {
        a = x;
        argIndex[pos] = inner;
      }
    }
  });
  int64_t pos = 0;
  bool floatAcc = isFloating(*as);
  eachIndex(out.sizes, [&](const std::vector<int64_t>& idx) {
    Num r = acc[pos];
    if (count[pos] == 0) {
      if (!accumulate && !logical) invalid(op, "the reduction of an empty dim has no identity");
      if (logical)
        r = fromBool(op == "all");
      else if (op == "prod")
        r = floatAcc ? fromF(1) : fromI(1);
      else
        r = floatAcc ? fromF(0) : fromI(0);
    }
    if (op == "mean") r = fromF(r.f / double(count[pos]));
    if (spread) { // sum((x - mean)^2) / max(0, n - correction)
      double mean = r.f / double(count[pos]), squares = 0;
      for (double x : members[pos]) squares += (x - mean) * (x - mean);
      double var = squares / std::max(0.0, double(count[pos]) - correction);
      r = fromF(op == "std" ? std::sqrt(var) : var);
    }
    if (logical) r = fromBool(truthy(r));
    if (isArg) r = fromI(argIndex[pos]);
    store(out, idx, r);
    ++pos;
  });
  return true;
}

} // namespace kiln::ir::detail
