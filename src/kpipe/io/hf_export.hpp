#pragma once
// kpipe-export: a checkpoint as a directory that Hugging Face's transformers loads
// (GPT2LMHeadModel.from_pretrained(DIR), AutoTokenizer.from_pretrained(DIR)): config.json, model.safetensors
// (GPT-2's names and layout, io/hf_gpt2.hpp), generation_config.json and the tokenizer (data/hf_tokenizer.hpp).
// The weights are the checkpoint's /model, the newest ones, which every layout writes alike (an asynchronous
// run's too: what a resume would load). Read and written one tensor at a time: memory is the largest tensor's.
#include <cstdint>
#include <string>

namespace kpipe::io {

struct ExportSummary {
  std::string checkpoint;  // the file read
  std::int64_t step = 0;
  int tensors = 0;
  std::uint64_t weight_bytes = 0;  // model.safetensors
  std::string tokenizer;           // its kind
};

// dtype "fp32" or "bf16" (rounded to nearest even). DIR is created when its parent exists; files already
// there of the same names are replaced, each only once complete. InputError for a checkpoint that cannot be
// read or a tokenizer that transformers could not reproduce (before anything is written).
ExportSummary export_to_hf(const std::string& checkpoint, const std::string& dir, const std::string& dtype);

}  // namespace kpipe::io
