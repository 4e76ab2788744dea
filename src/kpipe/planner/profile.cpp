#include "kpipe/planner/profile.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"

namespace kpipe::planner {

namespace {

std::string array_text(const std::array<double, 4>& a) {
  return fmt::format("[{:.9g}, {:.9g}, {:.9g}, {:.9g}]", a[0], a[1], a[2], a[3]);
}

template <class V> V get(const toml::table& table, const std::string& path, const std::string& file) {
  const auto node = table.at_path(path);
  const auto value = node.value<V>();
  require(value.has_value(), "{}: {} missing or not a {}", file, path, std::is_same_v<V, std::string> ? "string" : "number");
  return *value;
}

std::array<double, 4> get_times(const toml::table& table, const std::string& path, const std::string& file) {
  const toml::array* a = table.at_path(path).as_array();
  require(a && a->size() == 4, "{}: {} must be an array of 4 numbers (forward, backward_input, backward_weight, "
          "recompute)", file, path);
  std::array<double, 4> out{};
  for (std::size_t i = 0; i < 4; ++i) {
    const auto v = (*a)[i].value<double>();
    require(v.has_value() && *v >= 0, "{}: {}[{}] must be a number >= 0", file, path, i);
    out[i] = *v;
  }
  return out;
}

}  // namespace

void write_profile(const std::string& path, const Profile& p) {
  require_writable(path, fmt::format("output.profile = '{}'", path));  // never over a device or a FIFO
  std::ofstream out(path, std::ios::trunc);
  require(bool(out), "output.profile = '{}': cannot open for writing ({})", path, std::strerror(errno));
  out << "# kpipe layer profile (kpipe-train --output.profile): seconds per sequence, means over the calls after\n"
         "# the first step; [forward, backward_input, backward_weight, recompute]. kpipe-sim recommend --profile\n"
         "# reads it for any model with these widths.\n";
  out << fmt::format("[model]\nvocab = {}\nseq_len = {}\nd_model = {}\nn_heads = {}\nmlp_ratio = {}\nn_layers = {}\n\n",
                     p.model.vocab, p.model.seq_len, p.model.d_model, p.model.n_heads, p.model.mlp_ratio,
                     p.model.n_layers);
  out << fmt::format("[measured]\nsequences = {}\nrecompute = \"{}\"\nsteps = {}\nembedding = {}\nblock = {}\nhead = {}\n"
                     "optimizer = {:.9g}\n",
                     p.sequences, p.recompute, p.steps, array_text(p.embedding), array_text(p.block),
                     array_text(p.head), p.optimizer);
  out.close();
  require(bool(out), "output.profile = '{}': cannot write", path);
}

Profile read_profile(const std::string& path) {
  toml::table table;
  // Read without blocking, and only from a regular file (a FIFO is refused, never opened).
  const std::string text = read_bytes(path, fmt::format("--profile = '{}'", path));
  try {
    table = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("--profile = '{}': {}", path, std::string(e.description())));
  }
  const std::string file = fmt::format("--profile = '{}'", path);
  Profile p;
  p.model.vocab = int(get<std::int64_t>(table, "model.vocab", file));
  p.model.seq_len = int(get<std::int64_t>(table, "model.seq_len", file));
  p.model.d_model = int(get<std::int64_t>(table, "model.d_model", file));
  p.model.n_heads = int(get<std::int64_t>(table, "model.n_heads", file));
  p.model.mlp_ratio = int(get<std::int64_t>(table, "model.mlp_ratio", file));
  p.model.n_layers = int(get<std::int64_t>(table, "model.n_layers", file));
  p.sequences = int(get<std::int64_t>(table, "measured.sequences", file));
  const std::string recompute = get<std::string>(table, "measured.recompute", file);
  const auto mode = enum_from_string<Recompute>(recompute);
  require(mode.has_value(), "{}: measured.recompute = \"{}\": expected one of none, attention, mlp, block", file,
          recompute);
  p.recompute = *mode;
  p.steps = int(get<std::int64_t>(table, "measured.steps", file));
  p.embedding = get_times(table, "measured.embedding", file);
  p.block = get_times(table, "measured.block", file);
  p.head = get_times(table, "measured.head", file);
  p.optimizer = get<double>(table, "measured.optimizer", file);
  require(p.sequences >= 1 && p.block[0] > 0, "{}: no measured block times", file);
  return p;
}

bool profile_fits(const Profile& p, const ModelConfig& m) {
  return p.model.vocab == m.vocab && p.model.seq_len == m.seq_len && p.model.d_model == m.d_model &&
         p.model.n_heads == m.n_heads && p.model.mlp_ratio == m.mlp_ratio;
}

}  // namespace kpipe::planner
