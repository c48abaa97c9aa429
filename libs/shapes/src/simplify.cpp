// Guard simplification: ranges, replacements and divisibility by rewriting
// (reduce), then guards implied by the others dropped by Z3.
#include "kiln/shapes/simplify.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "kiln/common/error.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "reduce.h"
#include "relation.h"
#include "solver.h"
#include "translate.h"

namespace kiln::shapes {
namespace detail {

namespace {

constexpr int kMaxRounds = 64; // each round narrows a range or removes a symbol; a backstop

std::optional<sym::Range> intersect(sym::Range a, sym::Range b) {
  sym::Range r{std::max(a.lo, b.lo), std::min(a.hi, b.hi)};
  if (r.lo > r.hi) return std::nullopt;
  return r;
}

// Rewrites the guards of a Reduced to a fixpoint.
class Reducer {
public:
  explicit Reducer(Reduced& out) : out_(out), table_(*out.table) {}

  void run(std::vector<sym::Expr> pending) {
    bool changed = true;
    for (int round = 0; changed && !out_.unsatisfiable && round < kMaxRounds; ++round) {
      changed = false;
      std::vector<sym::Expr> kept;
      for (sym::Expr g : pending) {
        if (out_.unsatisfiable) return;
        g = out_.substituted(g);
        if (consume(g, changed)) continue;
        if (std::find(kept.begin(), kept.end(), g) == kept.end()) kept.push_back(g);
      }
      pending = std::move(kept);
    }
    out_.guards = std::move(pending);
  }

private:
  void step(std::string line) { out_.steps.push_back(std::move(line)); }

  void contradiction(sym::Expr g, const std::string& why) {
    out_.unsatisfiable = true;
    step(fmt::format("{}: {}; no binding satisfies the guards", sym::toString(g), why));
  }

  // Narrows `symbol` to `range`; false (and unsatisfiable) when nothing is left.
  bool narrow(sym::Expr g, sym::Expr symbol, sym::Range range) {
    const sym::Range now = sym::range(symbol);
    auto r = intersect(now, range);
    if (!r) {
      contradiction(g, fmt::format("{} cannot also lie in {}", symbol.name(), sym::toString(now)));
      return false;
    }
    if (*r == now) return true;
    if (auto hint = table_.hint(symbol); hint && !r->contains(*hint))
      throw Error(ErrorCode::InvalidArgument, fmt::format("guard {} excludes the hint {} = {}",
                                                          sym::toString(g), symbol.name(), *hint));
    table_.narrow(symbol, *r);
    return true;
  }

  // Whether `g` was turned into a range, a replacement or nothing; false: keep it.
  bool consume(sym::Expr g, bool& changed) {
    if (auto b = g.asBoolean()) {
      if (!*b) contradiction(g, "false");
      return true;
    }
    if (auto known = sym::staticallyKnown(g)) {
      if (*known)
        step(fmt::format("{}: holds in the ranges, dropped", sym::toString(g)));
      else
        contradiction(g, "false in the ranges");
      return true;
    }
    if (auto b = boundOf(g)) {
      if (narrow(g, b->symbol, b->range)) {
        step(fmt::format("{}: range of {} is {}", sym::toString(g), b->symbol.name(),
                         sym::toString(sym::range(b->symbol))));
        changed = true;
      }
      return true;
    }
    auto rel = relationOf(g);
    if (rel && rel->kind == sym::Kind::Eq)
      if (auto solved = solveEquality(rel->difference)) return replace(g, *solved, changed);
    if (rel && rel->kind == sym::Kind::Ne)
      if (auto a = affine(rel->difference); a && rel->difference.kind() != sym::Kind::Symbol) {
        // c*x + k != 0 at an end of x's range moves that end.
        const sym::Range r = sym::range(a->symbol);
        for (int64_t end : {r.lo, r.hi}) {
          if (end == sym::kNegInf || end == sym::kInf) continue;
          __int128 v = static_cast<__int128>(a->coeff) * end + a->constant;
          if (v != 0) continue;
          sym::Range moved = end == r.lo ? sym::Range{r.lo + 1, r.hi} : sym::Range{r.lo, r.hi - 1};
          if (narrow(g, a->symbol, moved)) {
            step(fmt::format("{}: range of {} is {}", sym::toString(g), a->symbol.name(),
                             sym::toString(sym::range(a->symbol))));
            changed = true;
          }
          return true;
        }
      }
    if (auto c = congruenceOf(g)) { // kept, and its symbol's range ends moved onto multiples
      const sym::Range now = sym::range(c->symbol);
      const sym::Range tight = tighten(now, *c);
      if (tight != now) {
        if (tight.lo > tight.hi) {
          contradiction(g, fmt::format("no value of {} in {} satisfies it", c->symbol.name(),
                                       sym::toString(now)));
          return true;
        }
        if (narrow(g, c->symbol, tight)) {
          step(fmt::format("{}: range of {} is {}", sym::toString(g), c->symbol.name(),
                           sym::toString(tight)));
          changed = true;
        }
      }
    }
    return false;
  }

