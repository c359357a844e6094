#include "page_settings.h"

#include <QAbstractSpinBox>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QSettings>
#include <QSlider>
#include <QSpinBox>

namespace gsrq::studio {

namespace {

// The page's controls with their keys, in the page's order.
QList<QPair<QString, QWidget*>> controls(const QWidget* root)
{
    QList<QPair<QString, QWidget*>> out;
    QHash<QString, int> seen;
    for (auto* w : root->findChildren<QWidget*>()) {
        const bool inner =
            qobject_cast<QAbstractSpinBox*>(w->parentWidget()) || qobject_cast<QComboBox*>(w->parentWidget());
        QString type;
        if (qobject_cast<QSpinBox*>(w))
            type = QStringLiteral("spin");
        else if (qobject_cast<QDoubleSpinBox*>(w))
            type = QStringLiteral("double");
        else if (qobject_cast<QComboBox*>(w))
            type = QStringLiteral("combo");
        else if (qobject_cast<QLineEdit*>(w) && !inner && !static_cast<QLineEdit*>(w)->isReadOnly())
            type = QStringLiteral("text");
        else if (qobject_cast<QCheckBox*>(w))
            type = QStringLiteral("check");
        else if (qobject_cast<QSlider*>(w))
            type = QStringLiteral("slider");
        if (type.isEmpty())
            continue;
        const QString key = w->objectName().isEmpty() ? QStringLiteral("%1%2").arg(type).arg(seen[type]++)
                                                      : type + QLatin1Char('_') + w->objectName();
        out.append({key, w});
    }
    return out;
}

QString layoutOf(const QList<QPair<QString, QWidget*>>& c)
{
    QStringList keys;
    for (const auto& [key, w] : c)
        keys << key;
    return keys.join(QLatin1Char(','));
}

} // namespace

void savePageSettings(QSettings& settings, const QString& page, const QWidget* root)
{
    const auto c = controls(root);
    settings.beginGroup(QStringLiteral("pages/") + page);
    settings.remove(QString());
    settings.setValue(QStringLiteral("layout"), layoutOf(c));
    for (const auto& [key, w] : c) {
        if (auto* s = qobject_cast<QSpinBox*>(w))
            settings.setValue(key, s->value());
        else if (auto* d = qobject_cast<QDoubleSpinBox*>(w))
            settings.setValue(key, d->value());
        else if (auto* b = qobject_cast<QComboBox*>(w)) {
            settings.setValue(key, b->currentText());
            // A fixed list whose labels follow the open dump (the GSRQ page's presets) comes back by place.
            settings.setValue(key + QStringLiteral("_index"), b->currentIndex());
            settings.setValue(key + QStringLiteral("_count"), b->count());
        } else if (auto* e = qobject_cast<QLineEdit*>(w))
            settings.setValue(key, e->text());
        else if (auto* x = qobject_cast<QCheckBox*>(w))
            settings.setValue(key, x->isChecked());
        else if (auto* l = qobject_cast<QSlider*>(w))
            settings.setValue(key, l->value());
    }
    settings.endGroup();
}

bool restorePageSettings(QSettings& settings, const QString& page, QWidget* root)
{
    const auto c = controls(root);
    settings.beginGroup(QStringLiteral("pages/") + page);
    const bool same = settings.value(QStringLiteral("layout")).toString() == layoutOf(c);
    for (const auto& [key, w] : c) {
        if (!same || !settings.contains(key))
            continue;
        const QVariant v = settings.value(key);
        if (auto* s = qobject_cast<QSpinBox*>(w))
            s->setValue(v.toInt());
        else if (auto* d = qobject_cast<QDoubleSpinBox*>(w))
            d->setValue(v.toDouble());
        else if (auto* b = qobject_cast<QComboBox*>(w)) {
            // By its text; a list of the same length whose labels changed (presets that follow the dump)
            // by its place; a choice the list no longer offers (a tensor of another dump) leaves the
            // current one.
            const int index = settings.value(key + QStringLiteral("_index"), -1).toInt();
            if (b->isEditable())
                b->setCurrentText(v.toString());
            else if (const int at = b->findText(v.toString()); at >= 0)
                b->setCurrentIndex(at);
            else if (index >= 0 && index < b->count() &&
                     settings.value(key + QStringLiteral("_count")).toInt() == b->count())
                b->setCurrentIndex(index);
        } else if (auto* e = qobject_cast<QLineEdit*>(w)) {
            // The user's own text, as if typed: a field that follows another setting until the user
            // types (the Latency page's model) keeps it.
            if (e->text() != v.toString()) {
                e->setText(v.toString());
                e->setModified(true);
            }
        } else if (auto* x = qobject_cast<QCheckBox*>(w))
            x->setChecked(v.toBool());
        else if (auto* l = qobject_cast<QSlider*>(w))
            l->setValue(v.toInt());
    }
    settings.endGroup();
    return same;
}

} // namespace gsrq::studio
