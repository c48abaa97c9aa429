// kiln::Error: the one exception type of the project. Libraries throw it; every
// process boundary (RPC handler, pybind11 entry, main) catches it and turns it
// into an Error reply, a Python exception or an exit status with a message.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace kiln {

// Mirrors schema::ErrorCode (schemas/common.capnp); keep the two in step.
enum class ErrorCode {
  Internal = 0,
  InvalidArgument = 1,
  Malformed = 2,
  TooLarge = 3,
  UnknownService = 4,
  Unavailable = 5,
  DeadlineExceeded = 6,
  NotFound = 7,
  AlreadyExists = 8,
  Unsupported = 9,
  ResourceExhausted = 10,
  Io = 11,
  Cancelled = 12,
};

std::string_view errorCodeName(ErrorCode code);

class Error : public std::runtime_error {
public:
  Error(ErrorCode code, std::string message, std::string service = {}, std::string detail = {});

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& service() const { return service_; }
  const std::string& detail() const { return detail_; }

  // Returns a copy naming the process that raised it, unless one is named already.
  Error from(std::string service) const;

private:
  ErrorCode code_;
  std::string message_;
  std::string service_;
  std::string detail_;
};

// errno-based failure of a system call, as Error{io}: "what: strerror(errno)".
[[noreturn]] void throwSystemError(const std::string& what);

} // namespace kiln
