// Export constraint checking: the guards of a trace against the user's Dims.
#include "kiln/shapes/constraints.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_set>

#include <fmt/format.h>

#include "kiln/common/error.h"
#include "kiln/shapes/decide.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "reduce.h"
#include "relation.h"
#include "translate.h"

namespace kiln::shapes {

namespace {

constexpr int64_t kMinDynamicSize = 2; // sizes 0 and 1 are specialized, as in PyTorch

std::string bound(int64_t v) {
  return v == sym::kInf ? "inf" : v == sym::kNegInf ? "-inf" : std::to_string(v);
}

std::string rangeText(sym::Range r) {
  return "[" + bound(r.lo) + ", " + bound(r.hi) + "]";
}

class Checker {
public:
  Checker(sym::SymbolTable& table, const std::vector<DimSpec>& spec, const Options& options)
      : table_(table), spec_(spec), options_(options) {
    validate();
    buildUserWorld();
  }

  ConstraintReport run(const std::vector<sym::Expr>& guards) {
    const Simplified s = simplify(table_, guards, options_);
    if (s.unsatisfiable) {
      add(ViolationKind::Other, allDims(), "the traced code accepts no input at all", "");
      return std::move(report_);
    }
    // Each violation's fix is then taken as declared, so that its consequences
    // (the range a divisibility moves, a Dim's range through an equality) are not
    // reported again.
    for (const Replacement& r : s.replacements) checkReplacement(r);
    for (sym::Expr g : s.guards) checkGuard(g);
    for (const auto& [x, r] : s.ranges) checkRange(x, r);
    return std::move(report_);
  }

private:
  void validate() {
    for (size_t i = 0; i < spec_.size(); ++i) {
      const DimSpec& d = spec_[i];
      const std::string what = "dynamic_shapes entry " + std::to_string(i) + " (" + d.source + ")";
      if (d.symbol.isNull() || !d.symbol.isSymbol())
        throw Error(ErrorCode::InvalidArgument, what + ": no symbol");
      if (&d.symbol.table() != &table_)
        throw Error(ErrorCode::InvalidArgument, what + ": its symbol belongs to another table");
      if (d.dim.empty()) throw Error(ErrorCode::InvalidArgument, what + ": no Dim name");
      if (d.range.lo > d.range.hi) throw Error(ErrorCode::InvalidArgument, what + ": empty range");
      if (!d.derived.isNull()) {
        if (&d.derived.table() != &table_ || d.derived.isBool())
          throw Error(ErrorCode::InvalidArgument,
                      what + ": the derived expression is not an integer of the table");
        for (sym::Expr s : sym::freeSymbols(d.derived))
          if (!entryOf(s))
            throw Error(ErrorCode::InvalidArgument,
                        what + ": derived from " + s.name() + ", which no entry declares");
      }
    }
    // One symbol for two sources (duck sizing) with two Dim names: the trace made them equal.
    for (const DimSpec& a : spec_)
      for (const DimSpec& b : spec_)
        if (&a < &b && a.symbol == b.symbol && a.dim != b.dim) equal(a, b);
  }

  const DimSpec* entryOf(sym::Expr symbol) const {
    for (const DimSpec& d : spec_)
      if (d.symbol == symbol) return &d;
    return nullptr;
  }

  static sym::Range userRange(const DimSpec& d) {
    return {std::max(d.range.lo, kMinDynamicSize), d.range.hi};
  }

  // What the user declared, as a table of its own: each Dim's symbol in the
  // Dim's range (others as the trace knows them), plus the equalities that
  // shared Dims and derived Dims declare.
  void buildUserWorld() {
    for (sym::Expr s : table_.symbols()) {
      sym::Range r = sym::range(s);
      for (const DimSpec& d : spec_)
        if (d.symbol == s && d.derived.isNull()) r = userRange(d);
      user_.declare(s.name(), std::nullopt, r);
      if (!names_.lookup(printedName(s)))
        names_.declare(printedName(s), std::nullopt, sym::Range::unbounded());
    }
    std::map<std::string, sym::Expr> firstOfDim;
    for (const DimSpec& d : spec_) {
      sym::Expr mine = detail::translate(d.symbol, user_);
      auto [it, fresh] = firstOfDim.emplace(d.dim, mine);
      if (!fresh && it->second != mine) facts_.push_back(sym::eq(mine, it->second));
      if (!d.derived.isNull()) facts_.push_back(sym::eq(mine, detail::translate(d.derived, user_)));
    }
  }

