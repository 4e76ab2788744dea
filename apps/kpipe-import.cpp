// kpipe-import: a GPT-2-family model that Hugging Face transformers saved (config.json, model.safetensors or its
// sharded index, tokenizer.json) as a kpipe checkpoint of its weights, for kpipe-train --init-from, kpipe-eval and
// kpipe-generate:
//   kpipe-import gpt2-dir -o gpt2.h5 [--seq-len 256]
// What kpipe's model cannot be is refused with one line naming the key or tensor (exit 2); nothing is written then.
#include <fmt/format.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <string>

#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/io/hf_import.hpp"

#include "mpi_program.hpp"

int main(int argc, char** argv) {
  std::string dir, checkpoint;
  int seq_len = 0;
  CLI::App app("Writes a GPT-2 model saved by Hugging Face transformers as a kpipe checkpoint (weights only).",
               "kpipe-import");
  app.add_option("directory", dir, "the model's directory (config.json, model.safetensors, tokenizer.json)")
      ->required();
  app.add_option("-o,--output", checkpoint, "the checkpoint file to write")->required();
  app.add_option("--seq-len", seq_len, "keep the first this many positions (model.seq_len; 0: n_positions)")
      ->capture_default_str();
  app.footer(kpipe::exit_codes_help(kpipe::ProgramName::import_model));
  return kpipe::apps::run_mpi_program(kpipe::ProgramName::import_model, "kpipe-import", argc, argv, [&](kpipe::apps::MpiProgram& program) {
    if (!kpipe::apps::parse_options(app, program)) return 0;
    kpipe::require(seq_len >= 0, "--seq-len = {}: expected an integer >= 0", seq_len);
    kpipe::require(program.world_size == 1, "kpipe-import runs as one process, not {}", program.world_size);
    const auto start = std::chrono::steady_clock::now();
    const auto s = kpipe::io::import_from_hf(dir, checkpoint, seq_len, MPI_COMM_SELF);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s.tied)
      fmt::print("kpipe-import: tie_word_embeddings: the LM head is a copy of the token embedding (kpipe's head is "
                 "its own tensor)\n");
    fmt::print("kpipe-import: wrote {}: {} tensors, {} parameters ({} layers, d_model {}, {} heads, MLP {}, seq_len "
               "{}, vocabulary {}), {} tokenizer{}, in {:.2f} s\n",
               checkpoint, s.tensors, s.parameters, s.model.n_layers, s.model.d_model, s.model.n_heads,
               s.model.mlp_ratio * s.model.d_model, s.model.seq_len, s.model.vocab, s.tokenizer,
               s.buffers_skipped > 0 ? fmt::format("; {} attention masks skipped (not weights)", s.buffers_skipped)
                                     : std::string(),
               seconds);
    return 0;
  });
}
