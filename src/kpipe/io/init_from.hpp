#pragma once
// checkpoint.init_from (--init-from): a run that starts from a checkpoint's weights (any layout's, or kpipe-import's)
// with a fresh optimizer at step 0 takes the checkpoint's model and tokenizer with them. The weights are loaded
// by io::load_weights, the tokenizer read by io::read_checkpoint_tokenizer.
#include <string>
#include <vector>

#include "kpipe/core/config.hpp"

namespace kpipe::io {

// The checkpoint's model. A model key the run sets itself (`given`, as CommandLine lists them) must say the same,
// since the weights need their shapes: InputError naming the key and both values otherwise (model.init_std, which
// loaded weights ignore, excepted).
ModelConfig init_from_model(const std::string& path, const std::vector<std::string>& given, const ModelConfig& asked);

}  // namespace kpipe::io
