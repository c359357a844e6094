// gsrq_gpu built without CUDA: the decode cache and the benchmark say so.

#include "core/decode/decode_bench.h"
#include "gpu/decode/decode.h"

#include "core/base/error.h"

namespace gsrq::gpu {

std::unique_ptr<DeviceDecodeCache> makeDeviceDecodeCache(const DecodeCacheConfig&, const Codebooks&, const Codebooks&)
{
    throwRuntime("decode on the GPU: this build has no CUDA (configure with nvcc present)");
}

DecodeBenchReport runDecodeBench(const DecodeBenchOptions&, const Codebooks&, const Codebooks&, const std::string&,
                                 const std::function<void(const DecodeBenchPoint&)>&, const std::function<bool()>&)
{
    throwInvalid("bench-decode needs a CUDA device: this build has no CUDA (configure with nvcc present)");
}

} // namespace gsrq::gpu
