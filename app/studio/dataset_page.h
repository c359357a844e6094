#pragma once
// The dataset page: the open dump as a tree of layers and tensors (shape, dtype, size) and, for
// the selected tensor, statistics computed off the GUI thread: the distribution of row norms,
// the RMS of each channel (outlier channels stand out) and the count of NaN/Inf rows.

#include "studio_context.h"

#include <QWidget>

class QLabel;
class QTreeWidget;

namespace gsrq::views {
class ChartPanel;
}

namespace gsrq::studio {

class DatasetPage : public QWidget {
    Q_OBJECT

public:
    explicit DatasetPage(StudioContext& ctx, QWidget* parent = nullptr);
    QTreeWidget* tree() const { return m_tree; }
    void selectTensor(const QString& name);
    views::ChartPanel* normChart() const { return m_norms; }
    views::ChartPanel* channelChart() const { return m_channels; }
    QString statsText() const;

signals:
    void openRequested();
    void statsReady(const QString& tensor);

private:
    void rebuild();
    void computeStats(const QString& tensor);

    StudioContext& m_ctx;
    JobRunner m_statsRunner; // its own, so browsing never cancels a training
    QTreeWidget* m_tree;
    QLabel* m_summary;
    QLabel* m_stats;
    views::ChartPanel* m_norms;
    views::ChartPanel* m_channels;
};

} // namespace gsrq::studio
