#pragma once
// The run store as a table (filter by kind, status, group and text; sort), the details of a run,
// notes, deletion, importing other stores (a plan's task stores, a colleague's), and for two or
// more selected runs their convergence curves on one chart and the settings that differ. Reads through core's store API
// on the GUI thread (its own connection).

#include "studio_context.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QLineEdit;
class QPlainTextEdit;
class QSortFilterProxyModel;
class QTableView;

namespace gsrq::views {
class ChartPanel;
class RunsTableModel;
} // namespace gsrq::views

namespace gsrq::studio {

class RunsPage : public QWidget {
    Q_OBJECT

public:
    explicit RunsPage(StudioContext& ctx, QWidget* parent = nullptr);
    void refresh();
    views::RunsTableModel* model() const { return m_model; }
    QTableView* table() const { return m_table; }
    views::ChartPanel* overlayChart() const { return m_overlay; }
    QComboBox* overlayMetric() const { return m_overlayMetric; }
    // Over kMostCurves curves (two 60-tensor trainings), each run is drawn as the median of its curves
    // with their interquartile range as bars, until this is ticked ("Every curve").
    QCheckBox* everyCurveBox() const { return m_everyCurve; }
    static constexpr int kMostCurves = 12;
    QString detailsText() const;
    void selectRuns(const QList<qint64>& ids);
    // Selects every ppl run and draws perplexity against bits per activation.
    void showAllPerplexity();
    // Copies the runs of other stores into this one (importing twice adds nothing) and shows them;
    // returns the summary line it shows. Errors name the store and import nothing from it.
    QString importStores(const QStringList& paths);
    QComboBox* groupFilter() const { return m_group; }

private:
    static QString metricDeltasText(const std::vector<std::int64_t>& ids,
                                    const std::vector<std::map<std::string, double>>& finals);
    void onSelectionChanged();
    std::vector<std::int64_t> selectedIds() const;
    void addNote();
    void deleteSelected();
    void chooseStoresToImport();

    StudioContext& m_ctx;
    views::RunsTableModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QTableView* m_table;
    QComboBox *m_kind, *m_status, *m_group, *m_overlayMetric;
    QLineEdit *m_filter, *m_note;
    QPlainTextEdit* m_details;
    views::ChartPanel* m_overlay;
    QCheckBox* m_everyCurve;
};

} // namespace gsrq::studio
