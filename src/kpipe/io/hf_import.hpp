#pragma once
// kpipe-import: a GPT-2-family model saved by Hugging Face's transformers (config.json, model.safetensors or its
// sharded index, the tokenizer) as a kpipe checkpoint of its weights: step 0, no optimizer state, the tokenizer in
// /tokenizer. kpipe-train starts from it with checkpoint.init_from (--init-from); kpipe-eval and kpipe-generate
// read it as any checkpoint. The names and layouts are io/hf_gpt2.hpp's; a tied LM head (GPT-2's own) becomes
// kpipe's head as a copy of the token embedding.
//
// What kpipe's model cannot be is refused before anything is written, with one line naming the key or tensor:
// another model type or activation, a missing tensor or one of another shape, a tensor GPT-2 does not have,
// weights that are not floating point, a tokenizer kpipe would not encode to the same ids.
#include <mpi.h>

#include <cstdint>
#include <string>

#include "kpipe/core/config.hpp"

namespace kpipe::io {

struct ImportSummary {
  ModelConfig model;
  bool tied = false;           // the head was copied from the token embedding
  std::string tokenizer;       // its kind
  int tensors = 0;             // written
  int buffers_skipped = 0;     // GPT-2's attention masks (attn.bias, attn.masked_bias), which are not weights
  std::int64_t parameters = 0;
};

// seq_len > 0 keeps the first seq_len rows of the position table (a model trained on shorter windows); 0 keeps
// n_positions. The checkpoint is written as CHECKPOINT.tmp by this process alone (comm is its own), then renamed.
ImportSummary import_from_hf(const std::string& dir, const std::string& checkpoint, int seq_len, MPI_Comm comm);

}  // namespace kpipe::io
