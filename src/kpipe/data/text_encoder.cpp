#include "kpipe/data/text_encoder.hpp"

#include <algorithm>
#include <exception>
#include <future>
#include <string>
#include <string_view>
#include <thread>

namespace kpipe::data {
namespace {

// One thread's share of a batch: its bytes [begin, end) of the batch's text, and what encoding them gave.
struct Block {
  std::size_t begin = 0, end = 0;
  std::vector<Token> ids;            // BPE (bytes are their own ids)
  std::vector<std::int64_t> counts;  // of each id, in a training batch
  std::int64_t invalid_utf8 = 0;
};

struct Batch {
  Split split = Split::train;
  std::int64_t end = 0;  // where it ends in the text
  std::string text;
  std::vector<Block> blocks;
};

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Where a batch of `text` (read with one byte more than `limit`, where the text goes on) ends: after its
// last newline; where it has none (a line longer than a batch), at the character boundary before `limit`.
std::size_t batch_end(const std::string& text, std::size_t limit) {
  const std::size_t newline = text.rfind('\n', limit - 1);
  if (newline != std::string::npos) return newline + 1;
  std::size_t cut = limit;
  for (int k = 0; k < 3 && cut > 1 && continuation_byte(text[cut]); ++k) --cut;
  return cut;
}

// Bytes [begin, limit) of the text, at most batch_bytes of them; with BPE, ending at a line's end.
Batch read_batch(const TextStream& text, Split split, std::int64_t begin, std::int64_t limit, std::int64_t batch_bytes,
                 bool whole_lines) {
  Batch batch;
  batch.split = split;
  const std::int64_t count = std::min(batch_bytes, limit - begin);
  const bool more = begin + count < limit;
  batch.text = text.read(begin, count + (more ? 1 : 0));
  batch.text.resize(more && whole_lines ? batch_end(batch.text, std::size_t(count)) : std::size_t(count));
  batch.end = begin + std::int64_t(batch.text.size());
  return batch;
}

// About equal blocks, one per thread; with BPE each ends at a newline (or the batch's end), so that the
// blocks' ids are the batch's.
std::vector<Block> cut_blocks(const std::string& text, int threads, bool whole_lines) {
  std::vector<Block> blocks;
  for (std::size_t begin = 0; begin < text.size();) {
    const std::size_t k = blocks.size() + 1;
    std::size_t end = std::max(begin + 1, text.size() * k / std::size_t(threads));
    if (whole_lines && end < text.size()) {
      const std::size_t newline = text.find('\n', end - 1);
      end = newline == std::string::npos ? text.size() : newline + 1;
    }
    end = std::min(end, text.size());
    Block block;
    block.begin = begin;
    block.end = end;
    blocks.push_back(std::move(block));
    begin = end;
  }
  return blocks;
}

void encode_block(const Batch& batch, Block& block, const Tokenizer& tokenizer) {
  const std::string_view text(batch.text.data() + block.begin, block.end - block.begin);
  const bool bytes = tokenizer.kind() == TokenizerKind::bytes;
  if (!bytes) {
    block.ids = tokenizer.encode(text);
    block.invalid_utf8 = invalid_utf8_sequences(text);
  }
  if (batch.split != Split::train) return;
  block.counts.assign(std::size_t(tokenizer.vocab()), 0);
  if (bytes) {
    for (const char c : text) ++block.counts[static_cast<unsigned char>(c)];
  } else {
    for (const Token id : block.ids) ++block.counts[std::size_t(id)];
  }
}

// Every block on a thread of its own (the first on the calling thread); the first failure is rethrown.
void encode_blocks(Batch& batch, const Tokenizer& tokenizer) {
  std::vector<std::exception_ptr> failures(batch.blocks.size());
  auto encode = [&](std::size_t k) {
    try {
      encode_block(batch, batch.blocks[k], tokenizer);
    } catch (...) {
      failures[k] = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  for (std::size_t k = 1; k < batch.blocks.size(); ++k) workers.emplace_back(encode, k);
  if (!batch.blocks.empty()) encode(0);
  for (auto& worker : workers) worker.join();
  for (const auto& failure : failures)
    if (failure) std::rethrow_exception(failure);
}

void write_batch(const Batch& batch, TokenFileWriter& writer, const Tokenizer& tokenizer) {
  if (tokenizer.kind() == TokenizerKind::bytes) {
    writer.append_bytes(batch.split, batch.text.data(), batch.text.size());
    return;
  }
  for (const Block& block : batch.blocks) writer.append(batch.split, block.ids.data(), block.ids.size());
}

}  // namespace

EncodeSummary encode_text(const TextStream& text, std::int64_t train_bytes, const Tokenizer& tokenizer,
                          TokenFileWriter& writer, const EncodeOptions& options,
                          const std::function<void(std::int64_t bytes_done)>& progress) {
  const int threads =
      options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const bool whole_lines = tokenizer.kind() != TokenizerKind::bytes;
  const std::int64_t batch_bytes = std::max<std::int64_t>(options.batch_bytes, 1);
  auto produce = [&](std::int64_t begin) {
    const bool train = begin < train_bytes;
    Batch batch = read_batch(text, train ? Split::train : Split::validation, begin, train ? train_bytes : text.size(),
                             batch_bytes, whole_lines);
    batch.blocks = cut_blocks(batch.text, threads, whole_lines);
    encode_blocks(batch, tokenizer);
    return batch;
  };
  auto start = [&](std::int64_t begin) { return std::async(std::launch::async, produce, begin); };

  EncodeSummary summary;
  summary.train_counts.assign(std::size_t(tokenizer.vocab()), 0);
  if (text.size() == 0) return summary;
  // The next batch is read and encoded while this one is written.
  std::future<Batch> next = start(0);
  for (bool last = false; !last;) {
    const Batch batch = next.get();
    last = batch.end == text.size();
    if (!last) next = start(batch.end);
    write_batch(batch, writer, tokenizer);
    for (const Block& block : batch.blocks) {
      summary.invalid_utf8 += block.invalid_utf8;
      for (std::size_t id = 0; id < block.counts.size(); ++id) summary.train_counts[id] += block.counts[id];
    }
    if (progress) progress(batch.end);
  }
  return summary;
}

}  // namespace kpipe::data
