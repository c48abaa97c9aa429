// Deciding a boolean over unbacked symbols: ranges (narrowed by the facts), then Z3.
#include "kiln/shapes/decide.h"

#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"
#include "reduce.h"
#include "solver.h"
#include "translate.h"

namespace kiln::shapes {

Decision decide(sym::Expr question, const std::vector<sym::Expr>& facts, const Options& options) {
  if (question.isNull()) throw Error(ErrorCode::InvalidArgument, "the question is missing");
  sym::SymbolTable& table = question.table();
  detail::requireBoolean(table, question, "the question");
  for (size_t i = 0; i < facts.size(); ++i)
    detail::requireBoolean(table, facts[i], "fact " + std::to_string(i));
  auto answer = [](bool value, const char* how) {
    return Decision{value ? Answer::True : Answer::False, how};
  };

  if (auto known = sym::staticallyKnown(question)) return answer(*known, "ranges");
  detail::Reduced reduced = detail::reduce(table, facts, /*hints=*/false);
  if (reduced.unsatisfiable)
    throw Error(ErrorCode::InvalidArgument,
                "the facts contradict each other: " + reduced.steps.back());
  sym::Expr q = reduced.substituted(detail::translate(question, *reduced.table));
  if (auto b = q.asBoolean()) return answer(*b, "ranges");
  if (auto known = sym::staticallyKnown(q)) return answer(*known, "ranges");

  std::vector<sym::Expr> premises = reduced.replacedRanges();
  premises.insert(premises.end(), reduced.guards.begin(), reduced.guards.end());
  detail::Solver solver(options.timeoutMs);
  const detail::Proof yes = solver.implies(premises, q, /*claimDefined=*/true);
  std::string reason = solver.lastReason();
  const detail::Proof no = solver.implies(premises, sym::logicalNot(q), /*claimDefined=*/true);
  if (reason.empty()) reason = solver.lastReason();
  if (yes == detail::Proof::Proved && no == detail::Proof::Proved)
    throw Error(ErrorCode::InvalidArgument, "the facts contradict each other (z3)");
  if (yes == detail::Proof::Proved) return answer(true, "z3");
  if (no == detail::Proof::Proved) return answer(false, "z3");
  if (yes == detail::Proof::Refuted && no == detail::Proof::Refuted)
    return {Answer::Unknown, "depends on the values"};
  return {Answer::Unknown, "z3: " + (reason.empty() ? std::string("unknown") : reason)};
}

} // namespace kiln::shapes
