#pragma once
// GSRQ training: settings (a BPA preset or D/R/K, method, weights, τ, beam, tensors, held-out
// fraction), live progress with an ETA and a cancel that takes effect within an iteration, the
// convergence of the clustering in progress, nmse/cosine/gain error after each stage per tensor,
// a results table with the bits and the effective bits once codebooks are counted, and export.

#include "core/jobs/method_table.h"
#include "core/jobs/train_job.h"
#include "studio_context.h"

#include <QElapsedTimer>
#include <QWidget>

#include <memory>

class QAbstractItemModel;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QStandardItemModel;
class QTableView;

namespace gsrq::views {
class ChartPanel;
class MetricsTableModel;
} // namespace gsrq::views

namespace gsrq::studio {

class TrainPage : public QWidget {
    Q_OBJECT

public:
    explicit TrainPage(StudioContext& ctx, QWidget* parent = nullptr);

    QLineEdit* tensorsEdit() const { return m_tensors; }
    QComboBox* presetBox() const { return m_preset; }
    QSpinBox* dimBox() const { return m_dim; }
    QSpinBox* stagesBox() const { return m_stages; }
    QSpinBox* kBox() const { return m_k; }
    QSpinBox* refineBox() const { return m_refine; }
    QSpinBox* itersBox() const { return m_iters; }
    // Keys as dumped (before RoPE: the paper's path) or after RoPE (what the lookup decode path and
    // the Latency page's real-model tab read).
    QComboBox* keyRopeBox() const { return m_keyRope; }
    // Set for the Latency page's real-model tab: every layer's keys and values, keys after RoPE,
    // with a line saying what to do next.
    void prepareLookupCodebooks();
    QPushButton* runButton() const { return m_run; }
    QPushButton* cancelButton() const { return m_cancel; }
    views::ChartPanel* stageChart() const { return m_stageChart; }
    // The stage points drawn while the last training ran (one a tensor's stage as it ends), before
    // its result redrew the chart.
    int liveStagePoints() const { return m_liveStagePoints; }
    QComboBox* stageMetricBox() const { return m_stageMetric; }
    QLabel* statusLabel() const { return m_status; }
    views::ChartPanel* liveChart() const { return m_live; }
    views::MetricsTableModel* resultsModel() const { return m_model; }
    // Writes the last result's codebooks; false (with a message) when there is none or it fails.
    bool exportCodebooks(const QString& path);
    // Perplexity of the Preferences' llama2.c model with the last result's codebooks on its keys
    // and values, against FP32: on the model's own samples (seed 0), or on pplTextEdit()'s file.
    void evaluatePerplexity();
    QPushButton* pplButton() const { return m_ppl; }
    // The perplexity job's progress (each forward pass) and its Cancel.
    QProgressBar* pplProgress() const { return m_pplBar; }
    QPushButton* pplCancelButton() const { return m_pplCancel; }
    QPushButton* exportButton() const { return m_export; }
    // The paper's table on the Preferences' model (core/jobs/method_table.h): the methods of
    // compareMethodsEdit() (FP32, KIVI, CQ, KM-RQ, GSRQ, VQLLM-style at their bits), trained methods
    // learnt on the open dump (the model's own; the layers it holds keys and values of are the ones
    // compressed), on pplTextEdit()'s text or the model's samples; a
    // table of bits, perplexity, Δ% and attention error, and perplexity against bits per method.
    void compareMethods();
    QPushButton* compareButton() const { return m_compare; }
    QPushButton* compareCancelButton() const { return m_compareCancel; }
    QProgressBar* compareProgress() const { return m_compareBar; }
    QLineEdit* compareMethodsEdit() const { return m_compareMethods; }
    QAbstractItemModel* compareModel() const;
    views::ChartPanel* compareChart() const { return m_compareChart; }
    QLineEdit* pplTextEdit() const { return m_pplText; }
    QString pplResultText() const;

signals:
    void runFinished(bool ok);
    void pplFinished(bool ok);
    void compareFinished(bool ok);

private:
    // A perplexity or comparison that failed on the worker: its message on the page and in the
    // banner, its button usable again, `finished`(false) emitted.
    void postFailure(const JobRunner::Context& job, const std::exception& e, QPushButton* button,
                     void (TrainPage::*finished)(bool));
    void start();
    void applyPreset();
    void showResult(const TrainJobResult& r);
    void showComparison(const MethodTableResult& r);
    void drawStages();

    StudioContext& m_ctx;
    QComboBox* m_preset;
    QSpinBox *m_dim, *m_stages, *m_k, *m_iters, *m_beam, *m_refine;
    QComboBox *m_method, *m_weights, *m_stageMetric, *m_keyRope;
    QDoubleSpinBox *m_tau, *m_holdout;
    QLineEdit* m_tensors;
    QPushButton *m_run, *m_cancel, *m_export, *m_ppl, *m_compare, *m_compareCancel;
    QLineEdit* m_compareMethods;
    QStandardItemModel* m_compareModel;
    QTableView* m_compareTable;
    views::ChartPanel* m_compareChart;
    QLineEdit* m_pplText;
    QLabel* m_pplResult;
    QProgressBar *m_progress, *m_compareBar, *m_pplBar;
    QPushButton* m_pplCancel;
    QLabel* m_status;
    views::ChartPanel *m_live, *m_stageChart;
    int m_liveStagePoints = 0;
    views::MetricsTableModel* m_model;
    std::shared_ptr<const TrainJobResult> m_last;
    QElapsedTimer m_clock;
    int m_job = 0, m_compareJob = 0, m_pplJob = 0;
};

} // namespace gsrq::studio
