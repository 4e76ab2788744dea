#include "kpipe/io/tokenizer_store.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/h5_file.hpp"
#include "kpipe/model/parameters.hpp"

namespace kpipe::io {

namespace {

constexpr const char* model_dataset = "tokenizer/model";

void write_u64_attribute(hid_t object, const char* name, std::uint64_t value, const std::string& label) {
  const h5::Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const h5::Handle attribute(H5Acreate2(object, name, H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  require(attribute.valid() && H5Awrite(attribute.get(), H5T_NATIVE_UINT64, &value) >= 0,
          "{}: cannot write attribute {}/{}", label, model_dataset, name);
}

std::uint64_t read_u64_attribute(hid_t object, const char* name, const std::string& label) {
  require(H5Aexists(object, name) > 0, "{}: /{} has no attribute '{}'", label, model_dataset, name);
  const h5::Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  std::uint64_t value = 0;
  require(attribute.valid() && H5Aread(attribute.get(), H5T_NATIVE_UINT64, &value) >= 0,
          "{}: cannot read attribute {}/{}", label, model_dataset, name);
  return value;
}

}  // namespace

void write_tokenizer(hid_t file, const data::Tokenizer& tokenizer, const std::string& label) {
  const h5::Handle group(H5Gcreate2(file, tokenizer_group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  require(group.valid(), "{}: cannot create group /{}", label, tokenizer_group);
  h5::write_attribute(group.get(), "kind", std::string(data::to_string(tokenizer.kind())));
  h5::write_attribute(group.get(), "vocab", std::int64_t(tokenizer.vocab()));
  if (tokenizer.kind() == data::TokenizerKind::bytes) return;
  const std::string& model = tokenizer.serialized_model();
  const hsize_t size = model.size();
  const h5::Handle space(H5Screate_simple(1, &size, nullptr), H5Sclose);
  const h5::Handle dataset(
      H5Dcreate2(file, model_dataset, H5T_STD_U8LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  require(dataset.valid() &&
              H5Dwrite(dataset.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, model.data()) >= 0,
          "{}: cannot write dataset /{}", label, model_dataset);
  write_u64_attribute(dataset.get(), "fnv1a64", model::hash_bytes(model.data(), model.size()), label);
}

data::Tokenizer read_tokenizer(hid_t file, const std::string& label) {
  const h5::QuietErrors quiet;
  if (H5Lexists(file, tokenizer_group, H5P_DEFAULT) <= 0) return {};  // before tokenizers: bytes
  const h5::Handle group(H5Gopen2(file, tokenizer_group, H5P_DEFAULT), H5Gclose);
  require(group.valid(), "{}: /{} is not a group", label, tokenizer_group);
  const std::string kind = h5::read_string_attribute(group.get(), "kind", label + ": /tokenizer");
  const std::int64_t vocab = h5::read_int_attribute(group.get(), "vocab", label + ": /tokenizer");
  if (kind == data::to_string(data::TokenizerKind::bytes)) {
    require(vocab == data::byte_vocab, "{}: /tokenizer says bytes with vocab = {} (bytes have {})", label, vocab,
            data::byte_vocab);
    return {};
  }
  require(kind == data::to_string(data::TokenizerKind::sentencepiece),
          "{}: /tokenizer kind = '{}': expected bytes or sentencepiece", label, kind);
  require(H5Lexists(file, model_dataset, H5P_DEFAULT) > 0, "{}: missing dataset /{}", label, model_dataset);
  const h5::Handle dataset(H5Dopen2(file, model_dataset, H5P_DEFAULT), H5Dclose);
  require(dataset.valid(), "{}: /{} is not a dataset", label, model_dataset);
  const h5::Handle space(H5Dget_space(dataset.get()), H5Sclose);
  require(H5Sget_simple_extent_ndims(space.get()) == 1, "{}: dataset /{} is not 1-D", label, model_dataset);
  hsize_t size = 0;
  H5Sget_simple_extent_dims(space.get(), &size, nullptr);
  std::string model(size, '\0');
  require(size == 0 ||
              H5Dread(dataset.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, model.data()) >= 0,
          "{}: cannot read dataset /{} (corrupt file?)", label, model_dataset);
  const std::uint64_t want = read_u64_attribute(dataset.get(), "fnv1a64", label);
  const std::uint64_t got = model::hash_bytes(model.data(), model.size());
  require(got == want, "{}: dataset /{} fails its checksum (fnv1a64 stored {:016x}, computed {:016x})", label,
          model_dataset, want, got);
  data::Tokenizer tokenizer = data::Tokenizer::sentencepiece(std::move(model), label + ": /" + model_dataset);
  require(tokenizer.vocab() == vocab, "{}: /tokenizer says vocab = {}, its model has {} pieces", label, vocab,
          tokenizer.vocab());
  return tokenizer;
}

data::Tokenizer read_checkpoint_tokenizer(const std::string& path) {
  const h5::QuietErrors quiet;
  const std::string entry = entry_file_of(path);
  const std::string label = fmt::format("checkpoint file '{}'", entry);
  const h5::Handle file(H5Fopen(entry.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  require(file.valid(), "{}: cannot open (missing, truncated or not HDF5)", label);
  return read_tokenizer(file.get(), label);
}

}  // namespace kpipe::io
