// The counter-based random stream of `dropout` (docs/ir.md): Philox-4x32-10.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::ir {

// The uniform draw in [0, 1) of element `counter` of the stream `seed`.
double philoxUniform(uint64_t seed, uint64_t counter);

// The same function as C++ source, `kiln_philox_uniform(uint64_t seed, uint64_t counter)`,
// for kernels' preludes: host and device code (KILN_SYM_FN, from sym::cppPrelude(),
// must be defined before it).
const std::string& philoxCppSource();

} // namespace kiln::ir
