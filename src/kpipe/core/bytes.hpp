#pragma once
// Sizes in bytes as people write them: "6GiB", "512MiB", "2.5GB", "1e9", "123456" (binary units are
// powers of 1024, decimal ones of 1000; a bare number is bytes), and back: "1.50 GiB".
#include <cstdint>
#include <optional>
#include <string>

namespace kpipe {

// The size, or nullopt when `text` is not one (negative, not a number, an unknown unit).
std::optional<std::int64_t> parse_bytes(const std::string& text);

// "812 B", "3.25 KiB", "1.50 GiB": three significant figures in the largest binary unit below the size.
std::string format_bytes(std::int64_t bytes);
// The same for an estimate, which may not fit 64 bits (what a model of 10^9 layers would need): "727 TiB".
std::string format_estimated_bytes(double bytes);

}  // namespace kpipe
