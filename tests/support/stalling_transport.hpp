#pragma once
// A transport that stops answering for a while: it holds its rank at its first send or receive for `seconds`,
// then passes everything on to the transport it wraps. What a stuck peer looks like to the others, injected
// where the stages talk (runtime::TrainerOptions::wrap_transport), not in the step.
#include <chrono>
#include <memory>
#include <thread>
#include <utility>

#include "support/forwarding_transport.hpp"

namespace kpipe::test {

class StallingTransport final : public ForwardingTransport {
 public:
  StallingTransport(std::unique_ptr<comm::Transport> inner, double seconds)
      : ForwardingTransport(std::move(inner)), seconds_(seconds) {}

  comm::Transfer send(const ExecSpace& space, const void* data, std::size_t bytes, int peer, int tag) override {
    stall_once();
    return ForwardingTransport::send(space, data, bytes, peer, tag);
  }
  comm::Transfer recv(const ExecSpace& space, void* data, std::size_t bytes, int peer, int tag) override {
    stall_once();
    return ForwardingTransport::recv(space, data, bytes, peer, tag);
  }

 private:
  void stall_once() {
    if (stalled_) return;
    stalled_ = true;
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds_));
  }

  double seconds_;
  bool stalled_ = false;
};

}  // namespace kpipe::test
