#include "kiln/common/error.h"

#include <cerrno>
#include <cstring>

namespace kiln {

std::string_view errorCodeName(ErrorCode code) {
  switch (code) {
  case ErrorCode::Internal: return "internal";
  case ErrorCode::InvalidArgument: return "invalid_argument";
  case ErrorCode::Malformed: return "malformed";
  case ErrorCode::TooLarge: return "too_large";
  case ErrorCode::UnknownService: return "unknown_service";
  case ErrorCode::Unavailable: return "unavailable";
  case ErrorCode::DeadlineExceeded: return "deadline_exceeded";
  case ErrorCode::NotFound: return "not_found";
  case ErrorCode::AlreadyExists: return "already_exists";
  case ErrorCode::Unsupported: return "unsupported";
  case ErrorCode::ResourceExhausted: return "resource_exhausted";
  case ErrorCode::Io: return "io";
  case ErrorCode::Cancelled: return "cancelled";
  }
  return "unknown";
}

static std::string describe(ErrorCode code, const std::string& message,
                            const std::string& service) {
  std::string text(errorCodeName(code));
  if (!service.empty()) text += " (" + service + ")";
  return text + ": " + message;
}

Error::Error(ErrorCode code, std::string message, std::string service, std::string detail)
    : std::runtime_error(describe(code, message, service)), code_(code),
      message_(std::move(message)), service_(std::move(service)), detail_(std::move(detail)) {}

Error Error::from(std::string service) const {
  if (!service_.empty()) return *this;
  return Error(code_, message_, std::move(service), detail_);
}

void throwSystemError(const std::string& what) {
  throw Error(ErrorCode::Io, what + ": " + std::strerror(errno));
}

} // namespace kiln
