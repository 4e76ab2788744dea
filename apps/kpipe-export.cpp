// kpipe-export: a checkpoint as a Hugging Face transformers model directory (config.json, model.safetensors in
// GPT-2's names and layout, the tokenizer, generation_config.json), which GPT2LMHeadModel.from_pretrained(DIR)
// and AutoTokenizer.from_pretrained(DIR) load:
//   kpipe-export runs/ck -o gpt-hf [--dtype bf16]
// The checkpoint may be of any layout (the file holds the whole model); one tensor is read and written at a time.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>

#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/h5/file.hpp"
#include "kpipe/io/hf_export.hpp"

namespace {

int run(int argc, char** argv) {
  std::string checkpoint, dir, dtype = "fp32";
  CLI::App app("Writes a checkpoint as a directory that Hugging Face transformers loads (GPT2LMHeadModel).",
               "kpipe-export");
  app.add_option("checkpoint", checkpoint, "a checkpoint file (step-<N>.h5) or a checkpoint.dir (its latest)")
      ->required();
  app.add_option("-o,--output", dir, "the directory to write (created when its parent exists)")->required();
  app.add_option("--dtype", dtype, "the weights' type in model.safetensors: fp32 or bf16")->capture_default_str();
  app.footer(kpipe::exit_codes_help(kpipe::ProgramName::export_model));
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& error) {
    std::string message = error.what();
    while (!message.empty() && message.back() == '\n') message.pop_back();
    throw kpipe::InputError(message);
  }
  const auto start = std::chrono::steady_clock::now();
  const auto s = kpipe::io::export_to_hf(checkpoint, dir, dtype);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("kpipe-export: wrote {}: {} tensors of step {} of {} ({} bytes of {} weights), {} tokenizer, in {:.2f} s\n",
             dir, s.tensors, s.step, s.checkpoint, s.weight_bytes, dtype, s.tokenizer, seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  kpipe::h5::skip_shutdown_at_exit();
  try {
    return run(argc, argv);
  } catch (const kpipe::InputError& error) {
    std::fprintf(stderr, "kpipe-export: error: %s\n", error.what());
    return kpipe::exit_status(kpipe::ExitCode::bad_input);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "kpipe-export: error: %s\n", error.what());
    return kpipe::exit_status(kpipe::ExitCode::failure);
  }
}
