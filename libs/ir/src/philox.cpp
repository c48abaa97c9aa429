// Compiles the one definition of the draw (philox_fn.h) and hands out its text.
#include "kiln/ir/philox.h"

#include "philox_source.h"

namespace kiln::ir {
namespace {
#define KILN_SYM_FN static inline
#include "philox_fn.h"
#undef KILN_SYM_FN
} // namespace

double philoxUniform(uint64_t seed, uint64_t counter) {
  return kiln_philox_uniform(seed, counter);
}

const std::string& philoxCppSource() {
  static const std::string source = kPhiloxSource;
  return source;
}

} // namespace kiln::ir
