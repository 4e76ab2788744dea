#pragma once
// A transport that stops answering for a while: it holds its rank at its first send or receive for `seconds`,
// then passes everything on to the transport it wraps. What a stuck peer looks like to the others, injected
// where the stages talk (runtime::StageModel::wrap_transport), not in the step.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "kpipe/comm/transport.hpp"

namespace kpipe::test {

class StallingTransport final : public comm::Transport {
 public:
  StallingTransport(std::unique_ptr<comm::Transport> inner, double seconds)
      : inner_(std::move(inner)), seconds_(seconds) {}

  const char* name() const override { return inner_->name(); }
  bool stream_ordered() const override { return inner_->stream_ordered(); }
  comm::Transfer send(const ExecSpace& space, const void* data, std::size_t bytes, int peer, int tag) override {
    stall_once();
    return inner_->send(space, data, bytes, peer, tag);
  }
  comm::Transfer recv(const ExecSpace& space, void* data, std::size_t bytes, int peer, int tag) override {
    stall_once();
    return inner_->recv(space, data, bytes, peer, tag);
  }
  void begin_group() override { inner_->begin_group(); }
  void end_group() override { inner_->end_group(); }
  comm::Transfer all_reduce_sum(const ExecSpace& space, void* data, std::size_t count, comm::Scalar type,
                                const std::string& what) override {
    return inner_->all_reduce_sum(space, data, count, type, what);
  }
  comm::Transfer broadcast(const ExecSpace& space, void* data, std::size_t count, comm::Scalar type, int root,
                           const std::string& what) override {
    return inner_->broadcast(space, data, count, type, root, what);
  }
  bool wait(const ExecSpace& space, comm::Transfer& transfer, double timeout_s) override {
    return inner_->wait(space, transfer, timeout_s);
  }
  bool test(comm::Transfer& transfer) override { return inner_->test(transfer); }
  bool synchronize(const ExecSpace& space, double timeout_s) override { return inner_->synchronize(space, timeout_s); }

 private:
  void stall_once() {
    if (stalled_) return;
    stalled_ = true;
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds_));
  }

  std::unique_ptr<comm::Transport> inner_;
  double seconds_;
  bool stalled_ = false;
};

}  // namespace kpipe::test
