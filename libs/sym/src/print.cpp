// Human text and C++ for expressions. Both walk the canonical form in its
// canonical order, so the output is deterministic.
#include "kiln/sym/print.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/range.h"

#include "poly.h"

namespace kiln::sym {
namespace detail {
namespace {

enum class Syntax { Text, Cpp };

std::string magnitude(int64_t v) { // |v| in decimal, INT64_MIN included
  const uint64_t m = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  return std::to_string(m);
}

class Printer {
public:
  explicit Printer(Syntax syntax) : cpp_(syntax == Syntax::Cpp) {}

  void node(const Node* n) {
    const Term* args = n->terms();
    switch (n->kind) {
    case Kind::Integer: return integer(n->value);
    case Kind::Boolean: out += n->value ? "true" : "false"; return;
    case Kind::Symbol: out += n->symbol->name; return;
    case Kind::Sum: return sum(n);
    case Kind::Product:
      if (cpp_) out += '(';
      monomial(n);
      if (cpp_) out += ')';
      return;
    case Kind::FloorDiv: return division(n, "//", "/", "kiln_floordiv");
    case Kind::Mod: return division(n, " % ", "%", "kiln_mod");
    case Kind::Min: return minMax(n, "min");
    case Kind::Max: return minMax(n, "max");
    case Kind::Eq: return relation(n, " == ");
    case Kind::Ne: return relation(n, " != ");
    case Kind::Lt: return relation(n, " < ");
    case Kind::Le: return lessEqual(n);
    case Kind::And: return connective(n, " && ");
    case Kind::Or: return connective(n, " || ");
    case Kind::Not:
      out += cpp_ ? "(!" : "!";
      operand(args[0].expr.node());
      if (cpp_) out += ')';
      return;
    }
  }

  std::string out;

private:
  void integer(int64_t v) {
    if (v >= 0)
      out += std::to_string(v);
    else if (!cpp_)
      out += std::to_string(v);
    else if (v == kNegInf)
      out += "(-9223372036854775807 - 1)";
    else
      out += "(" + std::to_string(v) + ")";
  }

  // An operand of //, %, ! or a factor: bare when it cannot be misread.
  void operand(const Node* n) {
    const bool bare = n->kind == Kind::Symbol || n->kind == Kind::Min || n->kind == Kind::Max ||
                      n->kind == Kind::Boolean || (n->kind == Kind::Integer && n->value >= 0) ||
                      (cpp_ && n->kind != Kind::Integer);
    if (!bare) out += '(';
    node(n);
    if (!bare) out += ')';
  }

  void monomial(const Node* m) {
    if (m->kind != Kind::Product) return operand(m);
    const Term* factors = m->terms();
    for (uint32_t i = 0; i < m->size; ++i) {
      const int64_t exponent = factors[i].coeff;
      if (cpp_) {
        for (int64_t e = 0; e < exponent; ++e) {
          if (i > 0 || e > 0) out += '*';
          operand(factors[i].expr.node());
        }
      } else {
        if (i > 0) out += '*';
        operand(factors[i].expr.node());
        if (exponent > 1) out += "^" + std::to_string(exponent);
      }
    }
  }

  // A sum printed with its constant moved by `shift` (see lessEqual).
  void sum(const Node* n, int64_t shift = 0) {
    if (cpp_) out += '(';
    bool first = true;
    for (const Term& t : Terms(n->terms(), n->size)) {
      out += t.coeff < 0 ? (first ? "-" : " - ") : (first ? "" : " + ");
      const Node* m = t.expr.node();
      if (t.coeff != 1 && t.coeff != -1) {
        out += magnitude(t.coeff) + "*";
        monomial(m);
      } else if (!cpp_ && m->kind != Kind::Product && !(first && t.coeff < 0))
        node(m); // "s1 + s0//2" reads right, "-s0//2" would not
      else
        monomial(m);
      first = false;
    }
    const int64_t constant = n->value + shift;
    if (constant != 0) out += (constant < 0 ? " - " : " + ") + magnitude(constant);
    if (cpp_) out += ')';
  }

  void division(const Node* n, const char* text, const char* plain, const char* helper) {
    const Node* a = n->terms()[0].expr.node();
    const Node* b = n->terms()[1].expr.node();
    if (!cpp_) {
      operand(a);
      out += text;
      operand(b);
    } else if (b->kind == Kind::Integer && b->value > 0 && rangeOfNode(a).lo >= 0) {
      out += '(';
      node(a);
      out += std::string(" ") + plain + " ";
      node(b);
      out += ')';
    } else
      call(helper, a, b);
  }

