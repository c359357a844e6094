// gsrq: the headless face of GSRQ Studio. Exit codes: 0 ok, 2 bad input or flags, 1 failure at run time.

#include "commands.h"
#include "core/base/error.h"
#include "core/base/version.h"
#include "recording.h"

#include <cstdio>
#include <iostream>
#include <new>

int main(int argc, char** argv)
{
    using namespace gsrq::cli;
    CLI::App root{"gsrq: KV-cache quantization with Gain-Shape K-means and GSRQ"};
    root.set_version_flag("--version", std::string("gsrq ") + gsrq::kVersion);
    root.require_subcommand(1);
    auto& global = gsrq::cli::globalOptions();
    root.add_option("--db", global.db, "Run store to record into (default: $XDG_DATA_HOME/gsrq/runs.db)");
    root.add_flag("--no-db", global.noDb, "Record nothing");
    root.add_option("--group", global.group, "Group to record runs under (gsrq plan sets its plan's id)");
    for (int i = 0; i < argc; ++i)
        global.command += (i ? " " : "") + std::string(argv[i]);
    std::vector<Command> commands{
        registerInfo(root),         registerCompare(root),    registerSweep(root),      registerSynth(root),
        registerBenchCluster(root), registerDevices(root),    registerTrain(root),      registerEval(root),
        registerCodebooks(root),    registerRuns(root),       registerCheckGpu(root),   registerBenchTrain(root),
        registerBenchDecode(root),  registerPaperCheck(root), registerPerplexity(root), registerPlan(root),
        registerTokenize(root),     registerGenerate(root),   registerTasks(root)};
    // The first word that is not a global option names the command.
    int first = 1;
    const auto takesValue = [](const std::string& a) { return a == "--db" || a == "--group"; };
    while (first < argc && (std::string(argv[first]) == "--no-db" || takesValue(argv[first])))
        first += takesValue(argv[first]) ? 2 : 1;
    if (first < argc && argv[first][0] != '-') {
        bool known = false;
        std::string names;
        for (const auto& c : commands) {
            known = known || c.app->get_name() == argv[first];
            names += (names.empty() ? "" : ", ") + c.app->get_name();
        }
        if (!known) {
            std::cerr << "gsrq: unknown command '" << argv[first] << "' (commands: " << names << ")\n";
            return 2;
        }
    }
    try {
        root.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return root.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return root.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return root.exit(e);
    } catch (const CLI::ParseError& e) {
        std::cerr << "gsrq: " << e.what() << "\n";
        std::cerr << "Run 'gsrq --help' or 'gsrq <command> --help' for usage.\n";
        return 2;
    }
    gsrq::cli::installStopHandler();
    try {
        for (auto& c : commands)
            if (c.app->parsed())
                c.run();
        return 0;
    } catch (const gsrq::cli::Cancelled& c) {
        std::cerr << "gsrq: " << c.message << "\n";
        return 130;
    } catch (const gsrq::Error& e) {
        std::cerr << "gsrq: " << e.what() << "\n";
        return e.kind() == gsrq::ErrorKind::InvalidInput ? 2 : 1;
    } catch (const std::bad_alloc&) {
        std::cerr << "gsrq: out of memory\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "gsrq: " << e.what() << "\n";
        return 1;
    }
}