  bool replace(sym::Expr g, const Solved& s, bool& changed) {
    // x == e: x lies in range(e), and what x's range says of e narrows e's symbol
    // when e is one symbol's affine function.
    if (!narrow(g, s.symbol, sym::range(s.expr))) return true;
    const sym::Range rx = sym::range(s.symbol);
    for (sym::Expr side : {rx.lo != sym::kNegInf ? sym::ge(s.expr, rx.lo) : sym::Expr(),
                           rx.hi != sym::kInf ? sym::le(s.expr, rx.hi) : sym::Expr()}) {
      if (side.isNull()) continue;
      if (auto b = boundOf(side))
        if (!narrow(g, b->symbol, b->range)) return true;
    }
    for (Replacement& r : out_.replacements) r.expr = sym::substitute(r.expr, {{s.symbol, s.expr}});
    out_.replacements.push_back({s.symbol, s.expr});
    step(fmt::format("{}: {} := {}", sym::toString(g), s.symbol.name(), sym::toString(s.expr)));
    changed = true;
    return true;
  }

  Reduced& out_;
  sym::SymbolTable& table_;
};

void split(sym::Expr g, std::vector<sym::Expr>& out) { // a conjunction into its arguments
  if (g.kind() != sym::Kind::And) return out.push_back(g);
  for (const sym::Term& t : g.terms()) split(t.expr, out);
}

} // namespace

void requireBoolean(const sym::SymbolTable& table, sym::Expr e, const std::string& what) {
  if (e.isNull()) throw Error(ErrorCode::InvalidArgument, what + " is missing");
  if (&e.table() != &table)
    throw Error(ErrorCode::InvalidArgument, what + " belongs to another symbol table");
  if (!e.isBool())
    throw Error(ErrorCode::InvalidArgument, what + " is not boolean: " + sym::toString(e));
}

sym::Expr Reduced::substituted(sym::Expr e) const {
  if (replacements.empty()) return e;
  sym::Substitution map;
  for (const Replacement& r : replacements) map.emplace(r.symbol, r.expr);
  return sym::substitute(e, map);
}

std::vector<sym::Expr> Reduced::replacedRanges() const {
  std::vector<sym::Expr> out;
  for (const Replacement& r : replacements) {
    const sym::Range rx = sym::range(r.symbol), re = sym::range(r.expr);
    if (rx.lo != sym::kNegInf && re.lo < rx.lo) out.push_back(sym::ge(r.expr, rx.lo));
    if (rx.hi != sym::kInf && re.hi > rx.hi) out.push_back(sym::le(r.expr, rx.hi));
  }
  return out;
}

Reduced reduce(const sym::SymbolTable& table, const std::vector<sym::Expr>& guards, bool hints) {
  Reduced out;
  out.table = std::make_unique<sym::SymbolTable>();
  copySymbols(table, *out.table, hints);
  std::vector<sym::Expr> pending;
  for (sym::Expr g : guards) split(translate(g, *out.table), pending);
  Reducer(out).run(std::move(pending));
  return out;
}

} // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

// False at the hints is a broken input: the trace took the other branch.
void requireTrueAtHints(sym::Expr g) {
  for (sym::Expr s : sym::freeSymbols(g))
    if (!g.table().isBacked(s)) return;
  int64_t value = 1;
  try {
    value = sym::evaluateWithHints(g);
  } catch (const Error&) { // undefined at the hints (a division by zero): not ours to judge
    return;
  }
  if (value == 0)
    throw Error(ErrorCode::InvalidArgument,
                "guard " + sym::toString(g) + " is false at the symbols' hints");
}

} // namespace

