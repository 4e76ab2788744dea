// kpipe-export: a checkpoint as a Hugging Face transformers model directory (config.json, model.safetensors in
// GPT-2's names and layout, the tokenizer, generation_config.json), which GPT2LMHeadModel.from_pretrained(DIR)
// and AutoTokenizer.from_pretrained(DIR) load:
//   kpipe-export runs/ck -o gpt-hf [--dtype bf16]
// The checkpoint may be of any layout (the file holds the whole model); one tensor is read and written at a time.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <string>

#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/io/hf_export.hpp"

#include "mpi_program.hpp"

int main(int argc, char** argv) {
  std::string checkpoint, dir, dtype = "fp32";
  CLI::App app("Writes a checkpoint as a directory that Hugging Face transformers loads (GPT2LMHeadModel).",
               "kpipe-export");
  app.add_option("checkpoint", checkpoint, "a checkpoint file (step-<N>.h5) or a checkpoint.dir (its latest)")
      ->required();
  app.add_option("-o,--output", dir, "the directory to write (created when its parent exists)")->required();
  app.add_option("--dtype", dtype, "the weights' type in model.safetensors: fp32 or bf16")->capture_default_str();
  app.footer(kpipe::exit_codes_help(kpipe::ProgramName::export_model));
  return kpipe::apps::run_mpi_program(kpipe::ProgramName::export_model, "kpipe-export", argc, argv, [&](kpipe::apps::MpiProgram& program) {
    if (!kpipe::apps::parse_options(app, program)) return 0;
    kpipe::require(program.world_size == 1, "kpipe-export runs as one process, not {}", program.world_size);
    const auto start = std::chrono::steady_clock::now();
    const auto s = kpipe::io::export_to_hf(checkpoint, dir, dtype);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("kpipe-export: wrote {}: {} tensors of step {} of {} ({} bytes of {} weights), {} tokenizer, in "
               "{:.2f} s\n",
               dir, s.tensors, s.step, s.checkpoint, s.weight_bytes, dtype, s.tokenizer, seconds);
    return 0;
  });
}
