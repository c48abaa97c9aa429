// C++ for the CPU, kernel by kernel (see cpu_emitter.h). Each buffer's body
// becomes straight-line code of single-assignment temporaries, shared where
// two nodes compute the same thing; the branches of a `where` stay inline,
// so only the chosen one runs (cat's other branches would load out of range).
#include "kiln/codegen/cpu_emitter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kiln/common/error.h"
#include "kiln/ir/philox.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::codegen {
namespace {

// Helpers every kernel may call: half-precision conversions (round to nearest
// even), NaN-propagating min/max, Python-style integer division that reports
// a zero divisor instead of trapping, and index checks.
const char* kPrelude = R"(#include <stdint.h>
#include <vector>
#include <string.h>
#include <cmath>
#include <limits>

/* Vector variants of the math functions exist in glibc's libmvec (linked with
   -lmvec): declaring them lets `omp simd` loops call them instead of the
   scalar functions (glibc declares them only under -ffast-math, whose other
   effects on NaN and infinities kiln cannot have). */
#define KILN_VECTOR_MATH(type, name) _Pragma("omp declare simd notinbranch") type name(type);
extern "C" {
KILN_VECTOR_MATH(float, expf) KILN_VECTOR_MATH(float, exp2f) KILN_VECTOR_MATH(float, expm1f)
KILN_VECTOR_MATH(float, logf) KILN_VECTOR_MATH(float, log1pf) KILN_VECTOR_MATH(float, sinf)
KILN_VECTOR_MATH(float, cosf) KILN_VECTOR_MATH(float, tanf) KILN_VECTOR_MATH(float, tanhf)
KILN_VECTOR_MATH(float, erff)
KILN_VECTOR_MATH(double, exp) KILN_VECTOR_MATH(double, exp2) KILN_VECTOR_MATH(double, expm1)
KILN_VECTOR_MATH(double, log) KILN_VECTOR_MATH(double, log1p) KILN_VECTOR_MATH(double, sin)
KILN_VECTOR_MATH(double, cos) KILN_VECTOR_MATH(double, tan) KILN_VECTOR_MATH(double, tanh)
KILN_VECTOR_MATH(double, erf)
}

typedef uint16_t kiln_half;
typedef uint16_t kiln_bf16;

/* A float's bits and back. */
static inline uint32_t kiln_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}
static inline float kiln_float(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}
static inline float kiln_h2f(kiln_half h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return kiln_float(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return kiln_float(sign | ((exp + 112) << 23) | (mant << 13));
  float f = std::ldexp((float)mant, -24); /* subnormal or zero */
  return sign ? -f : f;
}
static inline kiln_half kiln_f2h(float f) {
  uint32_t x = kiln_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return (kiln_half)(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return (kiln_half)(sign | 0x7c00u); /* rounds to infinity */
  if (abs < 0x38800000u) /* subnormal or zero: round at 2^-24 */
    return (kiln_half)(sign | (uint32_t)std::nearbyint(kiln_float(abs) * 16777216.0f));
  uint32_t mant = abs & 0x7fffffu, exp = (abs >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return (kiln_half)(sign | h);
}
static inline float kiln_b2f(kiln_bf16 b) { return kiln_float((uint32_t)b << 16); }
static inline kiln_bf16 kiln_f2b(float f) {
  uint32_t x = kiln_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (kiln_bf16)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (kiln_bf16)(x >> 16);
}
static inline float kiln_round_h(float f) { return kiln_h2f(kiln_f2h(f)); }
static inline float kiln_round_b(float f) { return kiln_b2f(kiln_f2b(f)); }

template <class T> static inline T kiln_maximum(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}
template <class T> static inline T kiln_minimum(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return a < b ? a : b;
}
template <class T> static inline T kiln_relu(T x) { return x != x ? x : (x > T(0) ? x : T(0)); }
template <class T> static inline T kiln_sign(T x) { return x != x ? T(0) : T((x > T(0)) - (x < T(0))); }
template <class T> static inline T kiln_sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }
/* torch's floor division of floats (fmod-based, exact where floor(a / b) would round up),
   each step rounded by `r` (torch computes it in f16/bf16; f32 and f64 round as themselves). */
template <class T, class R> static inline T kiln_fdiv_floor_rounded(T a, T b, R r) {
  if (b == T(0)) return r(a / b);
  T mod = std::fmod(a, b);
  T div = r(r(a - mod) / b);
  if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div = r(div - T(1));
  if (div == T(0)) return std::copysign(T(0), r(a / b));
  T floored = std::floor(div);
  return div - floored > T(0.5) ? floored + T(1) : floored;
}
template <class T> static inline T kiln_fdiv_floor(T a, T b) {
  return kiln_fdiv_floor_rounded(a, b, [](T v) { return v; });
}
template <class T> static inline T kiln_fremainder(T a, T b) {
  T r = std::fmod(a, b);
  return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? r + b : r;
}
static inline void kiln_flag(int* error, int code) { __atomic_store_n(error, code, __ATOMIC_RELAXED); }
static inline int64_t kiln_idiv_floor(int64_t a, int64_t b, int* error) {
  if (b == 0) { kiln_flag(error, 1); return 0; }
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t kiln_idiv_trunc(int64_t a, int64_t b, int* error) {
  if (b == 0) { kiln_flag(error, 1); return 0; }
  return a / b;
}
static inline int64_t kiln_imod(int64_t a, int64_t b, int* error) {
  if (b == 0) { kiln_flag(error, 1); return 0; }
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int64_t kiln_ifmod(int64_t a, int64_t b, int* error) {
  if (b == 0) { kiln_flag(error, 1); return 0; }
  return a % b;
}
static inline int64_t kiln_ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  uint64_t r = 1, base = (uint64_t)a;
  for (; b; b >>= 1, base *= base) if (b & 1) r *= base;
  return (int64_t)r;
}
static inline int64_t kiln_check_index(int64_t at, int64_t size, int* error) {
  if (at < 0 || at >= size) { kiln_flag(error, 2); return 0; }
  return at;
}
)";

// The C++ type holding a value of `t` in a kernel (half types compute as float).
std::string valueType(DType t) {
  switch (t) {
  case DType::Float32:
  case DType::Float16:
  case DType::BFloat16: return "float";
  case DType::Float64: return "double";
  case DType::Int8: return "int8_t";
  case DType::Int16: return "int16_t";
  case DType::Int32: return "int32_t";
  case DType::Int64: return "int64_t";
  case DType::UInt8: return "uint8_t";
  case DType::Bool: return "bool";
  default: throw Error(ErrorCode::Unsupported, "cpu codegen: complex dtypes");
  }
}

// The C++ type of a buffer's elements.
std::string storageType(DType t) {
  if (t == DType::Float16) return "kiln_half";
  if (t == DType::BFloat16) return "kiln_bf16";
  return valueType(t);
}

std::string literal(double v, DType t) {
  std::string type = valueType(t);
  if (std::isnan(v)) return "std::numeric_limits<" + type + ">::quiet_NaN()";
  if (std::isinf(v)) return std::string(v < 0 ? "-" : "") + "std::numeric_limits<" + type + ">::infinity()";
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", v);
  return "static_cast<" + type + ">(" + text + ")";
}

bool isComparison(const std::string& op) {
  return op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge";
}

// `x` (a value of `from`) as a value of `to`.
std::string convert(DType from, DType to, const std::string& x) {
  if (from == to) return x;
  if (to == DType::Float16) return "kiln_round_h(static_cast<float>(" + x + "))";
  if (to == DType::BFloat16) return "kiln_round_b(static_cast<float>(" + x + "))";
  if (to == DType::Bool) return "((" + x + ") != 0)";
  return "static_cast<" + valueType(to) + ">(" + x + ")";
}

class KernelWriter {
public:
  KernelWriter(const Program& program, const Kernel& kernel, std::vector<sym::Expr>& symbols)
      : program_(program), kernel_(kernel), symbols_(symbols) {}

  std::string write(const std::string& name) {
    std::ostringstream body;
    bool reductions = false; // or a scatter: no simd over the outer loops
    for (BufferId id : kernel_.buffers)
      reductions = reductions || program_.buffers[id].loops.reduce != ReduceOp::None ||
                   program_.buffers[id].loops.scatter;
    size_t rank = kernel_.outer.size();
    bool simdLast = !reductions && rank > 0 && allMembersFlat();
    size_t parallel = simdLast ? rank - 1 : rank;
    std::string work = workExpr();
    std::string indent = "  ";
    planReuse();
    // Rows of reused bodies: one per thread, made once per call.
    std::string rows;
    for (const auto& [id, scratch] : scratch_)
      rows += "std::vector<" + valueType(program_.buffers[id].loops.body->dtype) + "> " + scratch + ";\n";
    bool block = !rows.empty() && parallel > 0;
    if (!rows.empty() && !block) body << indent << rows;
    if (rank > 0) {
      if (block) {
        body << indent << "#pragma omp parallel if (" << work << " >= 32768)\n" << indent << "{\n";
        indent += "  ";
        body << indent << rows << indent << "#pragma omp for collapse(" << parallel << ")\n";
      } else if (parallel > 0)
        body << indent << "#pragma omp parallel for collapse(" << parallel << ") if (" << work
             << " >= 32768)\n";
      else if (simdLast)
        body << indent << "#pragma omp parallel for simd if (" << work << " >= 32768)\n";
      for (size_t k = 0; k < rank; ++k) {
        if (simdLast && k == rank - 1 && parallel > 0) body << indent << "#pragma omp simd\n";
        body << indent << "for (int64_t kiln_o" << k << " = 0; kiln_o" << k << " < "
             << index(kernel_.outer[k]) << "; ++kiln_o" << k << ") {\n";
        indent += "  ";
      }
    }
    for (BufferId id : kernel_.buffers) body << member(id, indent);
    for (size_t k = rank; k-- > 0;) {
      indent.resize(indent.size() - 2);
      body << indent << "}\n";
    }
    if (block && rank > 0) {
      indent.resize(indent.size() - 2);
      body << indent << "}\n";
    }
    std::ostringstream out;
    out << "extern \"C\" int " << name
        << "(char* const* kiln_buffers, const int64_t* kiln_symbols) {\n"
        << "  int kiln_error = 0;\n";
    for (sym::Expr s : used_) {
      if (declared_.count(s)) continue;
      out << "  const int64_t " << sym::toString(s) << " = kiln_symbols[" << slot(s) << "];\n";
    }
    for (BufferId id : buffers_) {
      const Buffer& b = program_.buffers[id];
      out << "  " << storageType(b.layout.dtype) << "* __restrict__ " << pointer(id)
          << " = reinterpret_cast<" << storageType(b.layout.dtype) << "*>(kiln_buffers[" << id
          << "]); // " << b.name << "\n";
    }
    out << body.str() << "  return kiln_error;\n}\n";
    return out.str();
  }

private:
  bool allMembersFlat() {
    for (BufferId id : kernel_.buffers)
      if (withoutUnitDims(program_.buffers[id].loops).ranges.size() != kernel_.outer.size())
        return false;
    return true;
  }

  // The amount of work, for the decision to run in parallel.
  std::string workExpr() {
    const Buffer& first = program_.buffers[kernel_.buffers.front()];
    std::string out = "INT64_C(1)";
    for (sym::Expr r : withoutUnitDims(first.loops).ranges) out += " * (" + index(r) + ")";
    for (sym::Expr r : first.loops.reductionRanges) out += " * (" + index(r) + ")";
    return out;
  }

  static std::string pointer(BufferId id) { return "kiln_b" + std::to_string(id); }

  size_t slot(sym::Expr s) {
    for (size_t k = 0; k < symbols_.size(); ++k)
      if (symbols_[k] == s) return k;
    symbols_.push_back(s);
    return symbols_.size() - 1;
  }

  // An index expression in C++, noting the symbols it reads.
  std::string index(sym::Expr e) {
    for (sym::Expr s : sym::freeSymbols(e)) used_.insert(s);
    return sym::toCpp(e);
  }

  void declare(sym::Expr var, const std::string& value, std::string& lines, const std::string& indent) {
    declared_.insert(var);
    lines += indent + "const int64_t " + sym::toString(var) + " = " + value + ";\n";
  }

  std::string member(BufferId id, const std::string& outerIndent) {
    const Buffer& b = program_.buffers[id];
    const Loops& l = b.loops;
    if (l.scatter) return scatter(id, outerIndent);
    bool local = std::find(kernel_.local.begin(), kernel_.local.end(), id) != kernel_.local.end();
    if (!local) buffers_.insert(id);
    std::string lines, indent = outerIndent;
    LoopShape shape = withoutUnitDims(l);
    size_t rank = kernel_.outer.size();
    lines += indent + "// " + b.name + "\n";
    for (size_t k = 0; k < l.vars.size(); ++k)
      if (l.ranges[k].asInteger() == 1) declare(l.vars[k], "0", lines, indent);
    for (size_t k = 0; k < rank && k < shape.vars.size(); ++k)
      declare(shape.vars[k], "kiln_o" + std::to_string(k), lines, indent);
    sym::Expr store = storeIndex(b);

    if (l.reduce == ReduceOp::None) {
      std::string close;
      for (size_t k = rank; k < shape.vars.size(); ++k) {
        declared_.insert(shape.vars[k]);
        std::string v = sym::toString(shape.vars[k]);
        if (k + 1 == shape.vars.size()) lines += indent + "#pragma omp simd\n";
        lines += indent + "for (int64_t " + v + " = 0; " + v + " < " + index(shape.ranges[k]) +
                 "; ++" + v + ") {\n";
        indent += "  ";
        close = indent.substr(2) + "}\n" + close;
      }
      Block block(indent);
      std::string value = emit(l.body, block, false);
      lines += block.lines;
      lines += indent + pointer(id) + "[" + index(store) + "] = " +
               stored(b.layout.dtype, l.body->dtype, value) + ";\n";
      return lines + close;
    }
    return lines + reduction(id, store, indent);
  }

  // A scatter (Loops::scatter): the ordered loop innermost, in order; each
  // element added to the one its index names when that index is in range,
  // else the kernel's index error (and no store).
  std::string scatter(BufferId id, std::string indent) {
    const Buffer& b = program_.buffers[id];
    const Loops& l = b.loops;
    buffers_.insert(id);
    std::string lines = indent + "// " + b.name + " (scatter)\n", close;
    for (size_t k = 0; k < l.vars.size(); ++k)
      if (l.ranges[k].asInteger() == 1) declare(l.vars[k], "0", lines, indent);
    LoopShape outer = scatterOuter(l);
    for (size_t k = 0; k < outer.vars.size(); ++k)
      declare(outer.vars[k], "kiln_o" + std::to_string(k), lines, indent);
    if (l.scatterDim < l.vars.size() && l.ranges[l.scatterDim].asInteger() != 1) {
      sym::Expr var = l.vars[l.scatterDim];
      declared_.insert(var);
      std::string v = sym::toString(var);
      lines += indent + "for (int64_t " + v + " = 0; " + v + " < " + index(l.ranges[l.scatterDim]) +
               "; ++" + v + ") {\n";
      indent += "  ";
      close = indent.substr(2) + "}\n";
    }
    Block block(indent);
    DType t = b.layout.dtype;
    DType compute = t == DType::Float16 || t == DType::BFloat16 ? DType::Float32 : t;
    std::string value = convert(l.body->dtype, compute, emit(l.body, block, false));
    const ScalarNode& to = *l.scatter;
    std::string inRange, bind;
    for (size_t k = 0; k < to.indirect.size(); ++k) {
      std::string at = emit(to.args[k], block, false), size = index(to.indirectSizes[k]);
      declared_.insert(to.indirect[k]);
      inRange += (k ? " && " : "") + at + " >= 0 && " + at + " < " + size;
      bind += "const int64_t " + sym::toString(to.indirect[k]) + " = " + at + "; ";
    }
    lines += block.lines;
    std::string element = pointer(id) + "[" + index(to.index) + "]", old = element;
    if (t == DType::Float16) old = "kiln_h2f(" + element + ")";
    if (t == DType::BFloat16) old = "kiln_b2f(" + element + ")";
    std::string sum = "static_cast<" + valueType(compute) + ">(" + old + " + " + value + ")";
    lines += indent + "if (" + (inRange.empty() ? "true" : inRange) + ") { " + bind + element +
             " = " + stored(t, compute, sum) + "; } else kiln_flag(&kiln_error, 2);\n";
    return lines + close;
  }

  // A value of `from` as stored in a buffer of `to`.
  std::string stored(DType to, DType from, const std::string& value) {
    std::string v = convert(from, to == DType::Float16 || to == DType::BFloat16 ? DType::Float32 : to, value);
    if (to == DType::Float16) return "kiln_f2h(" + v + ")";
    if (to == DType::BFloat16) return "kiln_f2b(" + v + ")";
    return v;
  }

  std::string reduction(BufferId id, sym::Expr store, std::string indent) {
    const Buffer& b = program_.buffers[id];
    const Loops& l = b.loops;
    std::string acc = "kiln_acc" + std::to_string(id), type = valueType(l.accumulator), lines;
    bool arg = l.reduce == ReduceOp::ArgMax || l.reduce == ReduceOp::ArgMin;
    bool floating = ir::isFloating(l.accumulator);
    std::string init;
    switch (l.reduce) {
    case ReduceOp::Sum: init = "0"; break;
    case ReduceOp::Prod: init = "1"; break;
    case ReduceOp::Max: init = floating ? "-std::numeric_limits<" + type + ">::infinity()"
                                        : "std::numeric_limits<" + type + ">::lowest()"; break;
    case ReduceOp::Min: init = floating ? "std::numeric_limits<" + type + ">::infinity()"
                                        : "std::numeric_limits<" + type + ">::max()"; break;
    case ReduceOp::Any: init = "false"; break;
    case ReduceOp::All: init = "true"; break;
    default: init = "0";
    }
    if (auto scratch = scratch_.find(id); scratch != scratch_.end())
      lines += indent + scratch->second + ".resize(" + numelText(l.reductionRanges) + ");\n";
    lines += indent + type + " " + acc + " = " + init + ";\n";
    if (arg) lines += indent + "int64_t " + acc + "_at = -1, " + acc + "_pos = 0;\n";
    bool extreme = l.reduce == ReduceOp::Max || l.reduce == ReduceOp::Min;
    std::string nan = acc + "_nan";
    // An int flag: GCC vectorizes `|` of ints, not `||` of bools.
    if (extreme && floating) lines += indent + "int " + nan + " = 0;\n";
    std::string close;
    // Sums and products may reassociate (vectorized partial sums), as torch's
    // reductions do; max/min vectorize as plain max/min with a separate "saw a
    // NaN" flag (a NaN wins, as in torch); arg* keep order for the first index.
    std::string simd;
    bool boolean = l.accumulator == DType::Bool; // a bool sum is `any`, a bool product `all`
    if ((l.reduce == ReduceOp::Sum || l.reduce == ReduceOp::Prod) && !boolean)
      simd = "#pragma omp simd reduction(" + std::string(l.reduce == ReduceOp::Sum ? "+" : "*") +
             ":" + acc + ")\n";
    if (extreme)
      simd = "#pragma omp simd reduction(" + std::string(l.reduce == ReduceOp::Max ? "max" : "min") +
             ":" + acc + ")" + (floating ? " reduction(|:" + nan + ")" : "") + "\n";
    for (size_t k = 0; k < l.reductionVars.size(); ++k) {
      if (k + 1 == l.reductionVars.size() && !simd.empty()) lines += indent + simd;
      declared_.insert(l.reductionVars[k]);
      std::string v = sym::toString(l.reductionVars[k]);
      lines += indent + "for (int64_t " + v + " = 0; " + v + " < " + index(l.reductionRanges[k]) +
               "; ++" + v + ") {\n";
      indent += "  ";
      close = indent.substr(2) + "}\n" + close;
    }
    Block block(indent);
    std::string raw = emit(l.body, block, false);
    std::string v = convert(l.body->dtype, l.accumulator, raw);
    if (auto row = rowWrites_.find(id); row != rowWrites_.end())
      block.lines += block.indent + row->second + " = " + raw + ";\n";
    lines += block.lines;
    switch (l.reduce) {
    case ReduceOp::Sum:
      lines += indent + acc + " = " + acc + (boolean ? " || " : " + ") + v + ";\n";
      break;
    case ReduceOp::Prod:
      lines += indent + acc + " = " + acc + (boolean ? " && " : " * ") + v + ";\n";
      break;
    case ReduceOp::Max:
    case ReduceOp::Min: {
      std::string keep = l.reduce == ReduceOp::Max ? " > " : " < ";
      lines += indent + acc + " = " + v + keep + acc + " ? " + v + " : " + acc + ";\n";
      if (floating) lines += indent + nan + " |= " + v + " != " + v + ";\n";
      break;
    }
    case ReduceOp::Any: lines += indent + acc + " = " + acc + " || " + v + ";\n"; break;
    case ReduceOp::All: lines += indent + acc + " = " + acc + " && " + v + ";\n"; break;
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin: {
      std::string better = l.reduce == ReduceOp::ArgMax ? ">" : "<";
      std::string test = floating ? "(" + v + " != " + v + " || " + v + " " + better + " " + acc + ")"
                                  : "(" + v + " " + better + " " + acc + ")";
      if (floating) test = "(" + acc + " == " + acc + " && " + test + ")";
      lines += indent + "if (" + acc + "_at < 0 || " + test + ") { " + acc + " = " + v + "; " + acc +
               "_at = " + acc + "_pos; }\n" + indent + "++" + acc + "_pos;\n";
      break;
    }
    case ReduceOp::None: break;
    }
    indent = indent.substr(0, indent.size() - 2 * l.reductionVars.size());
    lines += close;
    if (extreme && floating)
      lines += indent + "if (" + nan + ") " + acc + " = std::numeric_limits<" + type + ">::quiet_NaN();\n";
    std::string result = arg ? acc + "_at" : acc;
    DType resultType = arg ? DType::Int64 : l.accumulator;
    if (std::find(kernel_.local.begin(), kernel_.local.end(), id) == kernel_.local.end())
      lines += indent + pointer(id) + "[" + index(store) + "] = " +
               stored(b.layout.dtype, resultType, result) + ";\n";
    registers_[id] = {result, resultType};
    return lines;
  }

  struct Block {
    explicit Block(std::string i) : indent(std::move(i)) {}
    std::string indent;
    std::string lines;
    std::unordered_map<std::string, std::string> named; // expression -> temporary
  };

  // A temporary holding `expr` (shared with an equal earlier one).
  std::string bind(Block& block, DType t, const std::string& expr) {
    auto [it, fresh] = block.named.emplace(expr, "kiln_v" + std::to_string(next_));
    if (fresh) {
      ++next_;
      block.lines += block.indent + "const " + valueType(t) + " " + it->second + " = " + expr + ";\n";
    }
    return it->second;
  }

  std::string emit(const Scalar& s, Block& block, bool lazy) {
    std::string expr = expression(s, block, lazy);
    if (lazy || s->kind == ScalarKind::Constant) return expr;
    return bind(block, s->dtype, expr);
  }

  std::string expression(const Scalar& s, Block& block, bool lazy) {
    if (auto reused = replaced_.find(s.get()); reused != replaced_.end()) return reused->second;
    const ScalarNode& n = *s;
    DType t = n.dtype;
    std::string type = valueType(t);
    auto arg = [&](size_t k) { return emit(n.args[k], block, lazy); };
    switch (n.kind) {
    case ScalarKind::Load: return load(n, block, lazy);
    case ScalarKind::Constant:
      if (t == DType::Bool) return n.integer ? "true" : "false";
      if (ir::isFloating(t)) return literal(n.number, t);
      return "static_cast<" + type + ">(INT64_C(" + std::to_string(n.integer) + "))";
    case ScalarKind::IndexOf: return "static_cast<" + type + ">(" + index(n.index) + ")";
    case ScalarKind::Cast: return convert(n.args[0]->dtype, t, arg(0));
    case ScalarKind::Where: {
      std::string c = emit(n.args[0], block, lazy);
      Block inner(block.indent);
      std::string a = emit(n.args[1], inner, true), b = emit(n.args[2], inner, true);
      return "(" + c + " ? " + convert(n.args[1]->dtype, t, a) + " : " +
             convert(n.args[2]->dtype, t, b) + ")";
    }
    case ScalarKind::Unary: return unaryExpr(n, arg(0));
    case ScalarKind::Binary: return binaryExpr(n, arg(0), arg(1));
    case ScalarKind::Philox:
      return "kiln_philox_uniform(static_cast<uint64_t>(" + arg(0) + "), static_cast<uint64_t>(" +
             arg(1) + "))";
    }
    throw Error(ErrorCode::Internal, "cpu codegen: unknown scalar kind");
  }

  std::string load(const ScalarNode& n, Block& block, bool lazy) {
    auto reg = registers_.find(n.buffer);
    const Buffer& b = program_.buffers[n.buffer];
    if (reg != registers_.end()) // a reduction of this kernel: its value, as stored
      return convert(b.layout.dtype, n.dtype,
                     convert(reg->second.second, b.layout.dtype, reg->second.first));
    buffers_.insert(n.buffer);
    std::string prefix;
    for (size_t k = 0; k < n.indirect.size(); ++k) {
      declared_.insert(n.indirect[k]);
      std::string value = "kiln_check_index(static_cast<int64_t>(" + emit(n.args[k], block, lazy) +
                          "), " + index(n.indirectSizes[k]) + ", &kiln_error)";
      if (lazy) prefix += "const int64_t " + sym::toString(n.indirect[k]) + " = " + value + "; ";
      else block.lines += block.indent + "const int64_t " + sym::toString(n.indirect[k]) + " = " + value + ";\n";
    }
    std::string element = pointer(n.buffer) + "[" + index(n.index) + "]";
    if (b.layout.dtype == DType::Float16) element = "kiln_h2f(" + element + ")";
    if (b.layout.dtype == DType::BFloat16) element = "kiln_b2f(" + element + ")";
    if (lazy && !prefix.empty()) return "[&]() { " + prefix + "return " + element + "; }()";
    return element;
  }

  std::string unaryExpr(const ScalarNode& n, const std::string& x) {
    const std::string& op = n.op;
    DType t = n.dtype;
    std::string type = valueType(t);
    DType in = n.args[0]->dtype;
    bool floating = ir::isFloating(t);
    if (op == "logical_not") return "!(" + x + ")";
    if (op == "isnan") return ir::isFloating(in) ? "(" + x + " != " + x + ")" : "false";
    if (op == "isinf") return ir::isFloating(in) ? "std::isinf(" + x + ")" : "false";
    if (op == "neg") return "static_cast<" + type + ">(-" + x + ")";
    if (op == "abs") return floating ? "std::fabs(" + x + ")" : "static_cast<" + type + ">(" + x + " < 0 ? -" + x + " : " + x + ")";
    if (op == "relu") return "kiln_relu(" + x + ")";
    if (op == "sign") return "kiln_sign(" + x + ")";
    if (!floating) {
      if (op == "floor" || op == "ceil" || op == "round" || op == "trunc") return x;
      throw Error(ErrorCode::Unsupported, "cpu codegen: " + op + " of integers");
    }
    if (op == "round") return "std::nearbyint(" + x + ")";
    if (op == "rsqrt") return "(" + type + "(1) / std::sqrt(" + x + "))";
    if (op == "reciprocal") return "(" + type + "(1) / " + x + ")";
    if (op == "sigmoid") return "kiln_sigmoid(" + x + ")";
    for (const char* f : {"exp", "exp2", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan",
                          "tanh", "erf", "floor", "ceil", "trunc"})
      if (op == f) return "std::" + op + "(" + x + ")";
    throw Error(ErrorCode::Unsupported, "cpu codegen: no C++ for unary op '" + op + "'");
  }

  std::string binaryExpr(const ScalarNode& n, const std::string& a, const std::string& b) {
    const std::string& op = n.op;
    DType t = n.dtype;
    std::string type = valueType(t);
    bool floating = ir::isFloating(t);
    auto typed = [&](const std::string& e) { return "static_cast<" + type + ">(" + e + ")"; };
    if (isComparison(op)) {
      static const std::unordered_map<std::string, std::string> ops = {
          {"eq", "=="}, {"ne", "!="}, {"lt", "<"}, {"le", "<="}, {"gt", ">"}, {"ge", ">="}};
      return "(" + a + " " + ops.at(op) + " " + b + ")";
    }
    if (op == "logical_and") return "((" + a + ") != 0 && (" + b + ") != 0)";
    if (op == "logical_or") return "((" + a + ") != 0 || (" + b + ") != 0)";
    if (op == "add") return typed(a + " + " + b);
    if (op == "sub") return typed(a + " - " + b);
    if (op == "mul") return typed(a + " * " + b);
    if (op == "maximum" || op == "clamp_min") return op == "maximum" ? "kiln_maximum(" + a + ", " + b + ")"
                                                                     : clamp(a, b, ">");
    if (op == "minimum" || op == "clamp_max") return op == "minimum" ? "kiln_minimum(" + a + ", " + b + ")"
                                                                     : clamp(a, b, "<");
    if (op == "bitwise_and") return typed(a + " & " + b);
    if (op == "bitwise_or") return typed(a + " | " + b);
    if (op == "bitwise_xor") return typed(a + " ^ " + b);
    if (t == DType::Float16 || t == DType::BFloat16) { // a half-typed step: rounded
      std::string r = t == DType::Float16 ? "kiln_round_h" : "kiln_round_b";
      if (op == "div_trunc") return "std::trunc(" + r + "(" + a + " / " + b + "))";
      if (op == "div_floor") return "kiln_fdiv_floor_rounded(" + a + ", " + b + ", " + r + ")";
    }
    if (floating) {
      if (op == "div") return a + " / " + b;
      if (op == "div_trunc") return "std::trunc(" + a + " / " + b + ")";
      if (op == "div_floor") return "kiln_fdiv_floor(" + a + ", " + b + ")";
      if (op == "pow") return "std::pow(" + a + ", " + b + ")";
      if (op == "fmod") return "std::fmod(" + a + ", " + b + ")";
      if (op == "remainder") return "kiln_fremainder(" + a + ", " + b + ")";
    } else {
      if (op == "div_floor") return typed("kiln_idiv_floor(" + a + ", " + b + ", &kiln_error)");
      if (op == "div_trunc") return typed("kiln_idiv_trunc(" + a + ", " + b + ", &kiln_error)");
      if (op == "remainder") return typed("kiln_imod(" + a + ", " + b + ", &kiln_error)");
      if (op == "fmod") return typed("kiln_ifmod(" + a + ", " + b + ", &kiln_error)");
      if (op == "pow") return typed("kiln_ipow(" + a + ", " + b + ")");
    }
    throw Error(ErrorCode::Unsupported, "cpu codegen: no C++ for binary op '" + op + "' on " +
                                            std::string(ir::name(t)));
  }

  // clamp's bound: NaN in x stays, a NaN bound wins, else the larger (smaller).
  static std::string clamp(const std::string& x, const std::string& bound, const std::string& keep) {
    return "(" + x + " != " + x + " ? " + x + " : (" + bound + " != " + bound + " ? " + bound +
           " : (" + x + " " + keep + " " + bound + " ? " + x + " : " + bound + ")))";
  }


  // Reuse of a reduction's body: when a later buffer of the kernel (pointwise,
  // or a reduction), over the same inner ranges, computes the very expression
  // the reduction reduced (softmax's exp(x - max), layer_norm's x + r), the
  // reduction keeps each value in a row and the later buffers read it instead
  // of recomputing. The row is the last reader's own output when that reader is
  // pointwise and stores the row's values in their own type (it reads each
  // element just before overwriting it); otherwise a per-thread scratch vector.
  struct Match { // a later buffer's subtrees equal to a reduction's body
    size_t reader;
    std::vector<const ScalarNode*> nodes;
    std::vector<sym::Expr> outer, inner; // the reader's outer and inner index variables
  };

  void planReuse() {
    size_t rank = kernel_.outer.size();
    std::map<BufferId, std::vector<Match>> matches;
    for (size_t p = 0; p < kernel_.buffers.size(); ++p) {
      const Loops& pl = program_.buffers[kernel_.buffers[p]].loops;
      LoopShape ps = withoutUnitDims(pl);
      if (ps.vars.size() < rank) continue;
      // The reader's inner loop: a reduction's ranges, or a pointwise buffer's dims past outer.
      bool reduces = pl.reduce != ReduceOp::None;
      std::vector<sym::Expr> outer(ps.vars.begin(), ps.vars.begin() + static_cast<std::ptrdiff_t>(rank));
      std::vector<sym::Expr> inner = reduces ? pl.reductionVars
                                             : std::vector<sym::Expr>(ps.vars.begin() + static_cast<std::ptrdiff_t>(rank), ps.vars.end());
      Shape innerRanges = reduces ? pl.reductionRanges
                                  : Shape(ps.ranges.begin() + static_cast<std::ptrdiff_t>(rank), ps.ranges.end());
      for (size_t r = 0; r < p; ++r) {
        BufferId rid = kernel_.buffers[r];
        const Loops& rl = program_.buffers[rid].loops;
        if (rl.reduce == ReduceOp::None || rl.reductionRanges != innerRanges || innerRanges.empty() ||
            opCount(rl.body) < 3)
          continue;
        LoopShape rs = withoutUnitDims(rl);
        std::unordered_map<sym::Expr, sym::Expr> map = unitsToZero(rl);
        for (size_t k = 0; k < rank && k < rs.vars.size(); ++k) map.emplace(rs.vars[k], ps.vars[k]);
        for (size_t k = 0; k < inner.size(); ++k) map.emplace(rl.reductionVars[k], inner[k]);
        Scalar wanted = codegen::substitute(rl.body, map);
        Match m{p, {}, outer, inner};
        findAll(pl.body, wanted, unitsToZero(pl), m.nodes);
        if (!m.nodes.empty()) matches[rid].push_back(std::move(m));
      }
    }
    for (const auto& [rid, found] : matches) {
      const Loops& rl = program_.buffers[rid].loops;
      LoopShape rs = withoutUnitDims(rl);
      std::vector<sym::Expr> rOuter(rs.vars.begin(), rs.vars.begin() + static_cast<std::ptrdiff_t>(std::min(rank, rs.vars.size())));
      if (rOuter.size() == rank && rowInOutput(rid, found.back())) {
        BufferId out = kernel_.buffers[found.back().reader];
        auto at = [&](const std::vector<sym::Expr>& outer, const std::vector<sym::Expr>& inner) {
          const Match& last = found.back();
          std::unordered_map<sym::Expr, sym::Expr> map = unitsToZero(program_.buffers[out].loops);
          for (size_t k = 0; k < rank; ++k) map.emplace(last.outer[k], outer[k]);
          for (size_t k = 0; k < inner.size(); ++k) map.emplace(last.inner[k], inner[k]);
          return pointer(out) + "[" + index(sym::substitute(storeIndex(program_.buffers[out]), map)) + "]";
        };
        rowWrites_[rid] = at(rOuter, rl.reductionVars);
        for (const Match& m : found)
          for (const ScalarNode* f : m.nodes) replaced_[f] = at(m.outer, m.inner);
        continue;
      }
      std::string name = "kiln_row" + std::to_string(rid);
      scratch_.emplace(rid, name);
      rowWrites_[rid] = name + "[" + linear(rl.reductionVars, rl.reductionRanges) + "]";
      for (const Match& m : found)
        for (const ScalarNode* f : m.nodes) replaced_[f] = name + "[" + linear(m.inner, rl.reductionRanges) + "]";
    }
  }

  // Whether reduction `rid` may keep its row in the output of its last reader: a
  // pointwise buffer of this kernel with memory of its own, storing values of the
  // row's type, its inner dims contiguous.
  bool rowInOutput(BufferId rid, const Match& last) {
    BufferId out = kernel_.buffers[last.reader];
    const Buffer& b = program_.buffers[out];
    DType t = program_.buffers[rid].loops.body->dtype;
    if (b.loops.reduce != ReduceOp::None || b.aliasOf || b.layout.dtype != t || t == DType::Float16 ||
        t == DType::BFloat16 || t == DType::Bool || std::find(kernel_.local.begin(), kernel_.local.end(), out) != kernel_.local.end())
      return false;
    std::unordered_map<sym::Expr, sym::Expr> innerToZero;
    for (sym::Expr v : last.inner) innerToZero.emplace(v, zero());
    sym::Expr store = storeIndex(b);
    const Shape& ranges = program_.buffers[rid].loops.reductionRanges;
    sym::Expr offset = store - sym::substitute(store, innerToZero);
    sym::Expr linearInner = zero();
    for (size_t k = 0; k < last.inner.size(); ++k) linearInner = linearInner * ranges[k] + last.inner[k];
    return offset == linearInner;
  }

  std::unordered_map<sym::Expr, sym::Expr> unitsToZero(const Loops& l) {
    std::unordered_map<sym::Expr, sym::Expr> map;
    for (size_t k = 0; k < l.vars.size(); ++k)
      if (l.ranges[k].asInteger() == 1) map.emplace(l.vars[k], zero());
    return map;
  }

  // Every subtree of `tree` equal to `wanted` (tree's size-1 vars read as 0): layer_norm's
  // variance reads x + r twice, as both factors of its square.
  void findAll(const Scalar& tree, const Scalar& wanted,
               const std::unordered_map<sym::Expr, sym::Expr>& units, std::vector<const ScalarNode*>& found) {
    if (same(wanted, tree, units)) {
      found.push_back(tree.get());
      return;
    }
    for (const Scalar& a : tree->args) findAll(a, wanted, units, found);
  }

  static bool same(const Scalar& a, const Scalar& b,
                   const std::unordered_map<sym::Expr, sym::Expr>& units) {
    if (a->kind != b->kind || a->dtype != b->dtype || a->op != b->op || a->buffer != b->buffer ||
        a->number != b->number || a->integer != b->integer || a->args.size() != b->args.size() ||
        !a->indirect.empty() || !b->indirect.empty() || a->index.isNull() != b->index.isNull())
      return false;
    if (!a->index.isNull() && a->index != sym::substitute(b->index, units)) return false;
    for (size_t k = 0; k < a->args.size(); ++k)
      if (!same(a->args[k], b->args[k], units)) return false;
    return true;
  }

  // The row-major position of `vars` in `ranges`, as C++.
  std::string linear(const std::vector<sym::Expr>& vars, const Shape& ranges) {
    sym::Expr at = zero();
    for (size_t k = 0; k < vars.size(); ++k) at = at * ranges[k] + vars[k];
    return index(at);
  }

  std::string numelText(const Shape& ranges) {
    sym::Expr n = zero() + 1;
    for (sym::Expr r : ranges) n = n * r;
    return index(n);
  }

  sym::Expr zero() { return kernel_.outer.empty() ? program_.buffers.front().layout.storageOffset.table().integer(0)
                                                  : kernel_.outer.front().table().integer(0); }

  const Program& program_;
  const Kernel& kernel_;
  std::vector<sym::Expr>& symbols_;
  std::set<sym::Expr, bool (*)(sym::Expr, sym::Expr)> used_{
      [](sym::Expr a, sym::Expr b) { return sym::toString(a) < sym::toString(b); }};
  std::set<sym::Expr, bool (*)(sym::Expr, sym::Expr)> declared_{
      [](sym::Expr a, sym::Expr b) { return sym::toString(a) < sym::toString(b); }};
  std::set<BufferId> buffers_;
  std::unordered_map<BufferId, std::pair<std::string, DType>> registers_;
  std::map<BufferId, std::string> scratch_;                      // reduction -> its row of bodies
  std::map<BufferId, std::string> rowWrites_;                     // reduction -> where it keeps each body
  std::unordered_map<const ScalarNode*, std::string> replaced_; // subtree -> row element
  size_t next_ = 0;
};

} // namespace

const std::string& cpuPrelude() {
  static const std::string prelude = sym::cppPrelude() + ir::philoxCppSource() + kPrelude;
  return prelude;
}

CpuSource emitCpu(const Program& program, const Schedule& schedule) {
  CpuSource out;
  std::ostringstream code;
  code << "// Generated by kiln's CPU emitter.\n" << cpuPrelude();
  for (size_t k = 0; k < schedule.kernels.size(); ++k) {
    std::string name = "kiln_kernel_" + std::to_string(k);
    code << "\n" << KernelWriter(program, schedule.kernels[k], out.symbols).write(name);
    out.kernels.push_back(name);
  }
  out.code = code.str();
  return out;
}

} // namespace kiln::codegen
