// The reference interpreter's convolution: each output element summed over its window,
// one element at a time, in double.
#include "convolution.h"
#include "interpreter_ops.h"
#include "kiln/common/error.h"

namespace kiln::ir::detail {

void convolve(const HostTensor& input, const HostTensor& weight, const HostTensor* bias,
              const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
              const std::vector<int64_t>& dilation, int64_t groups, HostTensor& out) {
  size_t spatial = input.sizes.size() - 2;
  ConvGeometry geo =
      ConvGeometry::of(spatial, stride, padding, dilation, groups,
                       [](const char* arg, const std::string& m) {
                         throw Error(ErrorCode::InvalidArgument,
                                     "interpret: convolution: " + std::string(arg) + ": " + m);
                       });
  int64_t perGroupIn = weight.sizes[1], perGroupOut = weight.sizes[0] / groups;
  std::vector<int64_t> kernel(weight.sizes.begin() + 2, weight.sizes.end());
  std::vector<int64_t> x(input.sizes.size()), w(weight.sizes.size());
  eachIndex(out.sizes, [&](const std::vector<int64_t>& idx) {
    int64_t group = idx[1] / perGroupOut;
    x[0] = idx[0];
    w[0] = idx[1];
    double sum = 0;
    for (int64_t c = 0; c < perGroupIn; ++c) {
      x[1] = group * perGroupIn + c;
      w[1] = c;
      eachIndex(kernel, [&](const std::vector<int64_t>& k) {
        for (size_t i = 0; i < spatial; ++i) {
          int64_t at = idx[2 + i] * geo.stride[i] - geo.padding[i] + k[i] * geo.dilation[i];
          if (at < 0 || at >= input.sizes[2 + i]) return; // a padding zero
          x[2 + i] = at;
          w[2 + i] = k[i];
        }
        sum += loadElementF(input, x) * loadElementF(weight, w);
      });
    }
    if (bias) sum += loadElementF(*bias, {idx[1]});
    storeElementF(out, idx, sum);
  });
}

} // namespace kiln::ir::detail
