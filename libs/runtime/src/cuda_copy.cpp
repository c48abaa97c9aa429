#include "cuda_copy.h"

#include <algorithm>

#include "kiln/common/error.h"

namespace kiln::runtime::detail {
namespace {

// `height` rows of `width` elements, each `srcPitch` / `dstPitch` elements apart.
struct Copy2d {
  const CudaDriver& driver;
  CUstream stream;
  size_t e;
  void operator()(const char* src, int64_t srcPitch, char* dst, int64_t dstPitch, int64_t width,
                  int64_t height) const {
    if (width <= 0 || height <= 0) return;
    CUDA_MEMCPY2D c{};
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = reinterpret_cast<CUdeviceptr>(src);
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = reinterpret_cast<CUdeviceptr>(dst);
    c.WidthInBytes = static_cast<size_t>(width) * e;
    c.srcPitch = height == 1 ? c.WidthInBytes : static_cast<size_t>(srcPitch) * e;
    c.dstPitch = height == 1 ? c.WidthInBytes : static_cast<size_t>(dstPitch) * e;
    c.Height = static_cast<size_t>(height);
    cudaCheck(driver.cuMemcpy2DAsync(&c, stream), "cuMemcpy2DAsync");
  }
};

} // namespace

void copyMatrix(const CudaDriver& driver, CUstream stream, const void* srcData, MatrixLayout s,
                void* dstData, MatrixLayout d, size_t e) {
  if (d.rows == 0 || d.cols == 0) return;
  auto* src = static_cast<const char*>(srcData);
  auto* dst = static_cast<char*>(dstData);
  Copy2d copy{driver, stream, e};
  auto at = [&](const char* base, int64_t elements) {
    return const_cast<char*>(base + elements * static_cast<int64_t>(e));
  };
  bool unitCols = d.colStride == 1 || d.cols == 1, unitRows = d.rowStride == 1 || d.rows == 1;
  if (!unitCols && !unitRows) { // element by element, one copy per row or column (the fewer)
    if ((s.rowStride == 0 && d.rows > 1) || (s.colStride == 0 && d.cols > 1))
      throw Error(ErrorCode::Internal,
                  "runtime: a broadcast device copy into a matrix with no unit stride");
    if (d.rows <= d.cols)
      for (int64_t i = 0; i < d.rows; ++i)
        copy(at(src, i * s.rowStride), s.colStride, at(dst, i * d.rowStride), d.colStride, 1,
             d.cols);
    else
      for (int64_t j = 0; j < d.cols; ++j)
        copy(at(src, j * s.colStride), s.rowStride, at(dst, j * d.colStride), d.rowStride, 1,
             d.rows);
    return;
  }
  if (!unitCols) s = s.transposed(), d = d.transposed(); // make dst's rows the contiguous dim
  int64_t rows = d.rows, cols = d.cols;
  if (rows > 1 && d.rowStride < cols)
    throw Error(ErrorCode::Internal, "runtime: a device copy into overlapping rows");
  int64_t pitch = d.rowStride;
  // The block that is not broadcast, then doubled along broadcast dims.
  int64_t r = s.rowStride == 0 ? 1 : rows, c = s.colStride == 0 ? 1 : cols;
  if ((c == 1 || s.colStride == 1) && (r == 1 || s.rowStride >= c)) {
    copy(src, s.rowStride, dst, pitch, c, r);
  } else if (r <= c) { // each row's elements are strided: one copy per row
    for (int64_t i = 0; i < r; ++i)
      copy(at(src, i * s.rowStride), s.colStride, at(dst, i * pitch), 1, 1, c);
  } else { // one copy per column
    for (int64_t j = 0; j < c; ++j)
      copy(at(src, j * s.colStride), s.rowStride, at(dst, j), pitch, 1, r);
  }
  for (int64_t done = c; done < cols; done *= 2) // double the columns copied
    copy(dst, pitch, at(dst, done), pitch, std::min(done, cols - done), r);
  for (int64_t done = r; done < rows; done *= 2) // double the rows copied
    copy(dst, pitch, at(dst, done * pitch), pitch, cols, std::min(done, rows - done));
}

} // namespace kiln::runtime::detail
