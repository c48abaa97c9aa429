#include "kiln/codegen/loop_eval.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "host_buffers.h"
#include "kiln/common/error.h"
#include "kiln/ir/op_registry.h"
#include "kiln/ir/philox.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::codegen {
namespace {

using detail::HostBuffers;
using detail::Storage;

[[noreturn]] void fail(ErrorCode code, const std::string& message) {
  throw Error(code, "loop evaluator: " + message);
}

// A scalar: floating dtypes use f, the others i (bool as 0 or 1).
struct Val {
  double f = 0;
  int64_t i = 0;
};

bool isFloat(DType t) {
  return ir::isFloating(t);
}

// x as a value of dtype t holds it: floats rounded to the format, integers
// wrapped to the width, bools 0 or 1.
double roundTo(DType t, double x) {
  switch (t) {
  case DType::Float32: return static_cast<double>(static_cast<float>(x));
  case DType::Float16: return ir::fromHalfBits(ir::toHalfBits(x));
  case DType::BFloat16: return ir::fromBFloat16Bits(ir::toBFloat16Bits(x));
  default: return x;
  }
}

int64_t wrapTo(DType t, int64_t x) {
  switch (t) {
  case DType::Int8: return static_cast<int8_t>(x);
  case DType::Int16: return static_cast<int16_t>(x);
  case DType::Int32: return static_cast<int32_t>(x);
  case DType::UInt8: return static_cast<uint8_t>(x);
  case DType::Bool: return x != 0;
  default: return x;
  }
}

Val convert(DType from, DType to, Val v) {
  Val out;
  if (isFloat(to)) {
    out.f = roundTo(to, isFloat(from) ? v.f : static_cast<double>(v.i));
  } else if (to == DType::Bool) {
    out.i = isFloat(from) ? v.f != 0 : v.i != 0;
  } else if (isFloat(from)) {
    if (!std::isfinite(v.f)) fail(ErrorCode::InvalidArgument, "a non-finite value cast to an int");
    out.i = wrapTo(to, static_cast<int64_t>(std::trunc(v.f)));
  } else {
    out.i = wrapTo(to, v.i);
  }
  return out;
}

// --- storage access ---


Val read(const Storage& s, int64_t at) {
  if (at < 0 || at >= s.elements)
    fail(ErrorCode::InvalidArgument, "element " + std::to_string(at) + " out of range");
  const std::byte* p = s.data + at * static_cast<int64_t>(elementSize(s.dtype));
  auto get = [&](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  Val v;
  switch (s.dtype) {
  case DType::Float32: v.f = get(float{}); break;
  case DType::Float64: v.f = get(double{}); break;
  case DType::Float16: v.f = ir::fromHalfBits(get(uint16_t{})); break;
  case DType::BFloat16: v.f = ir::fromBFloat16Bits(get(uint16_t{})); break;
  case DType::Int8: v.i = get(int8_t{}); break;
  case DType::Int16: v.i = get(int16_t{}); break;
  case DType::Int32: v.i = get(int32_t{}); break;
  case DType::Int64: v.i = get(int64_t{}); break;
  case DType::UInt8: v.i = get(uint8_t{}); break;
  case DType::Bool: v.i = get(uint8_t{}) != 0; break;
  default: fail(ErrorCode::Unsupported, "complex dtypes");
  }
  return v;
}

void write(const Storage& s, int64_t at, Val v) {
  if (at < 0 || at >= s.elements)
    fail(ErrorCode::Internal, "store to element " + std::to_string(at) + " out of range");
  std::byte* p = s.data + at * static_cast<int64_t>(elementSize(s.dtype));
  auto put = [&](auto x) { std::memcpy(p, &x, sizeof(x)); };
  switch (s.dtype) {
  case DType::Float32: put(static_cast<float>(v.f)); break;
  case DType::Float64: put(v.f); break;
  case DType::Float16: put(ir::toHalfBits(v.f)); break;
  case DType::BFloat16: put(ir::toBFloat16Bits(v.f)); break;
  case DType::Int8: put(static_cast<int8_t>(v.i)); break;
  case DType::Int16: put(static_cast<int16_t>(v.i)); break;
  case DType::Int32: put(static_cast<int32_t>(v.i)); break;
  case DType::Int64: put(v.i); break;
  case DType::UInt8: put(static_cast<uint8_t>(v.i)); break;
  case DType::Bool: put(static_cast<uint8_t>(v.i != 0)); break;
  default: fail(ErrorCode::Unsupported, "complex dtypes");
  }
}

// --- scalar ops ---

int64_t floorDivInt(int64_t a, int64_t b) {
  if (b == 0) fail(ErrorCode::InvalidArgument, "integer division by zero");
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

double unaryF(const std::string& op, double x) {
  if (op == "exp") return std::exp(x);
  if (op == "exp2") return std::exp2(x);
  if (op == "log") return std::log(x);
  if (op == "log1p") return std::log1p(x);
  if (op == "expm1") return std::expm1(x);
  if (op == "sqrt") return std::sqrt(x);
  if (op == "rsqrt") return 1 / std::sqrt(x);
  if (op == "sin") return std::sin(x);
  if (op == "cos") return std::cos(x);
  if (op == "tan") return std::tan(x);
  if (op == "tanh") return std::tanh(x);
  if (op == "sigmoid") return 1 / (1 + std::exp(-x));
  if (op == "erf") return std::erf(x);
  if (op == "reciprocal") return 1 / x;
  if (op == "neg") return -x;
  if (op == "abs") return std::fabs(x);
  if (op == "relu") return std::isnan(x) ? x : x > 0 ? x : 0;
  if (op == "floor") return std::floor(x);
  if (op == "ceil") return std::ceil(x);
  if (op == "round") return std::nearbyint(x);
  if (op == "trunc") return std::trunc(x);
  if (op == "sign") return std::isnan(x) ? 0 : (x > 0) - (x < 0);
  fail(ErrorCode::Unsupported, "unary op '" + op + "' on floats");
}

int64_t unaryI(const std::string& op, int64_t x) {
  if (op == "neg") return -x;
  if (op == "abs") return x < 0 ? -x : x;
  if (op == "relu") return x > 0 ? x : 0;
  if (op == "floor" || op == "ceil" || op == "round" || op == "trunc") return x;
  if (op == "sign") return (x > 0) - (x < 0);
  fail(ErrorCode::Unsupported, "unary op '" + op + "' on integers");
}

double binaryF(const std::string& op, double a, double b) {
  if (op == "add") return a + b;
  if (op == "sub") return a - b;
  if (op == "mul") return a * b;
  if (op == "div") return a / b;
  if (op == "div_trunc") return std::trunc(a / b);
  if (op == "div_floor") return b == 0 ? a / b : std::floor(a / b);
  if (op == "pow") return std::pow(a, b);
  if (op == "maximum") return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
  if (op == "minimum") return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
  if (op == "clamp_min") return std::isnan(a) ? a : std::isnan(b) ? b : std::max(a, b);
  if (op == "clamp_max") return std::isnan(a) ? a : std::isnan(b) ? b : std::min(a, b);
  if (op == "fmod") return std::fmod(a, b);
  if (op == "remainder") {
    double r = std::fmod(a, b);
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
  }
  fail(ErrorCode::Unsupported, "binary op '" + op + "' on floats");
}

// Floor and trunc division with each step rounded to `t`, as torch computes
// them in t (an f32 or f64 t rounds as itself: the same as plain division).
double roundedDivision(DType t, const std::string& op, double x, double y) {
  if (op == "div_trunc") return std::trunc(roundTo(t, x / y));
  return ir::floorDivide(t, x, y);
}

int64_t binaryI(const std::string& op, int64_t a, int64_t b) {
  auto wrapAdd = [](int64_t x, int64_t y) {
    return static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y));
  };
  if (op == "add") return wrapAdd(a, b);
  if (op == "sub") return wrapAdd(a, -b);
  if (op == "mul") return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  if (op == "div_floor") return floorDivInt(a, b);
  if (op == "div_trunc") {
    if (b == 0) fail(ErrorCode::InvalidArgument, "integer division by zero");
    return a / b;
  }
  if (op == "maximum" || op == "clamp_min") return std::max(a, b);
  if (op == "minimum" || op == "clamp_max") return std::min(a, b);
  if (op == "fmod") {
    if (b == 0) fail(ErrorCode::InvalidArgument, "integer division by zero");
    return a % b;
  }
  if (op == "remainder") return a - floorDivInt(a, b) * b;
  if (op == "bitwise_and") return a & b;
  if (op == "bitwise_or") return a | b;
  if (op == "bitwise_xor") return a ^ b;
  if (op == "pow") {
    if (b < 0) fail(ErrorCode::InvalidArgument, "integers to negative integer powers");
    int64_t r = 1;
    for (int64_t k = 0; k < b; ++k) r = static_cast<int64_t>(static_cast<uint64_t>(r) * a);
    return r;
  }
  fail(ErrorCode::Unsupported, "binary op '" + op + "' on integers");
}

bool compare(const std::string& op, double a, double b) {
  if (op == "eq") return a == b;
  if (op == "ne") return a != b;
  if (op == "lt") return a < b;
  if (op == "le") return a <= b;
  if (op == "gt") return a > b;
  return a >= b; // ge
}

bool compareI(const std::string& op, int64_t a, int64_t b) {
  if (op == "eq") return a == b;
  if (op == "ne") return a != b;
  if (op == "lt") return a < b;
  if (op == "le") return a <= b;
  if (op == "gt") return a > b;
  return a >= b;
}

bool isComparison(const std::string& op) {
  return op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge";
}

bool truth(DType t, Val v) {
  return isFloat(t) ? v.f != 0 : v.i != 0;
}

// --- the program ---

class Evaluator {
public:
  Evaluator(const Program& program, const ir::Graph& graph, std::vector<ir::HostTensor> inputs)
      : program_(program), buffers_(program, graph, std::move(inputs)),
        binding_(buffers_.binding()) {}

