#include "kpipe/io/param_checksum.hpp"

#include <vector>

#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/io/checkpoint_file.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/model/parameters.hpp"

namespace kpipe::io {

std::uint64_t param_checksum(const CheckpointReader& reader) {
  const Config config = parse_config(reader.text("config"), reader.path(), Config{});
  std::vector<std::uint64_t> hashes;
  for (const auto& layer : model::describe(config.model).layers)
    for (const auto& param : layer.params) {
      const std::string name = "/model/" + layer.path() + "/" + param.name;
      const DatasetEntry* entry = reader.find(name);
      require(entry != nullptr, "checkpoint '{}': no tensor {}", reader.path(), name);
      // of the float32 bytes, as the trainer hashes them
      hashes.push_back(reader.hash_kind() == ByteHash::xxh64 ? entry->hash : xxh64(reader.read_verified(*entry)));
    }
  return model::combine_hashes(hashes);
}

}  // namespace kpipe::io
