#pragma once
// What the GSRQ page's two files share (train_page.cpp: training and perplexity; train_compare.cpp:
// the method comparison): the sequences both measure.
#include "core/lm/sequences.h"

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

} // namespace gsrq::studio
