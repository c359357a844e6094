#pragma once
// What the GSRQ page's two files share (train_page.cpp: training and perplexity; train_compare.cpp:
// the method comparison): the sequences both measure, and what their ppl runs record.
#include "core/cluster/cluster_backend.h"
#include "core/jobs/run_records.h"
#include "core/lm/sequences.h"
#include "core/store/run_store.h"

#include <QString>

namespace gsrq::studio {

// What the page's perplexity and method comparison measure: 16 sequences of 256 tokens of the text,
// or of the model's own samples (llama2.c) where no text is given.
inline constexpr int kSeqLen = 256, kSequences = 16;

inline OpenedSequences pageSequences(const QString& modelPath, const QString& tokPath, const QString& textPath)
{
    SequenceSource src;
    src.text = textPath.toStdString();
    src.generate = textPath.isEmpty();
    src.seqLen = kSeqLen;
    src.sequences = kSequences;
    return openWithSequences(modelPath.toStdString(), tokPath.toStdString(), src);
}

// What every ppl run of the page records: the model as the run's dump (the training dump, where
// there is one, goes in the settings), the backend, and the model, tokenizer, text and window; the
// caller adds its methods or codebooks to `ps` and sets info.settingsJson from it.
inline RunInfo pagePplRun(const QString& modelPath, const QString& tokPath, const QString& textPath,
                          const ClusterBackend& backend, PplRunSettings& ps)
{
    RunInfo info;
    info.kind = "ppl";
    info.backend = backend.name();
    info.device = backend.device();
    info.dumpPath = modelPath.toStdString();
    ps.model = modelPath.toStdString();
    ps.tokenizer = tokPath.toStdString();
    ps.text = textPath.toStdString();
    ps.seqLen = kSeqLen;
    ps.sequences = kSequences;
    return info;
}

} // namespace gsrq::studio
