// gsrq.Dump and gsrq.open_dump: KV dumps, their tensors as views of the mapped file.

#include "app/python/binding.h"

#include "core/io/kv_dump.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>

namespace gsrq::python {

using namespace nb::literals;

namespace {

struct PyDump {
    std::shared_ptr<KvDump> dump;
};

const KvTensor& tensorOf(const PyDump& d, const std::string& name)
{
    return d.dump->get(name);
}

nb::dict tensorInfo(const KvTensor& t)
{
    nb::dict d;
    d["name"] = t.view.name;
    d["dtype"] = dtypeName(t.view.dtype);
    nb::list shape;
    for (auto s : t.view.shape)
        shape.append(s);
    d["shape"] = nb::tuple(shape);
    d["layer"] = t.layer;
    d["kind"] = kvKindName(t.kind);
    d["file"] = t.view.file ? t.view.file->path() : std::string();
    d["address"] = reinterpret_cast<std::uintptr_t>(t.view.data);
    d["nbytes"] = t.view.nbytes;
    return d;
}

// The tensor's bytes in the mapped file: a read-only uint8 array that keeps the mapping alive.
nb::ndarray<nb::numpy, const std::uint8_t, nb::ndim<1>> tensorBytes(const PyDump& d, const std::string& name)
{
    const KvTensor& t = tensorOf(d, name);
    auto* keep = new std::shared_ptr<const MappedFile>(t.view.file);
    nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<const MappedFile>*>(p); });
    const std::size_t shape[1] = {t.view.nbytes};
    return {reinterpret_cast<const std::uint8_t*>(t.view.data), 1, shape, owner};
}

} // namespace

void bindDumps(nb::module_& m)
{
    nb::class_<PyDump>(m, "Dump")
        .def_prop_ro("path", [](const PyDump& d) { return d.dump->path(); })
        .def_prop_ro("format", [](const PyDump& d) { return d.dump->format(); })
        .def_prop_ro("files", [](const PyDump& d) { return d.dump->files(); })
        .def_prop_ro("metadata", [](const PyDump& d) { return d.dump->metadata(); })
        .def_prop_ro("names",
                     [](const PyDump& d) {
                         std::vector<std::string> n;
                         for (const auto& t : d.dump->tensors())
                             n.push_back(t.view.name);
                         return n;
                     })
        .def(
            "info", [](const PyDump& d, const std::string& name) { return tensorInfo(tensorOf(d, name)); }, "name"_a)
        .def("_bytes", &tensorBytes, "name"_a)
        .def(
            "load",
            [](const PyDump& d, const std::string& name, bool dropNonFinite) {
                LoadedTensor l = loadForClustering(tensorOf(d, name), dropNonFinite);
                return ownedMatrix(std::move(l.rows));
            },
            "name"_a, "drop_non_finite"_a = false)
        .def(
            "weights",
            [](const PyDump& d, const std::string& name, const std::string& mode, double tau) {
                const WeightMode wm = weightModeOf(mode);
                const KvTensor& t = tensorOf(d, name);
                LoadedTensor l = loadForClustering(t, false);
                Eigen::VectorXf w = weightsFor(*d.dump, t, l, wm, tau);
                return owned(std::vector<float>(w.data(), w.data() + w.size()), {std::size_t(w.size())});
            },
            "name"_a, "mode"_a = "grad-log", "tau"_a = 1.0);
    m.def(
        "open_dump", [](const std::string& path) { return PyDump{std::make_shared<KvDump>(KvDump::open(path))}; },
        "path"_a);
}

} // namespace gsrq::python
