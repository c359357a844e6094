#pragma once
// The CUDA emulator's cub::DeviceRadixSort::SortPairs: a stable sort of (key, value) pairs by the key
// bits [beginBit, endBit), as CUB's LSD radix sort orders them, computed on the CPU. With a null
// temporary buffer it reports the bytes it needs, as CUB does.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

namespace cub {

struct DeviceRadixSort {
    template <class K, class V>
    static cudaError_t SortPairs(void* temp, std::size_t& tempBytes, const K* keysIn, K* keysOut, const V* valuesIn,
                                 V* valuesOut, int n, int beginBit = 0, int endBit = int(sizeof(K) * 8),
                                 cudaStream_t = nullptr)
    {
        static_assert(std::is_integral_v<K>, "the emulator sorts integer keys");
        if (!temp) {
            tempBytes = 1;
            return cudaSuccess;
        }
        if (n < 0 || beginBit < 0 || endBit > int(sizeof(K) * 8) || beginBit >= endBit)
            return cudaErrorInvalidValue;
        using U = std::make_unsigned_t<K>;
        // CUB orders signed keys by flipping the sign bit (two's complement to offset binary).
        const U flip = std::is_signed_v<K> ? U(U(1) << (sizeof(K) * 8 - 1)) : U(0);
        const int width = endBit - beginBit;
        const U mask = width >= int(sizeof(U) * 8) ? U(~U(0)) : U((U(1) << width) - 1);
        auto digit = [&](K k) { return U((U(U(k) ^ flip) >> beginBit) & mask); };
        std::vector<int> order(static_cast<std::size_t>(n));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return digit(keysIn[a]) < digit(keysIn[b]); });
        std::vector<K> k(static_cast<std::size_t>(n));
        std::vector<V> v(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) {
            k[std::size_t(i)] = keysIn[order[std::size_t(i)]];
            v[std::size_t(i)] = valuesIn[order[std::size_t(i)]];
        }
        std::copy(k.begin(), k.end(), keysOut);
        std::copy(v.begin(), v.end(), valuesOut);
        return cudaSuccess;
    }
};

} // namespace cub
