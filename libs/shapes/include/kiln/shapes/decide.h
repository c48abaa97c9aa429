// kiln::shapes::decide: a question about symbols (typically unbacked ones,
// which have no hint to take a branch with) answered true, false or unknown.
#pragma once

#include <string>
#include <vector>

#include "kiln/shapes/simplify.h"
#include "kiln/sym/expr.h"

namespace kiln::shapes {

enum class Answer { Unknown, True, False };

std::string_view answerName(Answer answer); // "unknown", "true", "false"

struct Decision {
  Answer answer = Answer::Unknown;
  // How it was decided: "ranges" (the symbols' ranges narrowed by the facts'
  // bounds and equalities), "z3", or why not: "z3: timeout", "z3: <its reason>",
  // "depends on the values" (Z3 found bindings either way).
  std::string how;
};

// Whether `question` (boolean) holds for every binding of its symbols within
// their ranges that satisfies `facts` (True), for none (False), or neither /
// not known in time (Unknown). Cheap range reasoning first, then Z3 with
// `options.timeoutMs` per query. Symbolic divisors in the question are assumed
// non-zero (as libs/sym does). Error{InvalidArgument} for a question or fact
// that is not boolean or belongs to another table, and for facts that
// contradict each other. The tracer asks it in-process about unbacked symbols
// (TraceState::decide, deferAssert in libs/tracer/src/torch_calls.cpp), with the
// trace's facts: a mid-trace question must not wait on a round trip.
Decision decide(sym::Expr question, const std::vector<sym::Expr>& facts = {},
                const Options& options = {});

} // namespace kiln::shapes
