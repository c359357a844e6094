#pragma once
// Decode latency: runs the decode-latency sweep (gsrq bench-decode) on the CPU, on every machine, or
// on a CUDA device where one is present, filling the chart point by point (context length against
// per-layer latency for each path and batch, each path's roofline beside it), and shows the
// benchmark runs recorded in the run store with a speed–quality table at equal bits, and the GPU
// speed–quality frontier (core/jobs/decode_frontier.h): measured or modelled times against the
// attention-output error of the same shapes' train runs. Its second tab decodes a real model (a GGUF
// file or a llama2.c checkpoint) token by token with trained codebooks, as `gsrq generate` does: the
// whole step and its attention per context and path, recorded as a generate run.

#include "studio_context.h"

#include <QWidget>

class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace gsrq::views {
class ChartPanel;
}

namespace gsrq::studio {

class LatencyPage : public QWidget {
    Q_OBJECT

public:
    explicit LatencyPage(StudioContext& ctx, QWidget* parent = nullptr);
    void refresh();
    QString messageText() const;
    views::ChartPanel* chart() const { return m_chart; }
    QPushButton* runButton() const { return m_run; }
    QComboBox* backendBox() const { return m_backend; }
    QTableWidget* speedQualityTable() const { return m_table; }
    views::ChartPanel* frontierChart() const { return m_frontier; }
    QComboBox* frontierAt() const { return m_frontierAt; }
    views::ChartPanel* modelChart() const { return m_modelChart; }
    QPushButton* decodeModelButton() const { return m_genRun; }
    // "Train them…" beside the codebooks: the GSRQ page set up for what the real-model tab needs.
    QPushButton* trainCodebooksButton() const { return m_genTrain; }
    QString modelLog() const;

signals:
    void runFinished(bool ok); // the sweep Run started ended: finished (true), cancelled or failed
    // The user asked to train codebooks for the real-model tab (keys after RoPE, every layer's keys
    // and values).
    void trainCodebooksRequested();

private:
    void start();
    void backendChanged();
    void setMessage(int storedRuns); // what the page shows and how to measure, over the chart
    void fillSpeedQuality();
    void fillFrontier();
    void startGenerate(); // the real model's decode (the second tab)
    void fillModelChart();

    StudioContext& m_ctx;
    QLabel* m_message;
    QLineEdit* m_contexts;
    QLineEdit* m_batches;
    QSpinBox* m_heads;
    QSpinBox* m_kvHeads;
    QComboBox* m_headDim;
    QComboBox* m_bpa;
    QSpinBox* m_layers;
    QComboBox* m_backend;
    QSpinBox* m_threads;
    QTableWidget* m_table;
    QComboBox* m_frontierAt;
    views::ChartPanel* m_frontier;
    QPushButton* m_run;
    QPushButton* m_cancel;
    QPlainTextEdit* m_log;
    views::ChartPanel* m_chart;
    QLineEdit* m_genModel;
    QLineEdit* m_genText;
    QLineEdit* m_genBooks;
    QLineEdit* m_genContexts;
    QSpinBox* m_genPrefill;
    QSpinBox* m_genTokens;
    QComboBox* m_genWeights;
    QSpinBox* m_genThreads;
    QPushButton* m_genRun;
    QPushButton* m_genTrain;
    QPlainTextEdit* m_genLog;
    views::ChartPanel* m_modelChart;
    int m_job = 0;
    bool m_generating = false; // the current job is the real model's decode
    QString m_deviceProblem;   // why there is no CUDA choice (empty when a device is there)
};

} // namespace gsrq::studio
