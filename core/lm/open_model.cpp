// Opening a model file with its vocabulary (open_model.h).
#include "core/lm/open_model.h"

#include "core/base/error.h"
#include "core/io/gguf.h"
#include "core/lm/gguf_model.h"
#include "core/lm/gguf_tokenizer.h"
#include "core/lm/llama2c_model.h"
#include "core/lm/llama2c_tokenizer.h"

#include <fstream>

namespace gsrq {

ModelFormat modelFormatOf(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    return in.read(magic, 4) && std::string(magic, 4) == "GGUF" ? ModelFormat::Gguf : ModelFormat::Llama2c;
}

const Tokenizer& OpenedModel::vocabulary() const
{
    if (!tokenizer)
        throwInvalid(tokenizerProblem.empty() ? path + ": no tokenizer" : tokenizerProblem);
    return *tokenizer;
}

OpenedModel openModel(const std::string& modelPath, const std::string& tokenizerPath)
{
    if (modelFormatOf(modelPath) == ModelFormat::Gguf) {
        const GgufFile file = GgufFile::open(modelPath);
        OpenedModel m{ModelFormat::Gguf, modelPath, loadGgufModel(file), nullptr, {}, {}};
        if (const GgufValue* t = file.find("tokenizer.chat_template"); t && t->type == GgufValueType::String)
            m.chatTemplate = file.string("tokenizer.chat_template");
        // A vocabulary the engine cannot tokenize leaves the model runnable on token ids.
        try {
            m.tokenizer = std::make_shared<BpeTokenizer>(BpeTokenizer::fromGguf(file));
        } catch (const Error& e) {
            m.tokenizerProblem = e.what();
        }
        return m;
    }
    OpenedModel m{ModelFormat::Llama2c, modelPath, loadLlama2cModel(modelPath), nullptr, {}, {}};
    if (tokenizerPath.empty())
        m.tokenizerProblem = modelPath + ": a llama2.c model needs its tokenizer (.bin)";
    else
        m.tokenizer = std::make_shared<Llama2cTokenizer>(Llama2cTokenizer::load(tokenizerPath, m.model.config().vocab));
    return m;
}

} // namespace gsrq
