// gsrq.Codebooks and gsrq.CodebookFile: codebooks files, encoding, decoding.

#include "app/python/binding.h"

#include "core/cluster/codebook_file.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace gsrq::python {

using namespace nb::literals;

namespace {

// The codewords' type a file is written with: f32 or f16.
DType codewordDType(const std::string& dtype)
{
    if (dtype != "f32" && dtype != "f16")
        throwInvalid("dtype '", dtype, "': expected f32 or f16");
    return dtype == "f16" ? DType::F16 : DType::F32;
}

std::string tensorList(const CodebookFile& f)
{
    std::string names;
    for (const auto& e : f.entries)
        names += (names.empty() ? "" : ", ") + e.tensor;
    return names;
}

// The entry of `tensor`, or an error naming `where` and the tensors the file holds.
const CodebookEntry& entryOf(const CodebookFile& f, const std::string& tensor, const std::string& where)
{
    const CodebookEntry* e = f.find(tensor);
    if (!e)
        throwInvalid(where, "no codebooks for tensor '", tensor, "' (it holds: ", tensorList(f), ")");
    return *e;
}

Codes encodeRows(const Codebooks& cb, const InRows& xa, int beam, int stages)
{
    const auto x = rowsOf(xa, "x");
    if (beam < 1)
        throwInvalid("beam ", beam, ": must be ≥ 1");
    if (stages > cb.stages)
        throwInvalid("stages ", stages, ": the codebooks have ", cb.stages);
    nb::gil_scoped_release release;
    auto backend = makeCpuBackend();
    return encode(x, cb, beam, *backend, stages);
}

} // namespace

Codes codesOf(const InCodes& a, const Codebooks& cb)
{
    const std::int64_t MR = std::int64_t(cb.subspaces) * cb.stages;
    std::int64_t n = 0;
    if (a.ndim() == 3 && std::int64_t(a.shape(1)) == cb.subspaces && std::int64_t(a.shape(2)) == cb.stages)
        n = std::int64_t(a.shape(0));
    else if (a.ndim() == 2 && std::int64_t(a.shape(1)) == MR)
        n = std::int64_t(a.shape(0));
    else
        throwInvalid("codes: shape must be (N, ", cb.subspaces, ", ", cb.stages,
                     ") for these codebooks (M=", cb.subspaces, ", R=", cb.stages, ")");
    Codes c(n, MR);
    const std::int64_t* p = a.data();
    for (std::int64_t i = 0; i < n * MR; ++i) {
        if (p[i] < 0 || p[i] >= cb.k)
            throwInvalid("codes: ", p[i], " at row ", i / MR, " is outside 0..", cb.k - 1, " (K=", cb.k, ")");
        c.data()[i] = std::int32_t(p[i]);
    }
    return c;
}

OutArray<std::int32_t> codesArray(Codes&& c, const Codebooks& cb)
{
    std::vector<std::int32_t> v(c.data(), c.data() + c.size());
    return owned(std::move(v), {std::size_t(c.rows()), std::size_t(cb.subspaces), std::size_t(cb.stages)});
}

