#include "kiln/common/error.h"

#include <gtest/gtest.h>

using namespace kiln;

TEST(Error, SaysItsCodeServiceAndMessage) {
  const Error error(ErrorCode::Unavailable, "worker died", "codegen", "pid 12");
  EXPECT_STREQ(error.what(), "unavailable (codegen): worker died");
  EXPECT_EQ(error.detail(), "pid 12");
}

TEST(Error, FromNamesTheRaisingProcessOnce) {
  const Error plain(ErrorCode::Malformed, "bad bytes");
  EXPECT_EQ(plain.from("broker").service(), "broker");
  EXPECT_EQ(plain.from("broker").from("tracer").service(), "broker");
  EXPECT_EQ(plain.from("broker").code(), ErrorCode::Malformed);
}

TEST(Error, EveryCodeHasAName) {
  for (int code = 0; code <= static_cast<int>(ErrorCode::Cancelled); ++code)
    EXPECT_NE(errorCodeName(static_cast<ErrorCode>(code)), "unknown") << code;
}