  std::string printedName(sym::Expr s) const {
    if (const DimSpec* d = entryOf(s)) return d->dim;
    for (const DimSpec& d : spec_)
      if (d.dim == s.name()) return s.name() + "_"; // a trace symbol named like a Dim
    return s.name();
  }

  std::string text(sym::Expr e) {
    return sym::toString(
        detail::translate(e, names_, [this](sym::Expr s) { return printedName(s); }));
  }

  std::string who(sym::Expr symbol) const { // "x.size(0) (batch)"
    const DimSpec* d = entryOf(symbol);
    return d ? fmt::format("{} ({})", d->source, d->dim) : symbol.name();
  }

  bool mentionsDim(sym::Expr e) const {
    for (sym::Expr s : sym::freeSymbols(e))
      if (entryOf(s)) return true;
    return false;
  }

  std::vector<std::string> dimsOf(sym::Expr e) const {
    std::vector<std::string> out;
    for (sym::Expr s : sym::freeSymbols(e))
      if (const DimSpec* d = entryOf(s);
          d && std::find(out.begin(), out.end(), d->dim) == out.end())
        out.push_back(d->dim);
    return out;
  }

  std::vector<std::string> allDims() const {
    std::vector<std::string> out;
    for (const DimSpec& d : spec_)
      if (std::find(out.begin(), out.end(), d.dim) == out.end()) out.push_back(d.dim);
    return out;
  }

  // Whether every input the user declared satisfies `claim` (unknown counts as no).
  bool declared(sym::Expr claim) {
    try {
      return decide(detail::translate(claim, user_), facts_, options_).answer == Answer::True;
    } catch (const Error&) { // the declared facts contradict each other: nothing is shown
      return false;
    }
  }

  void assumeFixed(sym::Expr fact) { facts_.push_back(detail::translate(fact, user_)); }

  void add(ViolationKind kind, std::vector<std::string> dims, std::string message,
           std::string fix) {
    report_.violations.push_back({kind, std::move(dims), std::move(message), std::move(fix)});
  }

  void equal(const DimSpec& a, const DimSpec& b) {
    add(ViolationKind::Equal, {a.dim, b.dim},
        fmt::format("{} ({}) and {} ({}) must be equal: the traced code needs {} == {}", a.source,
                    a.dim, b.source, b.dim, a.dim, b.dim),
        fmt::format("{} = {}", b.dim, a.dim));
  }

  void staticDim(sym::Expr x, int64_t value) {
    const DimSpec* d = entryOf(x);
    add(ViolationKind::Static, {d->dim},
        fmt::format("{} was specialized to {}: the traced code is valid only for {} == {}", who(x),
                    value, d->dim, value),
        fmt::format("{} = None  # static: {} is always {}", d->dim, d->source, value));
    reported_.insert(x);
  }

  void checkReplacement(const Replacement& r) {
    // An undeclared symbol (a stride, an unbacked size) equal to something: that
    // constrains only it, and its other guards were rewritten in terms of `expr`.
    const DimSpec* x = entryOf(r.symbol);
    if (!x || declared(sym::eq(r.symbol, r.expr))) return;
    if (auto v = r.expr.asInteger()) return staticDim(r.symbol, *v);
    reported_.insert(r.symbol);
    if (r.expr.isSymbol() && entryOf(r.expr)) {
      assumeFixed(sym::eq(r.symbol, r.expr));
      return equal(*entryOf(r.expr), *x);
    }
    if (!derivable(r.expr)) return runtimeAssert(sym::eq(r.symbol, r.expr));
    assumeFixed(sym::eq(r.symbol, r.expr));
    std::vector<std::string> dims = dimsOf(r.expr);
    dims.insert(dims.begin(), x->dim);
    add(ViolationKind::Derived, dims,
        fmt::format("{} is not independent: the traced code needs {} == {}", who(r.symbol), x->dim,
                    text(r.expr)),
        fmt::format("{} = {}", x->dim, text(r.expr)));
  }

