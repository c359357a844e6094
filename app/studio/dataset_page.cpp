#include "dataset_page.h"

#include "core/io/tensor_stats.h"

#include "core/io/tensor.h"
#include "views/chart_panel.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QPushButton>
#include <QSplitter>
#include <QTreeWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <map>

namespace gsrq::studio {

DatasetPage::DatasetPage(StudioContext& ctx, QWidget* parent) : QWidget(parent), m_ctx(ctx)
{
    auto* open = new QPushButton(tr("Open dump…"), this);
    connect(open, &QPushButton::clicked, this, &DatasetPage::openRequested);
    m_summary = new QLabel(tr("No dump open. Open a .safetensors file, a directory of shards or a 2-D .npy "
                              "(File ▸ Open, drag and drop, or the command line)."),
                           this);
    m_summary->setWordWrap(true);
    m_tree = new QTreeWidget(this);
    m_tree->setColumnCount(4);
    m_tree->setHeaderLabels({tr("Tensor"), tr("Dtype"), tr("Shape"), tr("Size")});
    m_tree->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
    connect(m_tree, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* item) {
        if (item && item->data(0, Qt::UserRole).isValid()) {
            m_ctx.selectTensor(item->data(0, Qt::UserRole).toString());
            computeStats(item->data(0, Qt::UserRole).toString());
        }
    });
    m_stats = new QLabel(this);
    m_stats->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_norms = new views::ChartPanel(tr("Row norms"), tr("‖x‖"), tr("rows"), this);
    m_channels = new views::ChartPanel(tr("Per-channel RMS"), tr("channel"), tr("RMS"), this);
    m_channels->setIntegerX(true);
    m_norms->setEmptyText(tr("Open a dump (File ▸ Open) and pick a tensor to see its row norms."));
    m_channels->setEmptyText(tr("Open a dump (File ▸ Open) and pick a tensor to see its channels."));

    auto* left = new QWidget(this);
    auto* l = new QVBoxLayout(left);
    l->addWidget(open);
    l->addWidget(m_summary);
    l->addWidget(m_tree, 1);
    auto* right = new QWidget(this);
    auto* r = new QVBoxLayout(right);
    r->addWidget(m_stats);
    r->addWidget(m_norms, 1);
    r->addWidget(m_channels, 1);
    auto* split = new QSplitter(this);
    split->addWidget(left);
    split->addWidget(right);
    split->setStretchFactor(1, 1);
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(split);
    connect(&m_ctx, &StudioContext::dumpChanged, this, &DatasetPage::rebuild);
    connect(&m_ctx, &StudioContext::tensorSelected, this, &DatasetPage::selectTensor);
}

void DatasetPage::rebuild()
{
    m_tree->clear();
    m_norms->clear();
    m_channels->clear();
    m_stats->clear();
    const auto dump = m_ctx.dump();
    // What the charts say before they have something to draw: the next step from here.
    m_norms->setEmptyText(dump ? tr("Pick a tensor in the list to see its row norms.")
                               : tr("Open a dump (File ▸ Open) and pick a tensor to see its row norms."));
    m_channels->setEmptyText(dump ? tr("Pick a tensor in the list to see its channels.")
                                  : tr("Open a dump (File ▸ Open) and pick a tensor to see its channels."));
    if (!dump)
        return;
    const QLocale loc;
    m_summary->setText(tr("%1 — %2, %3 file(s), %4")
                           .arg(QString::fromStdString(dump->path()), QString::fromStdString(dump->format()))
                           .arg(dump->files().size())
                           .arg(loc.formattedDataSize(qint64(dump->totalBytes()))));
    std::map<int, QTreeWidgetItem*> layers;
    QTreeWidgetItem* other = nullptr;
    for (const auto& t : dump->tensors()) {
        QTreeWidgetItem* parent = nullptr;
        if (t.layer >= 0) {
            auto& item = layers[t.layer];
            if (!item) {
                item = new QTreeWidgetItem(m_tree, {tr("layer %1").arg(t.layer)});
                item->setExpanded(t.layer == layers.begin()->first);
            }
            parent = item;
        } else {
            if (!other)
                other = new QTreeWidgetItem(m_tree, {tr("other")});
            parent = other;
        }
        auto* item = new QTreeWidgetItem(parent, {QString::fromStdString(t.view.name), dtypeName(t.view.dtype),
                                                  QString::fromStdString(t.view.shapeString()),
                                                  loc.formattedDataSize(qint64(t.view.nbytes))});
        item->setData(0, Qt::UserRole, QString::fromStdString(t.view.name));
    }
    if (other)
        other->setExpanded(true);
    // Wide enough for every column's longest entry (names and shapes are never cut short), up to
    // half of a 1440-pixel window; beyond that the tree scrolls.
    int width = 2 * m_tree->frameWidth() + m_tree->indentation() + 24;
    for (int c = 0; c < m_tree->columnCount(); ++c) {
        m_tree->resizeColumnToContents(c);
        width += m_tree->columnWidth(c);
    }
    m_tree->setMinimumWidth(std::min(width, 720));
    if (!m_ctx.selectedTensor().isEmpty())
        selectTensor(m_ctx.selectedTensor());
}

void DatasetPage::selectTensor(const QString& name)
{
    const auto items = m_tree->findItems(name, Qt::MatchExactly | Qt::MatchRecursive);
    if (!items.isEmpty() && m_tree->currentItem() != items.first())
        m_tree->setCurrentItem(items.first());
}

QString DatasetPage::statsText() const
{
    return m_stats->text();
}

void DatasetPage::computeStats(const QString& tensor)
{
    const auto dump = m_ctx.dump();
    if (!dump)
        return;
    m_stats->setText(tr("Reading %1…").arg(tensor));
    m_statsRunner.start(tr("statistics of %1").arg(tensor), [this, dump, tensor](const JobRunner::Context& job) {
        const auto& t = dump->get(tensor.toStdString());
        if (!isFloat(t.view.dtype) || t.view.shape.size() < 2) {
            job.post([this, tensor] { m_stats->setText(tr("%1: not a float matrix; no statistics").arg(tensor)); });
            return;
        }
        const TensorStats st = tensorStats(toMatrix(t.view));
        const Histogram h = histogram(st.rowNorms, 60);
        QList<QPointF> rms;
        for (std::size_t c = 0; c < st.channelRms.size(); ++c)
            rms << QPointF(double(c), st.channelRms[c]);
        const QString text = tr("%1: %2 rows × %3 features, %4 rows with NaN/Inf; ‖x‖ from %5 to %6, mean %7")
                                 .arg(tensor)
                                 .arg(st.rows)
                                 .arg(st.features)
                                 .arg(st.nonFiniteRows)
                                 .arg(st.normMin, 0, 'g', 4)
                                 .arg(st.normMax, 0, 'g', 4)
                                 .arg(st.normMean, 0, 'g', 4);
        job.post([this, tensor, text, h, rms] {
            m_stats->setText(text);
            m_norms->clear();
            m_channels->clear();
            m_norms->setHistogram(tensor, h);
            m_channels->setSeries(tensor, rms);
            emit statsReady(tensor);
        });
    });
}

} // namespace gsrq::studio
