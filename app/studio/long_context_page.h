#pragma once
// The Long context page: `gsrq tasks` in the app. A model's long-context retrieval (passkey,
// RULER's needle-in-a-haystack family, variable tracking) answered over each method's KV cache,
// recorded in the run store as each answer finishes; per method side by side, the needle heatmap
// (depth × context length, coloured by accuracy) of the chosen task, and accuracy against bits per
// cached value with 95% Wilson intervals. Clicking a cell lists its samples: the prompt's end, what
// was expected, what the model answered.
#include "core/jobs/context_tasks_job.h"
#include "studio_context.h"
#include <QWidget>
#include <nlohmann/json.hpp>
#include <vector>

class QComboBox;
class QHBoxLayout;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace gsrq::views {
class ChartPanel;
class HeatmapView;
} // namespace gsrq::views

namespace gsrq::studio {

class LongContextPage : public QWidget {
    Q_OBJECT
public:
    explicit LongContextPage(StudioContext& ctx, QWidget* parent = nullptr);

    // The form, for tests and the report.
    QLineEdit* modelEdit() const { return m_model; }
    QLineEdit* tokenizerEdit() const { return m_tokenizer; }
    QLineEdit* haystackEdit() const { return m_haystack; }
    QLineEdit* tasksEdit() const { return m_tasks; }
    QLineEdit* contextsEdit() const { return m_contexts; }
    QLineEdit* depthsEdit() const { return m_depths; }
    QSpinBox* samplesBox() const { return m_samples; }
    QLineEdit* methodsEdit() const { return m_methods; }
    QLineEdit* codebooksEdit() const { return m_codebooks; }
    QComboBox* taskBox() const { return m_taskShown; }
    QPushButton* runButton() const { return m_run; }
    QPushButton* cancelButton() const { return m_cancel; }
    QString statusText() const;
    // What the page shows: one heatmap per method, the chart, the samples of the clicked cell.
    std::vector<views::HeatmapView*> heatmaps() const { return m_heatmaps; }
    views::ChartPanel* bitsChart() const { return m_chart; }
    QTableWidget* samplesTable() const { return m_table; }
    const std::vector<nlohmann::ordered_json>& answers() const { return m_answers; }
    // Lists the samples of one heatmap's cell (as a click does).
    void showCell(int method, int row, int column);

public slots:
    void start();
    void cancel();

signals:
    void runFinished(bool ok);

private:
    void redraw();
    void setRunning(bool on);

    StudioContext& m_ctx;
    QLineEdit *m_model, *m_tokenizer, *m_haystack, *m_tasks, *m_contexts, *m_depths, *m_methods, *m_codebooks;
    QSpinBox* m_samples;
    QComboBox *m_prefill, *m_taskShown;
    QPushButton *m_run, *m_cancel;
    QProgressBar* m_progress;
    QLabel* m_status;
    QHBoxLayout* m_heatRow;
    std::vector<views::HeatmapView*> m_heatmaps;
    views::ChartPanel* m_chart;
    QTableWidget* m_table;
    int m_job = 0;
    // The run shown: its settings and methods (names, bits) and every answer so far.
    ContextTasksSettings m_settings;
    std::vector<std::pair<std::string, double>> m_methodBits;
    std::vector<nlohmann::ordered_json> m_answers;
    std::map<std::string, nlohmann::ordered_json> m_prompts;
};

} // namespace gsrq::studio
