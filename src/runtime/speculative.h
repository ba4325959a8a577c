// Speculative generation with a Gemma 4 assistant drafter (docs/speculative.md): the drafter
// proposes k tokens (greedily) from the main model's in-place cache, one main-model step verifies
// them, the accepted prefix is kept plus one token drawn by the model, and the cache is rewound
// over the rest. Greedy: the tokens equal plain greedy decoding's, always. Sampling: the
// distribution-preserving acceptance rule, so the tokens are distributed as plain sampling's.
#pragma once

#include "model/drafter.h"
#include "runtime/session.h"
#include "tessera/engine.h"

namespace tessera::runtime {

// Prefills the one prompt into row 0 of `session` (a one-row unified session with verify_tokens
// >= o.draft_tokens + 1) and generates as runtime::Generate does -- max_new_tokens, stop tokens,
// on_token, cancel, finish reasons -- proposing o.draft_tokens tokens per step. out->stats adds drafted_tokens and accepted_tokens; decode_steps
// counts verification steps.
Status GenerateSpeculative(Session& session, const model::Drafter& drafter, const std::vector<Prompt>& prompts,
                           const GenerateOptions& o, GenerateOutput* out);

}  // namespace tessera::runtime
