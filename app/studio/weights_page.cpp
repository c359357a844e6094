#include "weights_page.h"

#include "core/base/stats.h"

#include "core/base/error.h"
#include "core/cluster/weights.h"
#include "views/chart_panel.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSlider>
#include <QVBoxLayout>

#include <cmath>

namespace gsrq::studio {

WeightsPage::WeightsPage(StudioContext& ctx, QWidget* parent) : QWidget(parent), m_ctx(ctx)
{
    m_layer = new QComboBox(this);
    m_tau = new QSlider(Qt::Horizontal, this);
    m_tau->setRange(-20, 20); // τ = 10^(v/10): 0.01 … 100
    m_tau->setValue(0);
    m_tauLabel = new QLabel(this);
    m_ratios = new QLabel(this);
    m_ratios->setWordWrap(true);
    auto* form = new QFormLayout();
    form->addRow(tr("Layer"), m_layer);
    form->addRow(tr("τ"), m_tau);
    form->addRow(QString(), m_tauLabel);
    form->addRow(m_ratios);
    m_raw = new views::ChartPanel(tr("Raw ‖∂L/∂x‖"), tr("‖g‖"), tr("rows"), this);
    m_log = new views::ChartPanel(tr("Weights log(1 + τ‖g‖ / median‖g‖)"), tr("w"), tr("rows"), this);
    m_raw->setLogY(true);
    m_raw->setEmptyText(tr("Open a dump whose tensors have gradients (*.k_grad, *.v_grad) to see their norms."));
    m_log->setEmptyText(tr("Open a dump whose tensors have gradients to see the weights they give."));
    auto* charts = new QVBoxLayout();
    charts->addWidget(m_raw, 1);
    charts->addWidget(m_log, 1);
    auto* formBox = new QWidget(this);
    formBox->setLayout(form);
    formBox->setMaximumWidth(340);
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(formBox);
    layout->addLayout(charts, 1);

    connect(&m_ctx, &StudioContext::dumpChanged, this, &WeightsPage::onDumpChanged);
    connect(m_layer, &QComboBox::currentIndexChanged, this, &WeightsPage::load);
    // The shared selection: its layer is shown here; choosing a layer here selects the same kind
    // of tensor (key or value) in that layer.
    connect(&m_ctx, &StudioContext::tensorSelected, this, [this] {
        const int i = m_layer->findData(m_ctx.selectedLayer());
        if (i >= 0)
            m_layer->setCurrentIndex(i);
    });
    connect(m_layer, &QComboBox::activated, this, [this] {
        const QString kind = m_ctx.selectedTensor().endsWith(".value") ? "value" : "key";
        m_ctx.selectTensor(QString("layers.%1.%2").arg(m_layer->currentData().toInt()).arg(kind));
    });
    connect(m_tau, &QSlider::valueChanged, this, &WeightsPage::redrawTransformed);
    onDumpChanged();
}

double WeightsPage::tau() const
{
    return std::pow(10.0, m_tau->value() / 10.0);
}

QString WeightsPage::ratiosText() const
{
    return m_ratios->text();
}

void WeightsPage::onDumpChanged()
{
    m_layer->blockSignals(true);
    m_layer->clear();
    if (const auto dump = m_ctx.dump())
        for (const auto& t : dump->tensors())
            if (t.kind == KvKind::KeyGrad || t.kind == KvKind::ValueGrad)
                if (m_layer->findData(t.layer) < 0)
                    m_layer->addItem(tr("layer %1").arg(t.layer), t.layer);
    if (const int i = m_layer->findData(m_ctx.selectedLayer()); i >= 0)
        m_layer->setCurrentIndex(i);
    m_layer->blockSignals(false);
    m_norms.clear();
    m_raw->clear();
    m_log->clear();
    m_ratios->setText(m_layer->count() ? QString()
                                       : tr("This dump has no gradients (layers.L.key_grad / value_grad)."));
    if (m_layer->count())
        load();
}

void WeightsPage::load()
{
    const auto dump = m_ctx.dump();
    if (!dump || m_layer->currentIndex() < 0)
        return;
    const int layer = m_layer->currentData().toInt();
    m_runner.start(tr("gradient norms"), [this, dump, layer](const JobRunner::Context& job) {
        std::map<QString, std::vector<double>> norms;
        for (const auto& [label, name] :
             {std::pair<QString, std::string>{"keys", "key_grad"}, {"values", "value_grad"}}) {
            const auto* t = dump->find(cat("layers.", layer, ".", name));
            if (!t)
                continue;
            const MatrixRF g = toMatrix(t->view);
            auto& n = norms[label];
            for (Eigen::Index i = 0; i < g.rows(); ++i)
                if (g.row(i).allFinite())
                    n.push_back(g.row(i).cast<double>().norm());
        }
        job.post([this, norms] {
            m_norms = norms;
            m_raw->clear();
            for (const auto& [label, n] : m_norms)
                m_raw->setHistogram(label, histogram(n, 50));
            m_raw->flush();
            redrawTransformed();
            emit normsReady();
        });
    });
}

void WeightsPage::redrawTransformed()
{
    const double t = tau();
    m_tauLabel->setText(tr("τ = %1").arg(t, 0, 'g', 3));
    QStringList lines;
    m_log->clear();
    for (const auto& [label, n] : m_norms) {
        WeightSummary sum;
        const Eigen::VectorXd w = weightsFromNorms(Eigen::Map<const Eigen::VectorXd>(n.data(), Eigen::Index(n.size())),
                                                   WeightMode::GradLog, t, &sum);
        m_log->setHistogram(label, histogram(std::vector<double>(w.data(), w.data() + w.size()), 50));
        lines << tr("%1: raw max/median %2, weights max/median %3")
                     .arg(label)
                     .arg(sum.rawMedian > 0 ? sum.rawMax / sum.rawMedian : 0.0, 0, 'f', 1)
                     .arg(sum.weightMedian > 0 ? sum.weightMax / sum.weightMedian : 0.0, 0, 'f', 2);
    }
    m_ratios->setText(lines.join('\n'));
    m_log->flush();
}

} // namespace gsrq::studio
