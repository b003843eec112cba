// What the two passes of a block-diffusion model (models/diffusion_gemma.h) cost, counted from its tensors
// and geometry as models/inference_cost.h counts an autoregressive step: the bytes a pass must move through
// memory (its floor at the copy bandwidth) and the floating-point operations it must do (its floor at the
// tensor-core rate). `deltabit bench` reads a denoising step's time against the larger of the two.
//
// FLOPs of a pass over T tokens (T = the canvas length L for a denoising step):
//   matrices   2 per weight per token for every matrix the pass runs: attention, the dense MLP, the router,
//              and for the experts n_expert_used / n_expert of each stack; a denoising step also runs the
//              LM head (the tied embedding, V·D) and, when self-conditioned, the self-conditioning MLP and
//              the soft embedding (probabilities [L][V] times the embedding table: another V·D per token);
//   attention  4·H·d_h per (query, visible key) pair in every layer (QKᵀ and PV), with the layer's own
//              head_dim. Encoding is causal: query t sees min(W, c + t + 1) keys on a sliding layer whose
//              cache holds c = min(n_past, W − 1) rows, and n_past + t + 1 on a full one. A denoising step
//              is bidirectional: every canvas query sees the cached rows and the whole canvas.
// Norms, activations, RoPE and the router's top-k are left out (under 0.1% at the released geometry).
//
// Bytes of a pass:
//   weights    every tensor the pass uses, once (a pass over T tokens reads each weight once whatever T),
//              except: the embedding table as a lookup contributes T rows, and once more whole as the LM
//              head (denoising) and again for the soft embedding (self-conditioned); an expert stack
//              contributes the fraction of its experts that T tokens choose, 1 − (1 − k/E)^T if each token
//              chose k of E uniformly and independently (at T = 256, k = 8, E = 128: all but 1e-7);
//   kv         per layer, the cached K and V rows read (f32, as both backends hold them), and the pass's own
//              T rows written (encoding) or written and read back (a denoising step attends its canvas);
//   logits     a denoising step writes logits [L][V] (f32); the sampler reads them and writes their
//              temperature-scaled copy; a self-conditioned step reads the previous step's copy.
#pragma once

#include "models/model_config.h"
#include "models/weights.h"

#include <cstdint>

namespace deltabit {

struct PassCost {
    double flops = 0;
    double weight_bytes = 0;
    double kv_bytes = 0;
    double logit_bytes = 0;
    double bytes() const { return weight_bytes + kv_bytes + logit_bytes; }
};

class DiffusionCost {
public:
    // Error unless `weights` is a diffusion_gemma model.
    explicit DiffusionCost(const ModelWeights& weights);

    // Encoding T tokens (the prompt, or a committed block) after n_past tokens: no LM head.
    PassCost encode(int64_t n_past, int64_t n_tokens) const;
    // One denoising step over a canvas of L tokens after n_past encoded tokens.
    PassCost denoise(int64_t n_past, int64_t canvas, bool self_conditioned) const;

    double parameters() const { return parameters_; }
    uint64_t stored_weight_bytes() const { return stored_weight_bytes_; }

private:
    // The part both passes share: the layers' dense matrices and vectors, the experts and attention.
    PassCost layers(int64_t n_past, int64_t n_tokens, bool causal) const;

    ModelConfig config_;
    double parameters_ = 0;
    uint64_t stored_weight_bytes_ = 0;
    double layer_matrix_weights_ = 0;  // attention, dense MLP and router weights of every layer
    double layer_other_bytes_ = 0;     // every layer tensor's bytes but the expert stacks
    double expert_weights_ = 0;        // elements of one expert (gate, up and down), summed over layers
    double expert_stack_bytes_ = 0;    // all experts of all layers, as stored
    double embedding_bytes_ = 0;       // the table [V][D] as stored (lookup and LM head)
    double sc_weights_ = 0, sc_bytes_ = 0;  // the self-conditioning MLP and its pre-norm
    double global_vector_bytes_ = 0;       // output_norm
};

}  // namespace deltabit
