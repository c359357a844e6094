// gsrq-studio: the desktop face of GSRQ Studio.
//   gsrq-studio [DUMP]
//   gsrq-studio --screenshot FILE.png [--page NAME] [--open DUMP] [--tensor NAME] [--store FILE]
//               [--run model|compare|train|sweep|paper-check|latency|tasks] [--select IDS] [--report FILE]
// --screenshot renders a page (after a job, with --run) to a PNG and exits: 0 on success.
// --report writes the report File ▸ Export report writes (.html, .pdf; .png: a picture of its top)
// and exits; it goes with or without --screenshot.

#include "compare_page.h"
#include "dataset_page.h"
#include "latency_page.h"
#include "long_context_page.h"
#include "main_window.h"
#include "model_page.h"
#include "runs_page.h"
#include "sweeps_page.h"
#include "train_page.h"
#include "weights_page.h"

#include <QApplication>
#include <QComboBox>
#include <QCommandLineParser>
#include <QCoreApplication>
#include <QEventLoop>
#include <QLineEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QTimer>

#include <cstdio>

using namespace gsrq::studio;

namespace {

// Starts the named job on its page and waits for it; false if it failed or could not start.
bool runAndWait(MainWindow& w, const QString& job, const QString& tensor)
{
    QEventLoop loop;
    bool ok = false;
    auto done = [&](bool success) {
        ok = success;
        loop.quit();
    };
    if (job == "compare") {
        auto* page = w.comparePage();
        if (!tensor.isEmpty())
            page->tensorBox()->setCurrentText(tensor);
        QObject::connect(page, &ComparePage::runFinished, &loop, done);
        if (!page->runButton()->isEnabled())
            return false;
        page->runButton()->click();
    } else if (job == "model") {
        auto* page = w.modelPage();
        if (!tensor.isEmpty())
            page->tensorsEdit()->setText(tensor);
        QObject::connect(page, &ModelPage::runFinished, &loop, done);
        if (!page->runButton()->isEnabled())
            return false;
        page->runButton()->click();
    } else if (job == "train") {
        auto* page = w.trainPage();
        if (!tensor.isEmpty())
            page->tensorsEdit()->setText(tensor);
        QObject::connect(page, &TrainPage::runFinished, &loop, done);
        page->runButton()->click();
    } else if (job == "tasks") {
        auto* page = w.longContextPage();
        if (!tensor.isEmpty())
            page->methodsEdit()->setText(tensor);
        QObject::connect(page, &LongContextPage::runFinished, &loop, done);
        page->runButton()->click();
    } else if (job == "methods") {
        auto* page = w.trainPage();
        if (!tensor.isEmpty())
            page->compareMethodsEdit()->setText(tensor);
        QObject::connect(page, &TrainPage::compareFinished, &loop, done);
        page->compareButton()->click();
    } else if (job == "sweep") {
        auto* page = w.sweepsPage();
        if (!tensor.isEmpty())
            page->tensorBox()->setCurrentText(tensor);
        QObject::connect(page, &SweepsPage::runFinished, &loop, done);
        page->runButton()->click();
    } else if (job == "latency") {
        auto* page = w.latencyPage();
        QObject::connect(page, &LatencyPage::runFinished, &loop, done);
        page->runButton()->click();
    } else if (job == "paper-check") {
        auto* page = w.sweepsPage();
        QObject::connect(page, &SweepsPage::runFinished, &loop, done);
        page->paperCheckButton()->click();
    } else {
        return false;
    }
    loop.exec();
    return ok;
}

} // namespace

