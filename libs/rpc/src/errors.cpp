#include "kiln/rpc/errors.h"

namespace kiln::rpc {

static constexpr int kLastErrorCode = static_cast<int>(ErrorCode::Cancelled);

void toWire(const Error& error, schema::Error::Builder out) {
  out.setCode(static_cast<schema::ErrorCode>(error.code()));
  out.setMessage(error.message());
  out.setService(error.service());
  out.setDetail(error.detail());
}

Error fromWire(schema::Error::Reader in) {
  const int raw = static_cast<int>(in.getCode());
  // A peer built from a newer schema may send a code we do not know.
  const auto code = raw <= kLastErrorCode ? static_cast<ErrorCode>(raw) : ErrorCode::Internal;
  return Error(code, in.getMessage(), in.getService(), in.getDetail());
}

} // namespace kiln::rpc
