#include "fuzz_input.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace fs = std::filesystem;

namespace gsrq::fuzz {

const std::string& scratchDir()
{
    // Never destroyed: the exit handler that removes the directory runs after static destructors.
    static const std::string& dir = *new std::string([] {
        std::string base = fs::is_directory("/dev/shm") ? "/dev/shm" : fs::temp_directory_path().string();
        std::string templ = base + "/gsrq-fuzz-XXXXXX";
        if (!mkdtemp(templ.data())) {
            std::perror("gsrq fuzz: mkdtemp");
            std::abort();
        }
        std::atexit([] { fs::remove_all(scratchDir()); });
        return templ;
    }());
    return dir;
}

std::string writeInput(const std::string& name, std::string_view bytes)
{
    const std::string path = scratchDir() + "/" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) {
        std::fprintf(stderr, "gsrq fuzz: cannot write %s\n", path.c_str());
        std::abort();
    }
    return path;
}

void clearScratch()
{
    for (const auto& e : fs::directory_iterator(scratchDir()))
        fs::remove_all(e.path());
}

std::int64_t dtypeBytes(const std::string& d)
{
    if (d == "F64" || d == "I64" || d == "U64")
        return 8;
    if (d == "F32" || d == "I32" || d == "U32")
        return 4;
    if (d == "F16" || d == "BF16" || d == "I16" || d == "U16")
        return 2;
    return 1;
}

std::int64_t dataBytes(const std::string& dtype, const std::vector<std::int64_t>& shape)
{
    std::int64_t bytes = dtypeBytes(dtype);
    for (auto s : shape)
        if (s < 0 || __builtin_mul_overflow(bytes, s, &bytes) || bytes > 65536)
            return 16;
    return bytes;
}

std::string safetensorsBytes(const std::string& headerJson, std::string_view data)
{
    const std::uint64_t n = headerJson.size();
    std::string out(reinterpret_cast<const char*>(&n), 8);
    out += headerJson;
    out += data;
    return out;
}

} // namespace gsrq::fuzz

#include "core/base/error.h"
#include "core/cluster/codebook_file.h"
#include "core/cluster/quantizer.h"
#include "core/cluster/weights.h"
#include "core/io/kv_dump.h"

namespace gsrq::fuzz {

void exerciseDump(const std::string& path)
{
    try {
        const auto dump = KvDump::open(path);
        (void)dump.totalBytes();
        for (const auto& t : dump.tensors()) {
            try {
                const auto loaded = loadForClustering(t, true);
                if (dump.gradientOf(t))
                    (void)weightsFor(dump, t, loaded, WeightMode::GradLog, 1.0);
            } catch (const gsrq::Error&) {
            }
        }
    } catch (const gsrq::Error&) {
    }
}

} // namespace gsrq::fuzz

namespace gsrq::fuzz {

void exerciseCodebooks(const std::string& path)
{
    try {
        const auto file = readCodebookFile(path);
        for (const auto& e : file.entries)
            if (e.codes)
                (void)decode(*e.codes, e.codebooks);
    } catch (const gsrq::Error&) {
    }
}

} // namespace gsrq::fuzz
