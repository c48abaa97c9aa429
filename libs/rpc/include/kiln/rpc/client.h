// Client: sends requests to named services through the broker and waits for
// the reply. One Client per thread (it owns a ZeroMQ socket).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "kiln/common/clock.h"
#include "kiln/rpc/message.h"

namespace kiln::rpc {

class Client {
public:
  // endpoint: the broker's client endpoint, e.g. ipc:///run/dir/broker.ipc
  explicit Client(std::string endpoint, Limits limits = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends `request` to `service` and returns the reply body. Throws Error with
  // the code the broker or service answered, or Error{deadline_exceeded} when
  // nothing came back in time (the broker adds no time of its own).
  std::unique_ptr<Message> call(std::string_view service, capnp::MessageBuilder& request,
                                Millis timeout = Millis(30000));

  const std::string& endpoint() const { return endpoint_; }

private:
  std::string endpoint_;
  Limits limits_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  uint64_t nextRequestId_;
};

} // namespace kiln::rpc
