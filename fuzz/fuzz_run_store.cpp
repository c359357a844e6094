// A run store file, as `gsrq runs list/show` and the app's Runs page open it: any bytes named as the
// store; what opens is read run by run. SQLite checks its own format; this searches our schema
// handling (versions, migrations, rows of the wrong type, missing tables). The same bytes are also
// imported into a fresh store first, as `gsrq runs import` and a plan's merge do.
#include "fuzz_input.h"

#include "core/base/error.h"
#include "core/jobs/result_json.h"
#include "core/store/run_store.h"

#include <fstream>
#include <iterator>
#include <string>

namespace {

// The bytes of a new, empty store: made once, so that each input costs an import, not a schema.
const std::string& emptyStore()
{
    static const std::string bytes = [] {
        const auto path = gsrq::fuzz::writeInput("template.db", {});
        {
            gsrq::RunStore make(path);
        }
        std::ifstream in(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }();
    return bytes;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace gsrq::fuzz;
    clearScratch(); // no -wal or -shm of an earlier input
    const auto path = writeInput("runs.db", {reinterpret_cast<const char*>(data), size});
    try {
        gsrq::RunStore target(writeInput("target.db", emptyStore()));
        (void)target.importRuns(path);
        for (const auto& r : target.listRuns())
            (void)target.iterations(r.id);
    } catch (const gsrq::Error&) {
    }
    try {
        gsrq::RunStore store(path);
        for (const auto& r : store.listRuns()) {
            (void)gsrq::runHeadline(r.summaryJson);
            (void)store.iterations(r.id);
            (void)store.metrics(r.id);
            (void)store.series(r.id);
            (void)store.artifacts(r.id);
            (void)store.notes(r.id);
        }
        (void)store.integrityOk();
    } catch (const gsrq::Error&) {
    }
    return 0;
}
