#pragma once
// Reading and writing the run configuration (core/config.hpp). One table of keys (core/config_keys.hpp)
// drives everything: the TOML file, the --table.key command-line options, --help and the TOML dump stored
// with metrics and checkpoints (config_io.cpp); validate() is in config_validate.cpp. Precedence, lowest first:
//   struct defaults (the "tiny" preset) < --preset < --config FILE < explicit command-line options.
// Every mistake is a kpipe::InputError whose message is one line naming the key and the value.
#include <functional>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "kpipe/core/config.hpp"
#include "kpipe/core/error.hpp"

namespace CLI {
class App;
}

namespace kpipe {

struct CommandLine {
  Config config;
  bool exit_now = false;  // --help was given (and printed): the program should return exit_code
  int exit_code = 0;
  Config preset;                   // what the defaults and --preset gave, before the file and the options
  std::vector<std::string> given;  // the keys the --config file or an option set ("optim.lr"), each once
  std::string preset_name;         // --preset's value; empty when none was given
};

// Lets a program add options of its own (bound to its own variables) before the command line is parsed.
using ExtraOptions = std::function<void(CLI::App&)>;

// Lets a program complete what it parsed before it is validated (kpipe-sim schedule: a model and a batch that
// fit the stages and micro-batches, where its costs do not come from the model).
using BeforeValidation = std::function<void(CommandLine&)>;

// Parses argv of `program`: --preset, --config, every --table.key and its short aliases (--steps, --lr,
// ...), then validates. With --help it prints the help (on MPI rank 0 only) and sets exit_now.
CommandLine parse_command_line(const std::string& program, int argc, const char* const* argv,
                               const ExtraOptions& extra = {}, const BeforeValidation& before_validation = {});

// Applies the keys of a TOML file onto base. Unknown tables and keys, wrong types and unknown enum
// values are errors; the file is not validated as a whole (validate() does that).
Config load_config_file(const std::string& path, Config base);
// The same for a TOML document held in memory (a checkpoint's config attribute); `path` names it in errors.
Config parse_config(const std::string& text, const std::string& path, Config base);

// Cross-field checks: positive sizes, known enum values, fractions in range, divisibility.
void validate(const Config& config);

// Every key, table by table, in a TOML document that load_config_file reads back to an equal Config.
std::string to_toml(const Config& config);

// A program's own enumerated option (kpipe-eval --schedule, say): the value its text names, or an InputError
// "<option> = <text>: expected one of ...".
template <class E> E option_value(const std::string& option, const std::string& text) {
  if (const auto value = enum_from_string<E>(text)) return *value;
  throw InputError(fmt::format("{} = {}: expected one of {}", option, text, fmt::join(EnumText<E>::names, ", ")));
}

// "tiny" (the struct defaults), "small" or "bench".
Config preset(const std::string& name);
std::vector<std::string> preset_names();

// The dotted names of every key, in table order ("model.vocab", ..., "output.metrics").
std::vector<std::string> config_keys();

}  // namespace kpipe
