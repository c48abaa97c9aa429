// Internal to the reference interpreter: element access shared by its op files.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/dtype.h"
#include "kiln/ir/interpreter.h"

namespace kiln::ir::detail {

// Elements at an index of the output's rank; `t` is broadcast against it.
double loadElementF(const HostTensor& t, const std::vector<int64_t>& idx);
int64_t loadElementI(const HostTensor& t, const std::vector<int64_t>& idx);
void storeElementF(const HostTensor& t, const std::vector<int64_t>& idx, double v);
void storeElementI(const HostTensor& t, const std::vector<int64_t>& idx, int64_t v);
double castToF(DType t, double x);   // x as a `t` holds it
int64_t castToI(DType t, int64_t x); // likewise, wrapping
void eachIndex(const std::vector<int64_t>& sizes,
               const std::function<void(const std::vector<int64_t>&)>& fn);

// Compute `op` into `out` (already laid out as the node's result); false when
// `op` is not of the family. `mode` is div's rounding mode, gelu's
// approximation, or which of clamp's bounds are given ("min", "max", "minmax"). `inPlace`:
// `out` is self, computed in the operands' promoted dtype and cast to self's.
bool runPointwise(const std::string& op, const std::vector<const HostTensor*>& operands,
                  const std::vector<Operand>& kinds, double alpha, const std::string& mode,
                  bool inPlace, HostTensor& out);
// `dims` absent: every dim. `correction`: var's and std's.
bool runReduction(const std::string& op, const HostTensor& self,
                  const std::optional<std::vector<int64_t>>& dims, double correction,
                  HostTensor& out);

// Matrix products (mm bmm matmul addmm linear), index_select, gather,
// scatter_add, embedding, softmax, log_softmax, layer_norm, rms_norm,
// scaled_dot_product_attention, cross_entropy and dropout, with
// their arguments looked up by name (nullptr: an absent optional tensor; NaN:
// an absent number; a list: its length).
using TensorArg = std::function<const HostTensor*(std::string_view)>;
using NumberArg = std::function<double(std::string_view)>;
using StringArg = std::function<std::string(std::string_view)>;
bool runLinalg(const std::string& op, const TensorArg& tensor, const NumberArg& number,
               const StringArg& string, HostTensor& out);

// convolution (ops_conv.cpp): each output element summed over its window in double and
// rounded once, bias included.
void convolve(const HostTensor& input, const HostTensor& weight, const HostTensor* bias,
              const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
              const std::vector<int64_t>& dilation, int64_t groups, HostTensor& out);

} // namespace kiln::ir::detail
