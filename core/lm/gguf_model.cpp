// A GGUF model's hyperparameters (gguf_model.h).
#include "core/lm/gguf_model.h"

#include "core/base/error.h"

namespace gsrq {

GgufModelFacts ggufModelFacts(const GgufFile& f)
{
    GgufModelFacts m;
    m.architecture = f.string("general.architecture");
    if (const GgufValue* v = f.find("general.name"); v && v->type == GgufValueType::String)
        m.name = v->string;
    const std::string a = m.architecture + ".";
    m.layers = f.integer(a + "block_count");
    m.heads = f.integer(a + "attention.head_count");
    m.kvHeads = f.optionalInteger(a + "attention.head_count_kv").value_or(m.heads);
    m.embedding = f.integer(a + "embedding_length");
    m.feedForward = f.optionalInteger(a + "feed_forward_length").value_or(0);
    m.contextLength = f.optionalInteger(a + "context_length").value_or(0);
    if (m.layers < 1 || m.heads < 1 || m.kvHeads < 1 || m.embedding < 1)
        throwInvalid(f.path(), ": GGUF ", a,
                     "block_count, attention.head_count(_kv) and embedding_length must be "
                     "positive (",
                     m.layers, ", ", m.heads, ", ", m.kvHeads, ", ", m.embedding, ")");
    if (m.heads % m.kvHeads)
        throwInvalid(f.path(), ": GGUF ", m.heads, " query heads are not a multiple of ", m.kvHeads, " KV heads");
    m.headDim = f.optionalInteger(a + "attention.key_length").value_or(0);
    if (m.headDim == 0) {
        if (m.embedding % m.heads)
            throwInvalid(f.path(), ": GGUF embedding_length ", m.embedding, " is not a multiple of ", m.heads,
                         " heads, and no ", a, "attention.key_length says the head size");
        m.headDim = m.embedding / m.heads;
    }
    m.ropeTheta = f.optionalReal(a + "rope.freq_base").value_or(10000.0);
    m.rmsEps = f.optionalReal(a + "attention.layer_norm_rms_epsilon").value_or(1e-5);
    if (const GgufValue* v = f.find(a + "rope.scaling.type"); v && v->type == GgufValueType::String)
        m.ropeScaling = v->string;
    m.ropeScalingFactor = f.optionalReal(a + "rope.scaling.factor").value_or(1.0);
    if (const GgufValue* v = f.find("tokenizer.ggml.model"); v && v->type == GgufValueType::String)
        m.tokenizerModel = v->string;
    if (const GgufValue* v = f.find("tokenizer.ggml.pre"); v && v->type == GgufValueType::String)
        m.tokenizerPre = v->string;
    if (const GgufValue* v = f.find("tokenizer.ggml.tokens"); v && v->type == GgufValueType::Array)
        m.vocabSize = std::int64_t(v->arraySize());
    m.vocabSize = f.optionalInteger(a + "vocab_size").value_or(m.vocabSize);
    m.tiedOutput = f.tensor("output.weight") == nullptr;
    m.attentionBias = f.tensor("blk.0.attn_q.bias") != nullptr;
    for (const GgufTensor& t : f.tensors()) {
        ++m.tensorsByType[ggmlTypeName(t.type)];
        m.bytesByType[ggmlTypeName(t.type)] += std::int64_t(t.bytes);
        m.parameters += t.elements();
    }
    return m;
}

} // namespace gsrq
