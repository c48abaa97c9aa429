// The geometry of a convolution (ops_conv.cpp), shared by its inference, decomposition
// and reference interpreter.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::ir::detail {

struct ConvGeometry {
  std::vector<int64_t> stride, padding, dilation; // one per spatial dim
  int64_t groups = 1;

  // The op's attributes, each of one value or one per spatial dim; `fail(arg, message)`
  // for a wrong count or a value out of range.
  static ConvGeometry of(size_t spatial, const std::vector<int64_t>& stride,
                         const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                         int64_t groups,
                         const std::function<void(const char*, const std::string&)>& fail);

  // The output size of spatial dim i: (in + 2 pad - dilation (kernel - 1) - 1) // stride + 1.
  sym::Expr outputSize(size_t i, sym::Expr in, int64_t kernel) const;
};

// Whether torch suggests channels last for this tensor (4-d or 5-d, strides known).
bool channelsLastLike(const TensorMeta& t);

// Whether a convolution's result is channels last: where the input or the weight is, as
// torch's cuDNN and 2-d CPU kernels give it; a 3-d convolution's on the CPU is contiguous,
// as torch's f32 and f64 kernels give it.
bool channelsLastResult(const TensorMeta& input, const TensorMeta& weight);

} // namespace kiln::ir::detail
