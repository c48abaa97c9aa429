// The CUDA libraries kiln builds against, checked wherever they are installed (no
// GPU needed), so that a GPU run never finds a missing library or symbol first:
// cuDNN loads with every function the runtime calls, at its headers' major
// version, and NCCL links and reports the version of its headers.
#include <gtest/gtest.h>
#include <nccl.h>

#include "cudnn.h"

namespace kiln::runtime::detail {
namespace {

TEST(CudaLibraries, CudnnLoadsWithEveryFunctionTheRuntimeCalls) {
  const Cudnn* functions = cudnn();
  ASSERT_NE(functions, nullptr) << cudnnUnavailableWhy();
  EXPECT_EQ(functions->cudnnGetVersion() / 10000, static_cast<size_t>(CUDNN_MAJOR));
}

TEST(CudaLibraries, NcclLinksAtItsHeadersVersion) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, NCCL_VERSION_CODE);
}

} // namespace
} // namespace kiln::runtime::detail
