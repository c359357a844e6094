// gsrq_gpu built without CUDA: the decode cache and benchmark say so.

#include "decode.h"

#include "error.h"

namespace gsrq::gpu {

struct DeviceDecodeCache::Impl {};

namespace {
[[noreturn]] void noCuda()
{
    throwRuntime("decode on the GPU: this build has no CUDA (configure with nvcc present)");
}
} // namespace

std::int64_t DeviceDecodeCache::tokens() const
{
    noCuda();
}
const DecodeCacheConfig& DeviceDecodeCache::config() const
{
    noCuda();
}
std::pair<Codes, Codes> DeviceDecodeCache::append(const MatrixRF&, const MatrixRF&)
{
    noCuda();
}
void DeviceDecodeCache::appendRandom(std::int64_t, std::uint64_t)
{
    noCuda();
}
PackedCodes DeviceDecodeCache::keyCodes(int) const
{
    noCuda();
}
PackedCodes DeviceDecodeCache::valueCodes(int) const
{
    noCuda();
}
MatrixRF DeviceDecodeCache::fp16Keys(int) const
{
    noCuda();
}
MatrixRF DeviceDecodeCache::fp16Values(int) const
{
    noCuda();
}
const Codebooks& DeviceDecodeCache::keyBooks16() const
{
    noCuda();
}
const Codebooks& DeviceDecodeCache::valueBooks16() const
{
    noCuda();
}
void DeviceDecodeCache::setQuery(const MatrixRF&, std::int64_t)
{
    noCuda();
}
void DeviceDecodeCache::enqueue(DecodePath)
{
    noCuda();
}
MatrixRF DeviceDecodeCache::output()
{
    noCuda();
}
MatrixRF DeviceDecodeCache::decode(DecodePath, const MatrixRF&, std::int64_t)
{
    noCuda();
}
SplitPlan DeviceDecodeCache::plan(DecodePath) const
{
    noCuda();
}
std::string DeviceDecodeCache::pathProblem(DecodePath) const
{
    noCuda();
}
bool DeviceDecodeCache::paperUsesBins() const
{
    noCuda();
}
double DeviceDecodeCache::timeAppend(int)
{
    noCuda();
}
void DeviceDecodeCache::synchronize()
{
    noCuda();
}
void* DeviceDecodeCache::stream() const
{
    noCuda();
}

DeviceDecodeCache::DeviceDecodeCache(const DecodeCacheConfig&, const Codebooks&, const Codebooks&)
{
    noCuda();
}

DeviceDecodeCache::~DeviceDecodeCache() = default;

DecodeBenchReport runDecodeBench(const DecodeBenchOptions&, const Codebooks&, const Codebooks&, const std::string&,
                                 const std::function<void(const DecodeBenchPoint&)>&, const std::function<bool()>&)
{
    throwInvalid("bench-decode needs a CUDA device: this build has no CUDA (configure with nvcc present)");
}

} // namespace gsrq::gpu