  void call(const char* helper, const Node* a, const Node* b) {
    out += std::string(helper) + "(";
    node(a);
    out += ", ";
    node(b);
    out += ')';
  }

  void minMax(const Node* n, const char* name) {
    const Term* args = n->terms();
    if (!cpp_) {
      out += std::string(name) + "(";
      for (uint32_t i = 0; i < n->size; ++i) {
        if (i > 0) out += ", ";
        node(args[i].expr.node());
      }
      out += ')';
      return;
    }
    for (uint32_t i = 0; i + 1 < n->size; ++i) { // kiln_min(a, kiln_min(b, c))
      out += std::string("kiln_") + name + "(";
      node(args[i].expr.node());
      out += ", ";
    }
    node(args[n->size - 1].expr.node());
    out += std::string(n->size - 1, ')');
  }

  void relation(const Node* n, const char* op) {
    if (cpp_) out += '(';
    node(n->terms()[0].expr.node());
    out += op;
    node(n->terms()[1].expr.node());
    if (cpp_) out += ')';
  }

  // The builders store a < b as a + 1 <= b, so a left side with the constant 1
  // is shown as the strict relation it most likely came from.
  void lessEqual(const Node* n) {
    const Node* lhs = n->terms()[0].expr.node();
    const int64_t c = lhs->kind == Kind::Integer || lhs->kind == Kind::Sum ? lhs->value : 0;
    if (c != 1) return relation(n, " <= ");
    if (cpp_) out += '(';
    if (lhs->kind == Kind::Integer)
      integer(0);
    else if (lhs->size == 1 && lhs->terms()[0].coeff == 1) // x + 1: just x
      node(lhs->terms()[0].expr.node());
    else
      sum(lhs, -1);
    out += " < ";
    node(n->terms()[1].expr.node());
    if (cpp_) out += ')';
  }

  void connective(const Node* n, const char* op) {
    if (cpp_) out += '(';
    for (uint32_t i = 0; i < n->size; ++i) {
      if (i > 0) out += op;
      const Node* arg = n->terms()[i].expr.node();
      const bool wrap = !cpp_ && (arg->kind == Kind::And || arg->kind == Kind::Or);
      if (wrap) out += '(';
      node(arg);
      if (wrap) out += ')';
    }
    if (cpp_) out += ')';
  }

  bool cpp_;
};

std::string print(Expr e, Syntax syntax) {
  Printer printer(syntax);
  printer.node(e.isNull() ? nullptr : e.node());
  return std::move(printer.out);
}

} // namespace
} // namespace detail

std::string assertFailure(Expr condition, const std::string& message,
                          const std::unordered_map<Expr, int64_t>& binding) {
  std::string values;
  for (Expr s : freeSymbols(condition)) {
    auto it = binding.find(s);
    if (it == binding.end()) continue;
    values += (values.empty() ? " with " : ", ") + s.name() + " = " + std::to_string(it->second);
  }
  return "runtime assert failed: " + toString(condition) + " (" + message + ")" + values;
}

std::string rangeFailure(Expr symbol, int64_t value, const std::string& op) {
  return "runtime assert failed: " + symbol.name() + " = " + std::to_string(value) + " lies outside " +
         toString(range(symbol)) + " (the range the trace assumed for the value " + op + " gives)";
}

std::string toString(Expr e) {
  if (e.isNull()) return "<null>";
  return detail::print(e, detail::Syntax::Text);
}

std::ostream& operator<<(std::ostream& out, Expr e) {
  return out << toString(e);
}

std::string toCpp(Expr e) {
  detail::tableOf(e);
  return detail::print(e, detail::Syntax::Cpp);
}

const std::string& cppPrelude() {
  static const std::string prelude = R"(#ifndef KILN_SYM_PRELUDE
#define KILN_SYM_PRELUDE
#ifndef __CUDACC_RTC__ /* NVRTC has no C headers: the kernel's prelude defines the types */
#include <stdint.h>
#endif
#ifdef __CUDACC__
#define KILN_SYM_FN static inline __host__ __device__
#else
#define KILN_SYM_FN static inline
#endif
/* Python's floor division and modulo: the remainder takes the divisor's sign. */
KILN_SYM_FN int64_t kiln_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
KILN_SYM_FN int64_t kiln_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
KILN_SYM_FN int64_t kiln_min(int64_t a, int64_t b) { return a < b ? a : b; }
KILN_SYM_FN int64_t kiln_max(int64_t a, int64_t b) { return a > b ? a : b; }
#endif
)";
  return prelude;
}

} // namespace kiln::sym
