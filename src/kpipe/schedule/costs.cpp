#include "kpipe/schedule/costs.hpp"

#include <limits>
#include <utility>

#include "kpipe/core/error.hpp"

namespace kpipe::schedule {

double duration(Op op, const Costs& costs) {
  switch (op) {
    case Op::forward: return costs.f;
    case Op::backward: return costs.b + costs.r;
    case Op::backward_input: return costs.i + costs.r;
    case Op::backward_weight: return costs.w;
    case Op::step: return costs.step;
    case Op::update: return costs.step;
    default: return 0;
  }
}

void check_costs(const Costs& c) {
  const std::pair<const char*, double> all[] = {
      {"f", c.f},         {"b", c.b},         {"i", c.i},           {"w", c.w},
      {"r", c.r},         {"step", c.step},   {"latency", c.latency}, {"per_byte", c.per_byte},
      {"activation_bytes", c.activation_bytes}, {"gradient_bytes", c.gradient_bytes}};
  for (const auto& [name, value] : all)
    require(value >= 0 && value < std::numeric_limits<double>::infinity(), "cost {} = {}: must be a non-negative number",
            name, value);
}

}  // namespace kpipe::schedule
