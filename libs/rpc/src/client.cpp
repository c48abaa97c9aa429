#include "kiln/rpc/client.h"

#include <random>
#include <vector>

#include <fmt/format.h>

#include "kiln/rpc/errors.h"
#include "kiln/schema/broker.capnp.h"

namespace kiln::rpc {

// The broker answers at the deadline itself; this covers the trip back.
static constexpr Millis kReplyGrace{500};
// The envelope is a few words: a small first segment spares allocating and zeroing
// Cap'n Proto's default one (8 KiB) on every call.
static constexpr unsigned kHeaderWords = 64;

static zmq::socket_t connectDealer(zmq::context_t& context, const std::string& endpoint) {
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.connect(endpoint);
  return socket;
}

Client::Client(std::string endpoint, Limits limits)
    : endpoint_(std::move(endpoint)), limits_(limits), context_(1),
      socket_(connectDealer(context_, endpoint_)),
      nextRequestId_(std::random_device{}() | (uint64_t{std::random_device{}()} << 32)) {}

Client::~Client() = default;

std::unique_ptr<Message> Client::call(std::string_view service, capnp::MessageBuilder& request,
                                      Millis timeout) {
  if (timeout.count() <= 0)
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("timeout must be positive, got {} ms", timeout.count()));
  const uint64_t requestId = nextRequestId_++;
  capnp::MallocMessageBuilder envelope(kHeaderWords);
  auto header = envelope.initRoot<schema::Envelope>();
  header.setService(kj::StringPtr(std::string(service).c_str()));
  header.setRequestId(requestId);
  header.setTimeoutMs(static_cast<uint32_t>(std::min<int64_t>(timeout.count(), UINT32_MAX)));
  header.setAttempt(1);
  socket_.send(toFrame(envelope), zmq::send_flags::sndmore);
  socket_.send(toFrame(request), zmq::send_flags::none);

  const auto deadline = Clock::now() + timeout + kReplyGrace;
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (left.count() <= 0 || zmq::poll(&item, 1, left) == 0) {
      // Lazy Pirate: drop the socket so a late reply cannot confuse the next call.
      socket_ = connectDealer(context_, endpoint_);
      throw Error(ErrorCode::DeadlineExceeded,
                  fmt::format("no reply from service '{}' through {} within {} ms", service,
                              endpoint_, timeout.count()));
    }
    std::vector<zmq::message_t> frames;
    frames.reserve(2); // header, body
    (void)zmq::recv_multipart(socket_, std::back_inserter(frames));
    if (frames.empty()) continue;
    Message head(std::move(frames[0]), limits_);
    auto reply = decoding([&] { return head.root<schema::ReplyHeader>(); });
    if (decoding([&] { return reply.getRequestId(); }) != requestId) continue; // stale reply
    if (decoding([&] { return reply.isError(); }))
      throw decoding([&] { return fromWire(reply.getError()); });
    if (frames.size() < 2)
      throw Error(ErrorCode::Malformed, "reply without a body frame", std::string(service));
    return std::make_unique<Message>(std::move(frames[1]), limits_);
  }
}

} // namespace kiln::rpc