int main(int argc, char** argv)
{
    QCommandLineParser parser;
    parser.setApplicationDescription("GSRQ Studio: KV-cache quantization with Gain-Shape K-means and GSRQ");
    parser.addHelpOption();
    parser.addPositionalArgument("dump", "KV dump to open");
    QCommandLineOption screenshot("screenshot", "Render a page to FILE.png and exit", "FILE");
    QCommandLineOption page(
        "page", "Page to show: dataset, model, compare, sweeps, train, weights, runs, latency, long-context", "NAME",
        "dataset");
    QCommandLineOption open("open", "KV dump to open", "DUMP");
    QCommandLineOption run(
        "run",
        "Run a job before the screenshot: model, compare, train, methods (the GSRQ page's comparison), sweep, "
        "paper-check, latency or tasks (the Long context page's form)",
        "JOB");
    QCommandLineOption tensor(
        "tensor", "Tensor for --run compare, tensor globs (model, train), or the methods (methods, tasks)", "NAME");
    QCommandLineOption store("store", "Run store to use instead of the configured one", "FILE");
    QCommandLineOption select("select", "Runs page: select these runs, e.g. 1,2", "IDS");
    QCommandLineOption report("report",
                              "Write File ▸ Export report's document (.html, .pdf, or a picture of its top: .png) "
                              "after the page (and --run) and exit",
                              "FILE");
    parser.addOptions({screenshot, page, open, run, tensor, store, select, report});
    // --help needs no display: a core application answers it (and exits 0) before the GUI's starts.
    for (int i = 1; i < argc; ++i) {
        const QString arg = QString::fromLocal8Bit(argv[i]);
        if (arg == "--help" || arg == "-h" || arg == "-?" || arg == "--help-all") {
            QCoreApplication core(argc, argv);
            QCoreApplication::setApplicationName("gsrq-studio");
            parser.process(core);
            return 0;
        }
    }
    QApplication app(argc, argv);
    QApplication::setOrganizationName("gsrq");
    QApplication::setApplicationName("gsrq-studio");
    QApplication::setStyle("Fusion");
    parser.process(app);

    MainWindow w(parser.value(store), nullptr, !parser.isSet(screenshot) && !parser.isSet(report));
    QString dump = parser.value(open);
    if (dump.isEmpty() && !parser.positionalArguments().isEmpty())
        dump = parser.positionalArguments().first();
    if (!dump.isEmpty())
        w.openDump(dump);

    if (!parser.isSet(screenshot) && !parser.isSet(report)) {
        w.show();
        return QApplication::exec();
    }
    w.resize(1440, 900);
    w.show();
    if (!w.showPage(parser.value(page))) {
        std::fprintf(stderr,
                     "gsrq-studio: --page %s: not one of dataset, model, compare, sweeps, train, weights, runs, "
                     "latency, long-context\n",
                     qPrintable(parser.value(page)));
        return 2;
    }
    if (parser.isSet(run) && !runAndWait(w, parser.value(run), parser.value(tensor))) {
        std::fprintf(stderr, "gsrq-studio: --run %s did not finish: %s\n", qPrintable(parser.value(run)),
                     qPrintable(w.lastMessage()));
        return 1;
    }
    if (parser.value(page) == "dataset" && w.context().dump()) {
        QEventLoop loop;
        QObject::connect(w.datasetPage(), &DatasetPage::statsReady, &loop, &QEventLoop::quit);
        const auto& tensors = w.context().dump()->tensors();
        const QString name =
            parser.isSet(tensor) ? parser.value(tensor) : QString::fromStdString(tensors.back().view.name);
        w.datasetPage()->selectTensor(name);
        QTimer::singleShot(30000, &loop, &QEventLoop::quit);
        loop.exec();
    }
    if (parser.value(page) == "runs" && parser.isSet(select)) {
        QList<qint64> ids;
        for (const auto& id : parser.value(select).split(',', Qt::SkipEmptyParts))
            ids << id.toLongLong();
        w.runsPage()->refresh();
        w.runsPage()->selectRuns(ids);
    }
    if (parser.value(page) == "weights" && w.context().dump()) {
        QEventLoop loop;
        QObject::connect(w.weightsPage(), &WeightsPage::normsReady, &loop, &QEventLoop::quit);
        QTimer::singleShot(30000, &loop, &QEventLoop::quit);
        loop.exec();
    }
    // Let coalesced chart updates land before grabbing.
    QEventLoop settle;
    QTimer::singleShot(200, &settle, &QEventLoop::quit);
    settle.exec();
    if (parser.isSet(screenshot)) {
        QSaveFile shot(parser.value(screenshot)); // the old screenshot stays until the new one is whole
        if (!shot.open(QIODevice::WriteOnly) || !w.grab().save(&shot, "PNG") || !shot.commit()) {
            std::fprintf(stderr, "gsrq-studio: cannot write %s\n", qPrintable(parser.value(screenshot)));
            return 1;
        }
    }
    if (parser.isSet(report) && !w.exportReport(parser.value(report))) {
        std::fprintf(stderr, "gsrq-studio: --report: %s\n", qPrintable(w.lastMessage()));
        return 1;
    }
    return 0;
}
