#pragma once
// A transport that passes everything on to the one it wraps: the base of the tests' decorators, which override
// the calls they change (a stalled peer, a slow link) and leave the rest to this.
#include <memory>
#include <string>
#include <utility>

#include "kpipe/comm/transport.hpp"

namespace kpipe::test {

class ForwardingTransport : public comm::Transport {
 public:
  explicit ForwardingTransport(std::unique_ptr<comm::Transport> inner) : inner_(std::move(inner)) {}

  const char* name() const override { return inner_->name(); }
  bool stream_ordered() const override { return inner_->stream_ordered(); }
  comm::Transfer send(const ExecSpace& space, const void* data, std::size_t bytes, int peer, int tag) override {
    return inner_->send(space, data, bytes, peer, tag);
  }
  comm::Transfer recv(const ExecSpace& space, void* data, std::size_t bytes, int peer, int tag) override {
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
  std::unique_ptr<comm::Transport> inner_;
};

}  // namespace kpipe::test