  std::vector<ir::HostTensor> run() {
    for (BufferId id = 0; id < program_.buffers.size(); ++id) {
      const Buffer& b = program_.buffers[id];
      if (b.kind == BufferKind::Computed) compute(b, id);
      if (b.kind == BufferKind::Extern) buffers_.runExtern(id);
    }
    std::vector<ir::HostTensor> outputs;
    for (const Output& o : program_.outputs) outputs.push_back(buffers_.output(o));
    return outputs;
  }

private:
  // Calls `fn` for every index of `ranges`, binding `vars` to it.
  void forEach(const std::vector<sym::Expr>& vars, const Shape& ranges,
               const std::function<void()>& fn) {
    std::vector<int64_t> n;
    for (sym::Expr r : ranges) n.push_back(sym::evaluate(r, binding_));
    for (int64_t x : n)
      if (x == 0) return;
    std::vector<int64_t> idx(n.size(), 0);
    while (true) {
      for (size_t k = 0; k < vars.size(); ++k) binding_[vars[k]] = idx[k];
      fn();
      size_t k = idx.size();
      while (k > 0 && ++idx[k - 1] == n[k - 1]) idx[--k] = 0;
      if (k == 0) return;
    }
  }

  void compute(const Buffer& b, BufferId id) {
    const Loops& l = b.loops;
    const Storage& out = buffers_.storage(id);
    if (l.scatter) return scatter(b, out);
    sym::Expr store = storeIndex(b);
    forEach(l.vars, l.ranges, [&] {
      int64_t at = sym::evaluate(store, binding_);
      DType valueType = l.reduce == ReduceOp::None ? l.body->dtype : resultType(l);
      write(out, at, convert(valueType, b.layout.dtype, l.reduce == ReduceOp::None ? eval(l.body)
                                                                                   : reduce(l)));
    });
  }

