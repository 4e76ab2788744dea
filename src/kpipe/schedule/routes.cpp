#include "kpipe/schedule/routes.hpp"

namespace kpipe::schedule {

Delivery planned_delivery(TransportChoice transport) {
  return transport == TransportChoice::nccl ? Delivery::stream_ordered : Delivery::buffered;
}

}  // namespace kpipe::schedule
