// Z3 behind a small interface: does a set of premises imply a claim?
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/sym/expr.h"

namespace z3 {
class solver;
}

namespace kiln::shapes::detail {

enum class Proof { Proved, Refuted, Unknown };

// Integers are mathematical integers (no int64 wrap-around); `//` and `%` keep
// floor semantics. Every symbol an expression mentions is assumed to lie in its
// table's range. A boolean expression holds where it is defined and true: a
// premise `a // b == c` also says b != 0, and a claim with a division is proved
// only where its divisors are non-zero. Each check runs on a fresh Z3 solver
// limited to `timeoutMs`.
class Solver {
public:
  explicit Solver(unsigned timeoutMs);
  ~Solver();
  Solver(const Solver&) = delete;
  Solver& operator=(const Solver&) = delete;

  // Proved: premises => claim; Refuted: some binding satisfies the premises and
  // not the claim; Unknown: Z3 gave up (timeout, nonlinear arithmetic). With
  // `claimDefined`, the claim's divisors are assumed non-zero (a premise).
  Proof implies(const std::vector<sym::Expr>& premises, sym::Expr claim, bool claimDefined = false);
  // Whether the premises can hold at all (Refuted: they cannot).
  Proof satisfiable(const std::vector<sym::Expr>& premises);

  const std::string& lastReason() const { return reason_; } // Z3's word on the last Unknown
  void setTimeout(unsigned timeoutMs) { timeoutMs_ = timeoutMs; }

private:
  struct Impl;
  // Checks premises (+ what `more` adds); Proved when Z3 answers `proved`.
  Proof run(const std::vector<sym::Expr>& premises, const std::function<void(z3::solver&)>& more,
            int proved);
  std::unique_ptr<Impl> impl_;
  unsigned timeoutMs_;
  std::string reason_;
};

} // namespace kiln::shapes::detail
