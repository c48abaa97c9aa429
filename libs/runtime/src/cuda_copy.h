// Internal to libs/runtime: strided matrix copies in device memory with
// cuMemcpy2DAsync (no kernel of our own to compile): what extern calls need to
// make an operand dense or to broadcast a bias into a result.
#pragma once

#include <cstddef>

#include "kiln/runtime/cuda_driver.h"
#include "matrix_product.h"

namespace kiln::runtime::detail {

// Copies the rows x cols matrix `src` (a stride of 0 broadcasts that dim) into
// `dst`, whose elements do not overlap; elements of `elementSize` bytes,
// queued on `stream`. One copy when both share a contiguous dim, else one per
// row or column (the fewer); a broadcast dim is filled by doubling what is
// already copied. Error{Internal} for a broadcast into a `dst` with no unit
// stride (copy into a dense temporary first).
void copyMatrix(const CudaDriver& driver, CUstream stream, const void* src, MatrixLayout srcLayout,
                void* dst, MatrixLayout dstLayout, size_t elementSize);

} // namespace kiln::runtime::detail
