#pragma once
// The one table of configuration keys ("model.d_model", "train.batch", ...): where each key's value lives in a
// Config, its help text, its short option and, for an enumerated key, its choices. The TOML reader and writer,
// the command line and --help (core/config_io.cpp) all read it, so a new key is one line of the table.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kpipe/core/config.hpp"

namespace kpipe::config_table {

// An enumerated key's field, read and written through its names (EnumText).
struct EnumRef {
  std::function<std::string_view()> get;
  std::function<void(std::string_view)> set;  // one of the key's choices
};

// Where a key's value lives inside a Config.
using FieldRef = std::variant<int*, std::int64_t*, std::uint64_t*, double*, std::string*, EnumRef>;

struct Key {
  std::string name;                  // "table.key"
  std::string alias;                 // a short command-line spelling ("--steps"), or empty
  std::string help;
  std::vector<std::string> choices;  // the allowed values of an enumerated key (its EnumText names)
  std::function<FieldRef(Config&)> field;

  std::string table() const { return name.substr(0, name.find('.')); }
  std::string leaf() const { return name.substr(name.find('.') + 1); }
};

// Every key, in the order to_toml writes them.
const std::vector<Key>& keys();
const Key* find_key(const std::string& name);  // nullptr: no such key
std::vector<std::string> table_names();        // "model", "train", ..., each once, in table order
std::string keys_of_table(const std::string& table);  // its keys' leaves, comma-separated

std::string join(const std::vector<std::string>& items, const char* separator);
// Shortest text that reads back to the same double, always recognizably a float ("1.0", not "1").
std::string format_double(double value);

}  // namespace kpipe::config_table
