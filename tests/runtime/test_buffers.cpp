// The runtime's buffers decide nothing: each slot, set of backward buffers and spare is the one the buffer plan
// names (schedule/buffers.hpp), a plan that contradicts what they hold is refused, and a renumbering moves
// a slot's buffers with it. The MPI tests (test_memory.cpp) hold whole runs to the plan's indices.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "kpipe/model/chunk.hpp"
#include "kpipe/runtime/buffers.hpp"

namespace kpipe::runtime {
namespace {

model::ModelDesc buffers_desc() {
  ModelConfig c;
  c.seq_len = 4;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_layers = 2;
  return model::describe(c);
}

// A middle chunk (blocks only: it receives activations and sends them on).
struct Middle {
  model::ModelDesc desc = buffers_desc();
  model::Chunk<float> chunk{desc, 1, 3, 1};
  Buffers<float> buffers{{&chunk}, 8};
};

TEST(RuntimeBuffers, TakeTheSlotsTheSetsAndTheSparesThePlanNames) {
  Middle m;
  m.buffers.take_slot(0, 5, 2);  // not the lowest free: the plan's
  EXPECT_EQ(m.buffers.slot(0, 5), 2);
  EXPECT_EQ(m.chunk.allocated_slots(), 3);
  EXPECT_THROW(m.buffers.take_slot(0, 6, 2), std::logic_error) << "slot 2 is in use";
  m.buffers.take_slot(0, 6, 0);
  EXPECT_EQ(m.chunk.allocated_slots(), 3);

  // Spares: the next new index allocates, an index the plan skipped or an empty one is refused.
  const View2<float> received = m.buffers.receive_buffer(0, 5, false, 0);
  EXPECT_EQ(m.buffers.message_buffers(), 1);
  EXPECT_THROW(m.buffers.receive_buffer(0, 6, false, 2), std::out_of_range);
  const float* former = m.chunk.input(2).data();
  m.buffers.move_in_activation(0, 5, 0);  // the received buffer becomes slot 2's input, its former one spare 0
  EXPECT_EQ(m.chunk.input(2).data(), received.data());
  EXPECT_EQ(m.buffers.receive_buffer(0, 6, false, 0).data(), former) << "spare 0 holds the slot's former input";
  EXPECT_THROW(m.buffers.receive_buffer(0, 7, false, 0), std::logic_error) << "spare 0 is empty now";

  // Backward sets: the plan's, refused while held.
  ExecSpace space;
  m.chunk.forward(space, 2);
  m.chunk.backward_input(space, 2, 1.0f, 1);
  EXPECT_EQ(m.chunk.allocated_backward_sets(), 2);
  m.chunk.forward(space, 0);
  EXPECT_THROW(m.chunk.backward_input(space, 0, 1.0f, 1), std::logic_error);
  m.chunk.backward_weight(space, 2);
  m.chunk.backward_input(space, 0, 1.0f, 1);
}

TEST(RuntimeBuffers, ARenumberingMovesASlotsBuffersWithIt) {
  Middle m;
  m.buffers.take_slot(0, 0, 0);
  m.buffers.take_slot(0, 1, 1);
  const float* input0 = m.chunk.input(0).data();
  const float* input1 = m.chunk.input(1).data();
  m.buffers.retire(0, 0, {});
  m.buffers.renumber({{1, 0}});  // slot 0 becomes 1, slot 1 becomes 0
  EXPECT_EQ(m.buffers.slot(0, 1), 0);
  EXPECT_EQ(m.chunk.input(0).data(), input1);
  EXPECT_EQ(m.chunk.input(1).data(), input0);
  m.buffers.take_slot(0, 2, 1);  // the free one, renumbered
  EXPECT_THROW(m.buffers.take_slot(0, 3, 0), std::logic_error) << "micro-batch 1 holds slot 0 now";
}

}  // namespace
}  // namespace kpipe::runtime
