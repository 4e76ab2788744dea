#include "kpipe/core/config_io.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <mpi.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <sstream>
#include <variant>

#include "kpipe/core/bytes.hpp"
#include "kpipe/core/config_keys.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"

namespace kpipe {
namespace {

using config_table::EnumRef;
using config_table::FieldRef;
using config_table::find_key;
using config_table::format_double;
using config_table::join;
using config_table::Key;
using config_table::keys;
using config_table::keys_of_table;
using config_table::table_names;

std::string one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" for the closest candidate within two edits, else "".
std::string suggestion(const std::string& wrong, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = 3;
  for (const std::string& candidate : candidates) {
    const std::size_t d = edit_distance(wrong, candidate);
    if (d < best_distance) best = candidate, best_distance = d;
  }
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

std::string toml_string(const std::string& value) {
  std::string out = "\"";
  for (const char c : value) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
          out += fmt::format("\\u{:04X}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

// The value of a field as TOML source text.
std::string toml_value(const FieldRef& field) {
  if (auto p = std::get_if<int*>(&field)) return fmt::format("{}", **p);
  if (auto p = std::get_if<std::int64_t*>(&field)) return fmt::format("{}", **p);
  if (auto p = std::get_if<std::uint64_t*>(&field)) return fmt::format("{}", **p);
  if (auto p = std::get_if<double*>(&field)) return format_double(**p);
  if (auto p = std::get_if<EnumRef>(&field)) return toml_string(std::string(p->get()));
  return toml_string(*std::get<std::string*>(field));
}

const char* type_name(const FieldRef& field) {
  if (std::holds_alternative<int*>(field) || std::holds_alternative<std::int64_t*>(field)) return "INT";
  if (std::holds_alternative<std::uint64_t*>(field)) return "UINT";
  if (std::holds_alternative<double*>(field)) return "FLOAT";
  return "TEXT";
}

void check_choice(const Key& key, const std::string& value, const std::string& shown_key,
                  const std::string& shown_value) {
  if (key.choices.empty() || std::find(key.choices.begin(), key.choices.end(), value) != key.choices.end()) return;
  throw InputError(fmt::format("{} = {}: expected one of {}", shown_key, shown_value, join(key.choices, ", ")));
}

template <class Int>
void parse_integer(const std::string& text, const std::string& shown_key, Int minimum, Int maximum, Int& out) {
  const char* first = text.data();
  const char* last = first + text.size();
  if (first != last && *first == '+') ++first;  // from_chars takes no '+'
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(first, last, value);
  if (first == last || end != last || (error != std::errc() && error != std::errc::result_out_of_range))
    throw InputError(fmt::format("{} = {}: expected an integer", shown_key, text));
  // Every bound fits in an int64 (the seed stops at 2^63 - 1).
  if (error == std::errc::result_out_of_range || value < static_cast<std::int64_t>(minimum) ||
      value > static_cast<std::int64_t>(maximum))
    throw InputError(fmt::format("{} = {}: expected an integer in [{}, {}]", shown_key, text, minimum, maximum));
  out = static_cast<Int>(value);
}

// TOML integers are signed 64-bit, so the unsigned seed stops at 2^63 - 1 to round-trip through to_toml.
constexpr std::uint64_t max_seed = std::numeric_limits<std::int64_t>::max();

// A command-line value (text) into its field.
void assign_text(const Key& key, Config& config, const std::string& text) {
  const std::string shown_key = "--" + key.name;
  const FieldRef field = key.field(config);
  if (auto p = std::get_if<int*>(&field)) {
    parse_integer<int>(text, shown_key, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), **p);
  } else if (auto p = std::get_if<std::int64_t*>(&field)) {
    parse_integer<std::int64_t>(text, shown_key, std::numeric_limits<std::int64_t>::min(),
                                std::numeric_limits<std::int64_t>::max(), **p);
  } else if (auto p = std::get_if<std::uint64_t*>(&field)) {
    parse_integer<std::uint64_t>(text, shown_key, 0, max_seed, **p);
  } else if (auto p = std::get_if<double*>(&field)) {
    const char* first = text.data();
    const char* last = first + text.size();
    if (first != last && *first == '+') ++first;
    double value = 0;
    const auto [end, error] = std::from_chars(first, last, value);
    if (first == last || end != last || error != std::errc())
      throw InputError(fmt::format("{} = {}: expected a number", shown_key, text));
    **p = value;
  } else if (auto p = std::get_if<EnumRef>(&field)) {
    check_choice(key, text, shown_key, text);
    p->set(text);
  } else {
    *std::get<std::string*>(field) = text;
  }
}

// A TOML value as the user would write it (strings in double quotes, as to_toml writes them).
std::string node_text(const toml::node& node) {
  if (node.is_table()) return "{...}";
  if (const auto* text = node.as_string()) return toml_string(text->get());
  std::ostringstream out;
  node.visit([&out](const auto& value) { out << value; });
  return one_line(out.str());
}

// A TOML value into its field; `where` is "file:line: table.key".
void assign_node(const Key& key, Config& config, const toml::node& node, const std::string& where) {
  const FieldRef field = key.field(config);
  const auto fail = [&](const std::string& expected) {
    throw InputError(fmt::format("{} = {}: expected {}", where, node_text(node), expected));
  };
  const auto integer = [&](std::int64_t minimum, std::int64_t maximum) {
    const auto* value = node.as_integer();
    if (!value) fail("an integer");
    if (value->get() < minimum || value->get() > maximum) fail(fmt::format("an integer in [{}, {}]", minimum, maximum));
    return value->get();
  };
  if (auto p = std::get_if<int*>(&field)) {
    **p = static_cast<int>(integer(std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  } else if (auto p = std::get_if<std::int64_t*>(&field)) {
    **p = integer(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
  } else if (auto p = std::get_if<std::uint64_t*>(&field)) {
    **p = static_cast<std::uint64_t>(integer(0, std::numeric_limits<std::int64_t>::max()));
  } else if (auto p = std::get_if<double*>(&field)) {
    if (const auto* value = node.as_floating_point())
      **p = value->get();
    else if (const auto* whole = node.as_integer())
      **p = static_cast<double>(whole->get());
    else
      fail("a number");
  } else {
    const auto* value = node.as_string();
    if (!value) fail("a string");
    if (auto p = std::get_if<EnumRef>(&field)) {
      check_choice(key, value->get(), where, node_text(node));
      p->set(value->get());
    } else {
      *std::get<std::string*>(field) = value->get();
    }
  }
}

toml::table parse_toml(const std::string& text, const std::string& path) {
  const auto failure = [&](const toml::parse_error& error) {
    return InputError(fmt::format("{}:{}:{}: {}", path, error.source().begin.line, error.source().begin.column,
                                  one_line(std::string(error.description()))));
  };
#if TOML_EXCEPTIONS
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& error) {
    throw failure(error);
  }
#else
  toml::parse_result result = toml::parse(text, path);
  if (!result) throw failure(result.error());
  return std::move(result).table();
#endif
}

bool is_rank_zero() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return true;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank == 0;
}

// Options that CLI11 did not recognize (they are collected, not thrown, to name them in our own words).
void reject_leftovers(const std::vector<std::string>& leftovers) {
  if (leftovers.empty()) return;
  const std::string& first = leftovers.front();
  if (first.size() < 2 || first[0] != '-') throw InputError(fmt::format("unexpected argument '{}'", first));
  const std::string name = first.substr(0, first.find('='));
  std::vector<std::string> known = {"--preset", "--config", "--help"};
  for (const Key& key : keys()) {
    known.push_back("--" + key.name);
    if (!key.alias.empty()) known.push_back(key.alias);
  }
  throw InputError(fmt::format("unknown option '{}'{}", name, suggestion(name, known)));
}

// parse_config, adding the name of every key the document sets to `given`.
Config parse_config_keys(const std::string& text, const std::string& path, Config base, std::vector<std::string>& given) {
  const toml::table document = parse_toml(text, path);
  const std::vector<std::string> tables = table_names();
  for (const auto& [table_key, node] : document) {
    const std::string table_name(table_key.str());
    const auto line = table_key.source().begin.line;
    const toml::table* table = node.as_table();
    const bool known_table = std::find(tables.begin(), tables.end(), table_name) != tables.end();
    if (!table && known_table)
      throw InputError(fmt::format("{}:{}: '{}' must be a table: [{}]", path, line, table_name, table_name));
    if (!table)
      for (const Key& key : keys())
        if (key.leaf() == table_name)
          throw InputError(fmt::format("{}:{}: unknown key '{}' (keys belong in tables: did you mean [{}] {}?)", path,
                                       line, table_name, key.table(), table_name));
    if (!table || !known_table)
      throw InputError(fmt::format("{}:{}: unknown {} '{}'{} (tables: {})", path, line, table ? "table" : "key",
                                   table_name, suggestion(table_name, tables), join(tables, ", ")));
    for (const auto& [leaf, value] : *table) {
      const std::string name = table_name + "." + std::string(leaf.str());
      const auto key_line = leaf.source().begin.line;
      const Key* key = find_key(name);
      if (!key) {
        std::string hint = suggestion(name, config_keys());
        if (hint.empty()) hint = fmt::format(" ([{}] has {})", table_name, keys_of_table(table_name));
        throw InputError(fmt::format("{}:{}: unknown key '{}'{}", path, key_line, name, hint));
      }
      assign_node(*key, base, value, fmt::format("{}:{}: {}", path, key_line, name));
      given.push_back(name);
    }
  }
  return base;
}

}  // namespace

Config load_config_file(const std::string& path, Config base) {
  return parse_config(read_bytes(path, path), path, std::move(base));  // never blocks: a FIFO or a device is refused
}

Config parse_config(const std::string& text, const std::string& path, Config base) {
  std::vector<std::string> given;
  return parse_config_keys(text, path, std::move(base), given);
}


std::string to_toml(const Config& config) {
  Config copy = config;  // the key table binds mutable fields
  std::string out, table;
  for (const Key& key : keys()) {
    if (key.table() != table) {
      table = key.table();
      out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", table);
    }
    out += fmt::format("{} = {}\n", key.leaf(), toml_value(key.field(copy)));
  }
  return out;
}

CommandLine parse_command_line(const std::string& program, int argc, const char* const* argv,
                               const ExtraOptions& extra, const BeforeValidation& before_validation) {
  CLI::App app("Every configuration key is an option --table.key; precedence, lowest first: defaults (the tiny "
               "preset) < --preset < --config file < command-line options.",
               program);
  app.allow_extras();
  app.get_formatter()->column_width(44);
  std::string preset_name, config_path;
  app.add_option("--preset", preset_name, "start from a preset: " + join(preset_names(), ", "))
      ->type_name("NAME")
      ->default_str("tiny")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--config", config_path, "TOML file of keys, applied over the preset")
      ->type_name("FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  const std::vector<Key>& table = keys();
  std::vector<std::string> values(table.size());
  std::vector<CLI::Option*> options;
  Config defaults;
  for (std::size_t i = 0; i < table.size(); ++i) {
    const Key& key = table[i];
    const FieldRef field = key.field(defaults);
    const std::string names = (key.alias.empty() ? "" : key.alias + ",") + "--" + key.name;
    CLI::Option* option = app.add_option(names, values[i], key.help)
                              ->type_name(key.choices.empty() ? type_name(field) : "{" + join(key.choices, ",") + "}")
                              ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                              ->group("[" + key.table() + "]");
    if (const auto* text = std::get_if<std::string*>(&field))
      option->default_str(**text);
    else if (const auto* named = std::get_if<EnumRef>(&field))
      option->default_str(std::string(named->get()));
    else
      option->default_str(toml_value(field));
    options.push_back(option);
  }
  if (extra) extra(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {  // --help
    if (is_rank_zero()) std::cout << app.help() << std::flush;
    return {Config{}, true, 0, Config{}, {}, {}};
  } catch (const CLI::ParseError& error) {
    throw InputError(one_line(error.what()));
  }
  reject_leftovers(app.remaining());

  CommandLine line;
  line.preset = preset_name.empty() ? Config{} : preset(preset_name);
  line.preset_name = preset_name;
  Config config = line.preset;
  if (!config_path.empty()) {
    if (const std::string reason = unreadable_reason(config_path); !reason.empty())
      throw InputError(fmt::format("--config = {}: cannot open ({})", config_path, reason));
    config = parse_config_keys(read_bytes(config_path, config_path), config_path, config, line.given);
  }
  for (std::size_t i = 0; i < table.size(); ++i)
    if (options[i]->count() > 0) {
      assign_text(table[i], config, values[i]);
      if (std::find(line.given.begin(), line.given.end(), table[i].name) == line.given.end())
        line.given.push_back(table[i].name);
    }
  line.config = config;
  if (before_validation) before_validation(line);
  validate(line.config);
  return line;
}

}  // namespace kpipe
