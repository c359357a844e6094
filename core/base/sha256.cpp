#include "core/base/sha256.h"

#include "core/base/error.h"
#include "core/base/mapped_file.h"

#include <openssl/evp.h>

#include <algorithm>

namespace gsrq {

struct Sha256::Ctx {
    EVP_MD_CTX* md = nullptr;
    ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : m_ctx(std::make_unique<Ctx>())
{
    m_ctx->md = EVP_MD_CTX_new();
    if (!m_ctx->md || EVP_DigestInit_ex(m_ctx->md, EVP_sha256(), nullptr) != 1)
        throwRuntime("SHA-256: OpenSSL could not start a digest");
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, std::size_t n)
{
    if (EVP_DigestUpdate(m_ctx->md, data, n) != 1)
        throwRuntime("SHA-256: OpenSSL failed to hash ", n, " bytes");
}

std::string Sha256::hexDigest()
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(m_ctx->md, digest, &len) != 1)
        throwRuntime("SHA-256: OpenSSL failed to finish the digest");
    static const char* hex = "0123456789abcdef";
    std::string out;
    out.reserve(2 * len);
    for (unsigned int i = 0; i < len; ++i) {
        out.push_back(hex[digest[i] >> 4]);
        out.push_back(hex[digest[i] & 0xf]);
    }
    return out;
}

std::string sha256Files(const std::vector<std::string>& paths)
{
    Sha256 h;
    for (const auto& p : paths) {
        const auto f = MappedFile::open(p);
        // Pieces of 64 MiB: the mapping is read once, in order, and the kernel reads ahead.
        constexpr std::size_t kPiece = std::size_t(64) << 20;
        const std::byte* base = f->data();
        for (std::size_t off = 0; off < f->size(); off += kPiece)
            h.update(base + off, std::min(kPiece, f->size() - off));
    }
    return h.hexDigest();
}

} // namespace gsrq
