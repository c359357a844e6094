#pragma once
// Gradient weights: for the keys and values of a layer, histograms of the raw ‖∂L/∂x‖ and of
// log(1 + λ‖g‖), λ = τ / median‖g‖, with their max/median ratios; the τ slider redraws the
// transformed histograms at once (the norms are read once, off the GUI thread).

#include "studio_context.h"

#include <QWidget>

#include <map>
#include <vector>

class QComboBox;
class QLabel;
class QSlider;

namespace gsrq::views {
class ChartPanel;
}

namespace gsrq::studio {

class WeightsPage : public QWidget {
    Q_OBJECT

public:
    explicit WeightsPage(StudioContext& ctx, QWidget* parent = nullptr);
    QComboBox* layerBox() const { return m_layer; }
    QSlider* tauSlider() const { return m_tau; }
    double tau() const;
    views::ChartPanel* rawChart() const { return m_raw; }
    views::ChartPanel* logChart() const { return m_log; }
    QString ratiosText() const;

signals:
    void normsReady();

private:
    void onDumpChanged();
    void load();
    void redrawTransformed();

    StudioContext& m_ctx;
    JobRunner m_runner; // reading gradients never cancels a training
    QComboBox* m_layer;
    QSlider* m_tau;
    QLabel *m_tauLabel, *m_ratios;
    views::ChartPanel *m_raw, *m_log;
    std::map<QString, std::vector<double>> m_norms; // "keys"/"values" -> ‖g‖ per row
};

} // namespace gsrq::studio