Simplified simplify(sym::SymbolTable& table, const std::vector<sym::Expr>& guards,
                    const Options& options) {
  for (size_t i = 0; i < guards.size(); ++i) {
    detail::requireBoolean(table, guards[i], "guard " + std::to_string(i));
    requireTrueAtHints(guards[i]);
  }
  detail::Reduced reduced = detail::reduce(table, guards);
  Simplified out;
  out.steps = std::move(reduced.steps);
  if (reduced.unsatisfiable) {
    out.unsatisfiable = true;
    out.guards = {table.boolean(false)};
    out.checks = out.guards;
    for (sym::Expr s : table.symbols()) out.ranges.emplace_back(s, sym::range(s));
    return out;
  }

  // Guards the others imply, under the ranges and the replaced symbols' ranges.
  std::vector<sym::Expr> kept = reduced.guards;
  const std::vector<sym::Expr> base = reduced.replacedRanges();
  detail::Solver solver(options.timeoutMs);
  const auto deadline = Clock::now() + std::chrono::milliseconds(options.budgetMs);
  for (size_t i = 0; i < kept.size();) {
    if (Clock::now() >= deadline) {
      out.steps.push_back(
          fmt::format("z3 budget of {} ms spent; the other guards are kept", options.budgetMs));
      break;
    }
    std::vector<sym::Expr> premises = base;
    for (size_t j = 0; j < kept.size(); ++j)
      if (j != i) premises.push_back(kept[j]);
    if (solver.implies(premises, kept[i]) == detail::Proof::Proved) {
      out.steps.push_back(
          fmt::format("{}: follows from the other guards (z3), dropped", sym::toString(kept[i])));
      kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }

  // Back into the caller's table.
  for (sym::Expr g : kept) {
    sym::Expr mine = detail::translate(g, table);
    if (mine.asBoolean() == std::optional<bool>(true)) continue;
    if (std::find(out.guards.begin(), out.guards.end(), mine) == out.guards.end())
      out.guards.push_back(mine);
  }
  for (const Replacement& r : reduced.replacements) {
    out.replacements.push_back(
        {detail::translate(r.symbol, table), detail::translate(r.expr, table)});
    out.checks.push_back(sym::eq(out.replacements.back().symbol, out.replacements.back().expr));
  }
  for (sym::Expr s : table.symbols()) {
    sym::Expr w = *reduced.table->lookup(s.name());
    const sym::Range r = sym::range(w), given = sym::range(s);
    out.ranges.emplace_back(s, r);
    // A replaced symbol's bound is checked where its expression's range does not show it.
    sym::Range shown = sym::Range::unbounded();
    for (const Replacement& rep : reduced.replacements)
      if (rep.symbol == w) shown = sym::range(rep.expr);
    if (r.lo == r.hi && r != given && !(shown.lo == r.lo && shown.hi == r.hi)) {
      out.checks.push_back(sym::eq(s, r.lo));
      continue;
    }
    if (r.lo > given.lo && shown.lo < r.lo) out.checks.push_back(sym::ge(s, r.lo));
    if (r.hi < given.hi && shown.hi > r.hi) out.checks.push_back(sym::le(s, r.hi));
  }
  for (sym::Expr g : out.guards) out.checks.push_back(g);
  return out;
}

} // namespace kiln::shapes
