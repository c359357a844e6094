#pragma once
// SHA-256 of bytes and of files, for the source-dump hash in codebook files and the hashes of
// exported artifacts, through OpenSSL's EVP interface (its SHA-NI and AVX2 code hashes a large dump
// several times faster than a portable loop). Streaming; thread-compatible (one object per thread).

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace gsrq {

class Sha256 {
public:
    Sha256(); // throws Error(Runtime) if OpenSSL cannot start a SHA-256 context
    ~Sha256();
    Sha256(Sha256&&) noexcept;
    Sha256& operator=(Sha256&&) noexcept;
    void update(const void* data, std::size_t n);
    std::string hexDigest(); // finishes the hash; call once

private:
    struct Ctx;
    std::unique_ptr<Ctx> m_ctx;
};

// Hex SHA-256 of the files' contents, in the order given (a dump of several shards hashes them all).
std::string sha256Files(const std::vector<std::string>& paths);

} // namespace gsrq
