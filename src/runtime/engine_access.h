// The model and the tokenizer behind a public Engine, for the layers inside the library (and
// the CLI's benchmark, which reports the model's layouts): the public API shows only
// Engine::info() and Engine::vocabulary(). And the public KV cache type as the cache's DType.
#pragma once

#include "model/model.h"
#include "powerinfer/engine.h"
#include "tokenizer/tokenizer.h"

namespace pi::runtime {

DType kv_dtype(KvCacheType t);

struct EngineAccess {
  static const model::Model& model(const Engine& e) { return *e.model_; }
  static const Tokenizer* tokenizer(const Engine& e) { return e.tokenizer_.get(); }  // nullptr: none
};

}  // namespace pi::runtime