  // Whether a Dim can be declared as `expr`: torch.export's derived Dims are
  // `a*root + b` of one root Dim.
  bool derivable(sym::Expr expr) const {
    const auto a = detail::affine(expr);
    return a && entryOf(a->symbol) && entryOf(a->symbol)->derived.isNull();
  }

  // A condition no Dim spelling expresses: checked when the program runs.
  void runtimeAssert(sym::Expr condition) {
    report_.asserts.push_back(
        {condition, dimsOf(condition), fmt::format("the traced code needs {}", text(condition))});
  }

  void checkRange(sym::Expr x, sym::Range r) {
    const DimSpec* d = entryOf(x);
    if (!d || reported_.count(x)) return;
    std::vector<sym::Expr> missing;
    if (r.lo != sym::kNegInf && !declared(sym::ge(x, r.lo))) missing.push_back(sym::ge(x, r.lo));
    if (r.hi != sym::kInf && !declared(sym::le(x, r.hi))) missing.push_back(sym::le(x, r.hi));
    if (missing.empty()) return;
    if (auto v = r.value()) return staticDim(x, *v);
    const sym::Range declaredRange = userRange(*d);
    const sym::Range suggested{std::max(declaredRange.lo, r.lo), std::min(declaredRange.hi, r.hi)};
    std::string needs;
    for (sym::Expr m : missing) needs += (needs.empty() ? "" : " and ") + text(m);
    std::string fix;
    if (d->derived.isNull() && suggested.lo <= suggested.hi) {
      fix = fmt::format("{} = Dim('{}'", d->dim, d->dim);
      if (suggested.lo > kMinDynamicSize) fix += fmt::format(", min={}", suggested.lo);
      if (suggested.hi != sym::kInf) fix += fmt::format(", max={}", suggested.hi);
      fix += ")";
    }
    add(ViolationKind::Range, {d->dim},
        fmt::format("not all values of {} in {} are valid: the traced code needs {}", who(x),
                    rangeText(d->derived.isNull() ? declaredRange : sym::range(x)), needs),
        fix);
  }

  void checkGuard(sym::Expr g) {
    if (!mentionsDim(g) || declared(g)) return;
    if (auto c = detail::congruenceOf(g);
        c && entryOf(c->symbol) && entryOf(c->symbol)->derived.isNull()) {
      const DimSpec* d = entryOf(c->symbol);
      std::string fix =
          fmt::format("_{} = Dim('_{}'); {} = {}*_{}", d->dim, d->dim, d->dim, c->modulus, d->dim);
      if (c->remainder != 0) fix += fmt::format(" + {}", c->remainder);
      assumeFixed(g);
      add(ViolationKind::Divisible, {d->dim},
          fmt::format("not all values of {} in {} are valid: the traced code needs {}",
                      who(c->symbol), rangeText(userRange(*d)), text(g)),
          fix);
      return;
    }
    runtimeAssert(g);
  }

  static std::string joined(const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  }

  sym::SymbolTable& table_;
  const std::vector<DimSpec>& spec_;
  const Options& options_;
  sym::SymbolTable user_;        // the inputs the user declared
  sym::SymbolTable names_;       // for printing in the user's names
  std::vector<sym::Expr> facts_; // of user_
  std::unordered_set<sym::Expr> reported_;
  ConstraintReport report_;
};

} // namespace

ConstraintReport checkConstraints(sym::SymbolTable& table, const std::vector<DimSpec>& spec,
                                  const std::vector<sym::Expr>& guards, const Options& options) {
  return Checker(table, spec, options).run(guards);
}

} // namespace kiln::shapes