void bindCodebooks(nb::module_& m)
{
    nb::class_<PyCodebooks>(m, "Codebooks")
        .def_prop_ro("dim", [](const PyCodebooks& c) { return c.cb.dim; })
        .def_prop_ro("stages", [](const PyCodebooks& c) { return c.cb.stages; })
        .def_prop_ro("k", [](const PyCodebooks& c) { return c.cb.k; })
        .def_prop_ro("subspaces", [](const PyCodebooks& c) { return c.cb.subspaces; })
        .def_prop_ro("features", [](const PyCodebooks& c) { return c.cb.features(); })
        .def_prop_ro("bpa", [](const PyCodebooks& c) { return bitsPerActivation(c.cb.dim, c.cb.stages, c.cb.k); })
        .def_prop_ro(
            "codewords",
            [](PyCodebooks& c) {
                const std::size_t shape[4] = {std::size_t(c.cb.subspaces), std::size_t(c.cb.stages),
                                              std::size_t(c.cb.k), std::size_t(c.cb.dim)};
                // A view of the codewords that keeps these codebooks alive.
                return nb::ndarray<nb::numpy, const float, nb::ndim<4>>(c.cb.data.data(), 4, shape, nb::find(&c));
            },
            nb::rv_policy::automatic)
        .def_prop_ro("order",
                     [](const PyCodebooks& c) -> nb::object {
                         if (c.cb.order.empty())
                             return nb::none();
                         return nb::cast(owned(std::vector<std::int32_t>(c.cb.order), {c.cb.order.size()}));
                     })
        .def(
            "encode",
            [](const PyCodebooks& c, const InRows& x, int beam, int stages) {
                return codesArray(encodeRows(c.cb, x, beam, stages), c.cb);
            },
            "x"_a, "beam"_a = 1, "stages"_a = -1)
        .def(
            "decode",
            [](const PyCodebooks& c, const InCodes& codes, int stages) {
                if (stages > c.cb.stages)
                    throwInvalid("stages ", stages, ": the codebooks have ", c.cb.stages);
                Codes k = codesOf(codes, c.cb);
                nb::gil_scoped_release release;
                return ownedMatrix(decode(k, c.cb, stages));
            },
            "codes"_a, "stages"_a = -1)
        .def_static(
            "load",
            [](const std::string& path, std::optional<std::string> tensor) {
                const CodebookFile f = readCodebookFile(path);
                if (!tensor) {
                    if (f.entries.size() != 1)
                        throwInvalid(path, ": holds codebooks for ", f.entries.size(), " tensors (", tensorList(f),
                                     "); name one with tensor=");
                    return PyCodebooks{f.entries.front().codebooks};
                }
                return PyCodebooks{entryOf(f, *tensor, path + ": ").codebooks};
            },
            "path"_a, "tensor"_a = nb::none())
        .def(
            "save",
            [](const PyCodebooks& c, const std::string& path, const std::string& tensor, const std::string& dtype,
               const std::map<std::string, std::string>& metadata) {
                const DType type = codewordDType(dtype);
                if (tensor.empty())
                    throwInvalid("tensor: a name is needed (e.g. layers.0.key)");
                CodebookFile f;
                f.metadata = metadata;
                f.metadata["dim"] = std::to_string(c.cb.dim);
                f.metadata["stages"] = std::to_string(c.cb.stages);
                f.metadata["k"] = std::to_string(c.cb.k);
                f.metadata["bpa"] = cat(bitsPerActivation(c.cb.dim, c.cb.stages, c.cb.k));
                f.metadata.try_emplace("key_rope", "pre");
                f.metadata.try_emplace("rope_pairing", "half");
                f.entries.push_back({tensor, c.cb, {}});
                writeCodebookFile(path, f, type);
            },
            "path"_a, "tensor"_a = "rows", "dtype"_a = "f32", "metadata"_a = std::map<std::string, std::string>{})
        .def(
            "evaluate",
            [](const PyCodebooks& c, const InRows& x, int beam) {
                const Codes k = encodeRows(c.cb, x, beam, -1);
                return metricsDict(computeMetrics(rowsOf(x, "x"), decode(k, c.cb)));
            },
            "x"_a, "beam"_a = 1);

    nb::class_<PyCodebookFile>(m, "CodebookFile")
        .def(nb::init<>())
        .def_static(
            "load", [](const std::string& path) { return PyCodebookFile{readCodebookFile(path)}; }, "path"_a)
        .def(
            "save",
            [](const PyCodebookFile& f, const std::string& path, const std::string& dtype) {
                const DType type = codewordDType(dtype);
                if (f.file.entries.empty())
                    throwInvalid(path, ": the file holds no codebooks to save");
                writeCodebookFile(path, f.file, type);
            },
            "path"_a, "dtype"_a = "f32")
        .def_prop_rw(
            "metadata", [](const PyCodebookFile& f) { return f.file.metadata; },
            [](PyCodebookFile& f, const std::map<std::string, std::string>& m) { f.file.metadata = m; })
        .def_prop_ro("tensors",
                     [](const PyCodebookFile& f) {
                         std::vector<std::string> n;
                         for (const auto& e : f.file.entries)
                             n.push_back(e.tensor);
                         return n;
                     })
        .def(
            "get",
            [](const PyCodebookFile& f, const std::string& tensor) {
                return PyCodebooks{entryOf(f.file, tensor, "").codebooks};
            },
            "tensor"_a)
        .def(
            "codes",
            [](const PyCodebookFile& f, const std::string& tensor) -> nb::object {
                const CodebookEntry& e = entryOf(f.file, tensor, "");
                if (!e.codes)
                    return nb::none();
                Codes c = *e.codes;
                return nb::cast(codesArray(std::move(c), e.codebooks));
            },
            "tensor"_a)
        .def(
            "put",
            [](PyCodebookFile& f, const std::string& tensor, const PyCodebooks& c, std::optional<InCodes> codes) {
                if (tensor.empty())
                    throwInvalid("tensor: a name is needed (e.g. layers.0.key)");
                CodebookEntry e{tensor, c.cb, {}};
                if (codes)
                    e.codes = codesOf(*codes, c.cb);
                for (auto& x : f.file.entries)
                    if (x.tensor == tensor) {
                        x = std::move(e);
                        return;
                    }
                f.file.entries.push_back(std::move(e));
            },
            "tensor"_a, "codebooks"_a, "codes"_a = nb::none());
}

} // namespace gsrq::python
