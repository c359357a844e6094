#include "recording.h"

#include "version.h"

namespace gsrq::cli {

GlobalOptions& globalOptions()
{
    static GlobalOptions options;
    return options;
}

std::unique_ptr<RunStore> openStore()
{
    const auto& g = globalOptions();
    if (g.noDb)
        return nullptr;
    return std::make_unique<RunStore>(g.db.empty() ? RunStore::defaultPath() : g.db);
}

CliRun::CliRun(const std::string& kind, const std::string& settingsJson, const std::string& dumpPath,
               const std::vector<std::string>& dumpFiles, const std::string& backend, const std::string& device,
               const std::string& tensor)
    : m_store(openStore())
{
    if (!m_store)
        return;
    m_sha = dumpFiles.empty() ? std::string() : m_store->dumpHash(dumpFiles);
    RunInfo info;
    info.kind = kind;
    info.toolVersion = kVersion;
    info.backend = backend;
    info.device = device;
    info.dumpPath = dumpPath;
    info.dumpSha256 = m_sha;
    info.settingsJson = settingsJson;
    info.command = globalOptions().command;
    m_recorder.emplace(*m_store, info, tensor);
}

void CliRun::done(const std::string& summaryJson)
{
    if (m_recorder)
        m_recorder->finish("done", summaryJson);
}

void CliRun::fail(const std::string& message)
{
    if (!m_recorder)
        return;
    try {
        m_recorder->finish("failed", "{}", message);
    } catch (...) {
        // The store itself failed (a full disk, say): the original error is what the user sees.
    }
}

} // namespace gsrq::cli
