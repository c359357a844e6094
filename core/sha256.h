#pragma once
// SHA-256 (FIPS 180-4) of bytes and of files, for the source-dump hash in codebook files and the
// hashes of exported artifacts. Streaming; thread-compatible (one object per thread).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gsrq {

class Sha256 {
public:
    Sha256();
    void update(const void* data, std::size_t n);
    std::string hexDigest(); // finishes the hash; call once

private:
    void block(const std::uint8_t* p);
    std::array<std::uint32_t, 8> m_h;
    std::array<std::uint8_t, 64> m_buf{};
    std::size_t m_used = 0;
    std::uint64_t m_bytes = 0;
};

// Hex SHA-256 of the files' contents, in the order given (a dump of several shards hashes them all).
std::string sha256Files(const std::vector<std::string>& paths);

} // namespace gsrq