  // buffer[destination] += element, in order (the loop's row-major order
  // keeps each destination's additions in the order of the ordered dim).
  void scatter(const Buffer& b, const Storage& out) {
    const Loops& l = b.loops;
    DType t = b.layout.dtype,
          compute = ir::opmath(t);
    forEach(l.vars, l.ranges, [&] {
      Val v = convert(l.body->dtype, compute, eval(l.body));
      int64_t at = position(*l.scatter);
      Val old = convert(t, compute, read(out, at)), sum;
      if (isFloat(compute))
        sum.f = roundTo(compute, old.f + v.f);
      else
        sum.i = wrapTo(compute, binaryI("add", old.i, v.i));
      write(out, at, convert(compute, t, sum));
    });
  }

  // A load's element index, its indirect symbols bound (and checked) first.
  int64_t position(const ScalarNode& n) {
    for (size_t k = 0; k < n.indirect.size(); ++k) {
      int64_t at = eval(n.args[k]).i, size = sym::evaluate(n.indirectSizes[k], binding_);
      if (at < 0 || at >= size)
        fail(ErrorCode::InvalidArgument,
             "index " + std::to_string(at) + " is out of bounds for size " + std::to_string(size));
      binding_[n.indirect[k]] = at;
    }
    return sym::evaluate(n.index, binding_);
  }

  static DType resultType(const Loops& l) {
    if (l.reduce == ReduceOp::ArgMax || l.reduce == ReduceOp::ArgMin) return DType::Int64;
    return l.accumulator;
  }

