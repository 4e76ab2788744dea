#include "kpipe/io/init_from.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/io/checkpoint.hpp"

namespace kpipe::io {

namespace {

// "model.d_model" -> "64": the [model] table as the configuration's TOML writes it, every key of it.
std::map<std::string, std::string> model_values(const ModelConfig& model) {
  Config config;
  config.model = model;
  std::map<std::string, std::string> values;
  std::istringstream toml(to_toml(config));
  std::string table;
  for (std::string line; std::getline(toml, line);) {
    if (line.rfind('[', 0) == 0) table = line.substr(1, line.find(']') - 1);
    const std::size_t equals = line.find(" = ");
    if (table == "model" && equals != std::string::npos) values["model." + line.substr(0, equals)] = line.substr(equals + 3);
  }
  return values;
}

}  // namespace

ModelConfig init_from_model(const std::string& path, const std::vector<std::string>& given, const ModelConfig& asked) {
  ModelConfig model = checkpoint_config(path).model;
  model.init_std = asked.init_std;  // the loaded weights replace the initial ones
  const auto mine = model_values(asked), theirs = model_values(model);
  for (const auto& [key, value] : mine)
    require(std::find(given.begin(), given.end(), key) == given.end() || value == theirs.at(key),
            "{} = {}: checkpoint.init_from = '{}' holds a model of {} = {} (its weights need its shapes)", key, value,
            path, key, theirs.at(key));
  return model;
}

}  // namespace kpipe::io
