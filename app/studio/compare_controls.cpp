#include "compare_controls.h"

#include <QComboBox>
#include <QFormLayout>
#include <QSpinBox>

namespace gsrq::studio {

QSpinBox* makeSpinBox(int lo, int hi, int value, QWidget* parent)
{
    auto* s = new QSpinBox(parent);
    s->setRange(lo, hi);
    s->setValue(value);
    return s;
}

CompareControls::CompareControls(QWidget* parent)
    : dim(makeSpinBox(1, 65536, 8, parent)), k(makeSpinBox(1, 65536, 64, parent)),
      iters(makeSpinBox(0, 10000, 50, parent)), seed(makeSpinBox(0, 1 << 30, 0, parent)), weights(new QComboBox(parent))
{
    weights->addItems({"none", "grad-raw", "grad-log"});
}

void CompareControls::addRows(QFormLayout* form) const
{
    form->addRow(QObject::tr("Subspace width D"), dim);
    form->addRow(QObject::tr("Codewords K"), k);
    form->addRow(QObject::tr("Iterations (max)"), iters);
    form->addRow(QObject::tr("Seed"), seed);
    form->addRow(QObject::tr("Weights"), weights);
}

CompareSettings CompareControls::settings() const
{
    CompareSettings s;
    s.dim = dim->value();
    s.k = k->value();
    s.iterations = iters->value();
    s.seed = std::uint64_t(seed->value());
    return s;
}

void CompareControls::set(const CompareSettings& s, const QString& weightsName)
{
    dim->setValue(s.dim);
    k->setValue(s.k);
    iters->setValue(s.iterations);
    seed->setValue(int(s.seed));
    if (weights->isEnabled())
        weights->setCurrentText(weightsName);
}

const KvTensor* headedKey(const KvDump* dump)
{
    if (dump)
        for (const auto& t : dump->tensors())
            if (t.kind == KvKind::Key && t.view.shape.size() == 3)
                return &t;
    return nullptr;
}

void CompareControls::followHeads(const KvDump* dump)
{
    const KvTensor* key = headedKey(dump);
    const std::int64_t headDim = key ? key->view.shape[2] : 0;
    if (int(headDim) == headsFollowed)
        return;
    headsFollowed = int(headDim);
    const bool heads = headDim >= 32;
    dim->setValue(heads ? int(headDim) : 8);
    k->setValue(heads ? 256 : 64);
}

} // namespace gsrq::studio