  Val reduce(const Loops& l) {
    DType t = l.accumulator;
    bool fl = isFloat(t);
    Val acc;
    switch (l.reduce) {
    case ReduceOp::Prod:
    case ReduceOp::All: acc.f = 1; acc.i = 1; break;
    case ReduceOp::Max: acc.f = -INFINITY; acc.i = std::numeric_limits<int64_t>::min(); break;
    case ReduceOp::Min: acc.f = INFINITY; acc.i = std::numeric_limits<int64_t>::max(); break;
    default: break;
    }
    Val best;
    int64_t bestAt = -1, position = 0;
    bool empty = true;
    forEach(l.reductionVars, l.reductionRanges, [&] {
      Val v = eval(l.body);
      empty = false;
      switch (l.reduce) {
      case ReduceOp::Sum:
        if (fl) acc.f = roundTo(t, acc.f + v.f);
        else acc.i = wrapTo(t, acc.i + v.i);
        break;
      case ReduceOp::Prod:
        if (fl) acc.f = roundTo(t, acc.f * v.f);
        else acc.i = wrapTo(t, acc.i * v.i);
        break;
      case ReduceOp::Max:
      case ReduceOp::Min: {
        bool isMax = l.reduce == ReduceOp::Max;
        if (fl) acc.f = std::isnan(acc.f) || std::isnan(v.f) ? NAN
                        : isMax                               ? std::max(acc.f, v.f)
                                                              : std::min(acc.f, v.f);
        else acc.i = isMax ? std::max(acc.i, v.i) : std::min(acc.i, v.i);
        break;
      }
      case ReduceOp::ArgMax:
      case ReduceOp::ArgMin: {
        bool isMax = l.reduce == ReduceOp::ArgMax;
        bool better;
        if (bestAt < 0) better = true;
        else if (fl) better = !std::isnan(best.f) && (std::isnan(v.f) || (isMax ? v.f > best.f : v.f < best.f));
        else better = isMax ? v.i > best.i : v.i < best.i;
        if (better) {
          best = v;
          bestAt = position;
        }
        break;
      }
      case ReduceOp::Any: acc.i = acc.i || v.i; break;
      case ReduceOp::All: acc.i = acc.i && v.i; break;
      case ReduceOp::None: break;
      }
      ++position;
    });
    if (l.reduce == ReduceOp::ArgMax || l.reduce == ReduceOp::ArgMin) {
      if (empty) fail(ErrorCode::InvalidArgument, "argmax/argmin of an empty range");
      Val out;
      out.i = bestAt;
      return out;
    }
    if (empty && (l.reduce == ReduceOp::Max || l.reduce == ReduceOp::Min))
      fail(ErrorCode::InvalidArgument, "amax/amin of an empty range");
    return acc;
  }

  Val eval(const Scalar& s) {
    const ScalarNode& n = *s;
    DType t = n.dtype;
    Val out;
    switch (n.kind) {
    case ScalarKind::Load: return read(buffers_.storage(n.buffer), position(n));
    case ScalarKind::Philox:
      out.f = ir::philoxUniform(static_cast<uint64_t>(eval(n.args[0]).i),
                                static_cast<uint64_t>(eval(n.args[1]).i));
      return out;
    case ScalarKind::Constant:
      out.f = roundTo(t, n.number);
      out.i = wrapTo(t, n.integer);
      return out;
    case ScalarKind::IndexOf: {
      Val v;
      v.i = sym::evaluate(n.index, binding_);
      return convert(DType::Int64, t, v);
    }
    case ScalarKind::Cast: return convert(n.args[0]->dtype, t, eval(n.args[0]));
    case ScalarKind::Where: {
      bool c = truth(n.args[0]->dtype, eval(n.args[0]));
      return eval(n.args[c ? 1 : 2]);
    }
    case ScalarKind::Unary: {
      DType at = n.args[0]->dtype;
      Val x = eval(n.args[0]);
      if (n.op == "logical_not") out.i = !truth(at, x);
      else if (n.op == "isnan") out.i = isFloat(at) && std::isnan(x.f);
      else if (n.op == "isinf") out.i = isFloat(at) && std::isinf(x.f);
      else if (isFloat(t)) out.f = roundTo(t, unaryF(n.op, x.f));
      else out.i = wrapTo(t, unaryI(n.op, x.i));
      return out;
    }
    case ScalarKind::Binary: {
      DType at = n.args[0]->dtype;
      Val a = eval(n.args[0]), b = eval(n.args[1]);
      if (n.op == "logical_and") out.i = truth(at, a) && truth(n.args[1]->dtype, b);
      else if (n.op == "logical_or") out.i = truth(at, a) || truth(n.args[1]->dtype, b);
      else if (isComparison(n.op))
        out.i = isFloat(at) ? compare(n.op, a.f, b.f) : compareI(n.op, a.i, b.i);
      else if (isFloat(t) && (n.op == "div_trunc" || n.op == "div_floor"))
        out.f = roundTo(t, roundedDivision(t, n.op, a.f, b.f));
      else if (isFloat(t)) out.f = roundTo(t, binaryF(n.op, a.f, b.f));
      else out.i = wrapTo(t, binaryI(n.op, a.i, b.i));
      return out;
    }
    }
    fail(ErrorCode::Internal, "unknown scalar kind");
  }

  const Program& program_;
  HostBuffers buffers_;
  sym::Binding& binding_;
};

} // namespace

std::vector<ir::HostTensor> evaluate(const Program& program, const ir::Graph& graph,
                                     std::vector<ir::HostTensor> inputs) {
  return Evaluator(program, graph, std::move(inputs)).run();
}

} // namespace kiln::codegen
