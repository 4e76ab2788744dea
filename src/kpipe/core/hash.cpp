#include "kpipe/core/hash.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace kpipe {

namespace {
namespace xxh {  // (named: a unity build joins this file with others' helpers)

// XXH64's five primes and its steps, as its specification gives them.
constexpr std::uint64_t prime1 = 0x9E3779B185EBCA87ull, prime2 = 0xC2B2AE3D27D4EB4Full,
                        prime3 = 0x165667B19E3779F9ull, prime4 = 0x85EBCA77C2B2AE63ull,
                        prime5 = 0x27D4EB2F165667C5ull;

constexpr std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// The specification reads its input little-endian, as the hosts kpipe runs on store it (memcpy: any
// alignment).
std::uint64_t read64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::uint32_t read32(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

constexpr std::uint64_t round(std::uint64_t lane, std::uint64_t input) {
  return rotl(lane + input * prime2, 31) * prime1;
}

constexpr std::uint64_t merge(std::uint64_t hash, std::uint64_t lane) {
  return (hash ^ round(0, lane)) * prime1 + prime4;
}

// Whole 32-byte rounds of [p, p + bytes) into the lanes; returns the bytes consumed.
std::size_t consume_rounds(std::array<std::uint64_t, 4>& lanes, const unsigned char* p, std::size_t bytes) {
  std::uint64_t a = lanes[0], b = lanes[1], c = lanes[2], d = lanes[3];
  std::size_t done = 0;
  for (; bytes - done >= 32; done += 32) {
    a = round(a, read64(p + done));
    b = round(b, read64(p + done + 8));
    c = round(c, read64(p + done + 16));
    d = round(d, read64(p + done + 24));
  }
  lanes = {a, b, c, d};
  return done;
}

}  // namespace xxh
}  // namespace

Xxh64::Xxh64(std::uint64_t seed)
    : lanes_{seed + xxh::prime1 + xxh::prime2, seed + xxh::prime2, seed, seed - xxh::prime1}, seed_(seed) {}

void Xxh64::update(const void* data, std::size_t bytes) {
  using xxh::consume_rounds;
  const auto* p = static_cast<const unsigned char*>(data);
  total_bytes_ += bytes;
  if (pending_bytes_ > 0) {  // complete the round begun by an earlier piece
    const std::size_t take = std::min(bytes, pending_.size() - pending_bytes_);
    std::memcpy(pending_.data() + pending_bytes_, p, take);
    pending_bytes_ += take;
    p += take;
    bytes -= take;
    if (pending_bytes_ < pending_.size()) return;
    consume_rounds(lanes_, pending_.data(), pending_.size());
    pending_bytes_ = 0;
  }
  const std::size_t done = consume_rounds(lanes_, p, bytes);
  std::memcpy(pending_.data(), p + done, bytes - done);
  pending_bytes_ = bytes - done;
}

std::uint64_t Xxh64::digest() const {
  using namespace xxh;
  std::uint64_t h;
  if (total_bytes_ >= 32) {
    const auto& [a, b, c, d] = lanes_;
    h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18);
    for (const std::uint64_t lane : lanes_) h = merge(h, lane);
  } else {
    h = seed_ + prime5;
  }
  h += total_bytes_;
  const unsigned char* p = pending_.data();
  std::size_t left = pending_bytes_;
  for (; left >= 8; p += 8, left -= 8) h = rotl(h ^ round(0, read64(p)), 27) * prime1 + prime4;
  if (left >= 4) {
    h = rotl(h ^ (std::uint64_t(read32(p)) * prime1), 23) * prime2 + prime3;
    p += 4;
    left -= 4;
  }
  for (; left > 0; ++p, --left) h = rotl(h ^ (*p * prime5), 11) * prime1;
  h ^= h >> 33;
  h *= prime2;
  h ^= h >> 29;
  h *= prime3;
  h ^= h >> 32;
  return h;
}

std::uint64_t xxh64(const void* data, std::size_t bytes, std::uint64_t seed) {
  Xxh64 hash(seed);
  hash.update(data, bytes);
  return hash.digest();
}

const char* to_string(ByteHash kind) { return kind == ByteHash::xxh64 ? "xxh64" : "fnv1a64"; }

std::uint64_t hash_bytes(ByteHash kind, std::string_view bytes) {
  return kind == ByteHash::xxh64 ? xxh64(bytes) : fnv1a64(bytes);
}

std::string hash_hex(std::uint64_t hash) { return fmt::format("{:016x}", hash); }

}  // namespace kpipe
