/* metaformer.h - v0.1.0 - public domain / MIT - one-file C99 library for MetaFormer language models
 *
 * Tensors, a small reverse-mode autograd, the ops transformer variants are built from, optimizers
 * and learning-rate schedules, in one STB-style header. The CUDA backend lives in the companion
 * file metaformer_cuda.cuh.
 *
 * USAGE
 *   In exactly ONE C or C++ file:
 *       #define METAFORMER_IMPLEMENTATION
 *       #include "metaformer.h"
 *   Every other file includes "metaformer.h" without the define. Build with
 *       cc -O2 -march=native -fopenmp app.c -lm
 *   (-march=native selects the AVX-512 / AVX2 GEMM kernel; -fopenmp uses all cores; both optional.)
 *
 * A 20-LINE EXAMPLE: fit y = 2x + 1 with one linear layer
 *       mf_ctx *ctx = mf_ctx_new(42);                        // seed for init and dropout
 *       mf_linear_layer fc = mf_linear_layer_new(ctx, "fc", 1, 1, 1);   // PyTorch init
 *       mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 0.05f);
 *       int shape[2] = {8, 1};
 *       float xs[8], ys[8];
 *       for (int i = 0; i < 8; i++) { xs[i] = i / 8.0f; ys[i] = 2 * xs[i] + 1; }
 *       for (int step = 0; step < 500; step++) {
 *           mf_tensor *x = mf_from(ctx, 2, shape, xs), *y = mf_from(ctx, 2, shape, ys);
 *           mf_tensor *loss = mf_mse(ctx, mf_linear(ctx, x, fc.weight, fc.bias), y);
 *           mf_backward(ctx, loss);                          // grads accumulate into params
 *           mf_optimizer_step(ctx, &opt);                    // Adam on the flat buffers
 *           if (step % 100 == 0) printf("%d %f\n", step, loss->data[0]);
 *           mf_zero_grad(ctx);
 *           mf_reset(ctx);                                   // frees this step's activations
 *       }
 *       if (!mf_ok(ctx)) fprintf(stderr, "%s\n", mf_error(ctx));   // sticky error: check once
 *       mf_ctx_free(ctx);
 *
 * OPTIONS (define before including the implementation)
 *   METAFORMER_STATIC       all functions are static (private to the implementing file)
 *   MF_MALLOC(sz), MF_REALLOC(p, sz), MF_FREE(p)   custom allocator: define all three or none
 *   MF_ASSERT(x)            internal invariant check (default: assert from <assert.h>)
 *   METAFORMER_NO_OPENMP    ignore OpenMP even when compiling with -fopenmp
 *   METAFORMER_NO_SIMD      use the portable C GEMM kernel instead of AVX-512 / AVX2
 *   METAFORMER_CUDA         also compile the CUDA backend (that file must be compiled by nvcc and
 *                           linked with -lcublas); then mf_ctx_set_device(ctx, MF_DEVICE_CUDA)
 *                           puts a context on the GPU (see metaformer_cuda.cuh)
 *   MF_CUDA_DEBUG           CUDA: synchronise after every kernel so a fault names its op
 *   METAFORMER_NO_XL        leave out the section [mf:xl]: the relative mixer (Transformer-XL,
 *                           compressive) and mf_rel_attention (mf_model_memory_slot, _reset_memory
 *                           and _aux_loss remain: no model has memories)
 *   METAFORMER_NO_FASTWEIGHTS  leave out [mf:fastweights]: fast_weights, linear, mf_dpfp,
 *                           mf_fast_weights, mf_linear_attention (mf_elu1 is a core op and stays)
 *   METAFORMER_NO_FEEDBACK  leave out [mf:feedback]: feedback, feedback_kv, mf_feedback_attention
 *                           With a family left out, its mixers keep their names and enum values but
 *                           mf_model_check refuses them, naming the switch (mf_mixer_compiled tells);
 *                           the declarations of its ops stay, and calling one fails to link. Compile
 *                           the CUDA backend's translation unit with the same switches.
 *   METAFORMER_NO_DATA      leave out [mf:tokenizer] and [mf:data] (tokenizers, shards, loaders)
 *   METAFORMER_NO_MMAP      read token shards with stdio instead of memory-mapping them (the default
 *                           where POSIX mmap is missing)
 *   METAFORMER_MPI          compile [mf:dist], data-parallel training over MPI (mf_dist_*; includes
 *                           <mpi.h>: build with mpicc, run with mpirun; see docs/distributed.md)
 *   METAFORMER_NCCL         with METAFORMER_MPI and METAFORMER_CUDA: contexts on the GPU average their
 *                           gradients with NCCL (one GPU per rank, the local rank's; collectives on a
 *                           stream of their own, ordered by events: docs/math.md §18.8); link -lnccl
 *
 * CONCEPTS
 *   Context   mf_ctx owns everything: parameters (+ gradients + optimizer moments, each ONE flat
 *             buffer) and an activation arena that mf_reset() empties after every step. Nothing
 *             in a training step calls malloc once the first step has sized the arena.
 *   Tensors   float32, row-major, 1..4 dims, batch-first ([B, T, D]; heads [B, H, T, dk]); on a
 *             CUDA context in bf16 precision some activations hold bf16 (t->bf16).
 *             t->data holds t->ne values; t->grad (when it has one) the same shape.
 *             Parameter tensors live until mf_ctx_free; activation tensors until mf_reset.
 *             Do not keep t->data of a parameter across mf_param() calls: the flat buffer may move.
 *   Autograd  define-by-run: each op that needs a gradient is appended to a tape;
 *             mf_backward(ctx, loss) walks it backwards and ADDS into gradients, so shared weights
 *             and residuals need nothing special. mf_no_grad / mf_detach stop gradients.
 *   Errors    no function crashes on bad input. A failing call returns NULL (or a negative code),
 *             stores a message naming the op, the shapes and the fix (mf_error), and marks the
 *             context failed: every later op returns NULL, so checking once at the end is enough.
 *             mf_set_check_finite(ctx, 1) makes a NaN / Inf an error of the op that made it, and
 *             mf_ctx_set_memory_limit(ctx, bytes) makes growth past a cap one (naming who asked).
 *
 * CONTENTS (search for the banners, e.g. "[mf:ops]")
 *   [mf:api]        public declarations
 *   [mf:platform]   allocator, errors, threads, SIMD vectors, timer, counter-based RNG
 *   [mf:memory]     context, activation arena, parameter arena, tensor creation
 *   [mf:init]       parameter initialisers (PyTorch defaults)
 *   [mf:autograd]   tape, backward, no-grad, the op profiler (mf_set_profile)
 *   [mf:gemm]       packed, register-blocked SGEMM (AVX-512 / AVX2 / portable)
 *   [mf:bf16]       bf16 products on the CPU: AMX, AVX512-BF16, portable, emulated AMX kernels
 *   [mf:ops]        every op: shape check, forward, backward - each in one place
 *   [mf:layers]     linear layer helper
 *   [mf:model]      the MetaFormer language model: blocks, forward, loss, generation, the
 *                   sequence-classification head; each family of mixers plugs in through one
 *                   descriptor, and names no mixer (tests/hygiene.sh checks)
 *   [mf:config]     the config: the table of the optional fields, names, defaults, mf_model_check
 *   [mf:attention]  mixer family: sdpa, metric, quadratic (softmax attention, KV cache)
 *   [mf:pool]       mixer family: pool, identity
 *   [mf:xl]         mixer family: Transformer-XL relative attention, segment memory, compressive
 *   [mf:fastweights] mixer family: fast weights (DPFP + delta rule) and linear attention
 *   [mf:feedback]   mixer family: the feedback transformer (original and shared-KV)
 *   [mf:mixers]     the mixer table: name, family, flags and config fields of every mixer; the
 *                   mixers registered at run time (mf_mixer_register: each a family of its own)
 *   [mf:io]         checkpoints (safetensors, crash-safe writes: fsync + rename, all-or-nothing loads,
 *                   the model's state: memories)
 *   [mf:tokenizer]  bytes, characters and byte-level BPE (GPT-2's files, training), one file format
 *   [mf:data]       token shards (llm.c, nanoGPT), memory-mapped streams, the training loaders
 *   [mf:optim]      Adam (PyTorch, labml), AdamW, SGD-momentum, clipping, schedules
 *   [mf:dist]       data-parallel training over MPI: gradient buckets averaged during the backward,
 *                   ZeRO-1, checkpoints on any world size, failure agreement (METAFORMER_MPI only)
 *   metaformer_cuda.cuh mirrors this order with [cu:*] banners (its own CONTENTS table).
 *
 * EXTENDING (what a change touches)
 *   An op       one `static const mf__op` in [mf:ops] (or its family's section): name, shape,
 *               forward, backward and its properties (MF__OP_PROPS: view, unary, assigns its
 *               input gradients, passes its gradient through, output storable in bf16); named
 *               argument slots (MF__ARG_*) instead of iarg[] indices; one entry in mf__ops (end of
 *               the implementation); an example in tests/op_examples.h, from which
 *               tests/test_ops.c checks the properties against what the backward does and
 *               tests/test_cuda_ops.cpp runs the CPU-vs-CUDA parity; one row in
 *               metaformer_cuda.cuh's mf__cu_ops (with 1 in its bf16 column when the kernels read
 *               and write bf16 tensors themselves, [cu:storage]). The tests fail when any of these
 *               is missing.
 *   Your mixer  no edit of this file: an mf_mixer_def (name, help, fields of its own and of
 *               MF_MODEL_FIELDS, per-layer struct, make_layer, forward; optional check, gen_begin /
 *               gen_step, aux_loss, free_layer, reset_memory / state for memories across calls,
 *               run_stack for a whole-stack recurrence, flops for benchmarks) and one
 *               mf_mixer_register call in your program (docs/math.md §23, examples/custom_mixer.c);
 *               the example programs take it with -DEXTRA_MIXERS=fn.
 *   A mixer     (built in) its code in its family's section, an mf_mixer_kind value and one row in
 *               [mf:mixers] (name, family, flags, the config fields it reads, its help line; or
 *               its name and an mf_mixer_def, as pool's and the fast weights', from which the rest
 *               is made); the
 *               examples, benchmarks, scripts and tests take names, fields and capabilities from
 *               the library (mf_mixer_name, mf_mixer_count, mf_mixer_flags, `--list-mixers`).
 *   A family    a section with an mf__family descriptor (check, make_layer, init, free, mixer or
 *               run_stack, gen_begin, aux_loss, state: what crosses calls, for checkpoints,
 *               memory slots and rows, held keys, its FLOP count), its per-layer struct, its rows,
 *               a METAFORMER_NO_<FAMILY> switch, its ops in the op list, and the CUDA twin section
 *               [cu:<family>]. tests/test_resume.sh resumes every mixer bit for bit.
 *   A field     (of a built-in mixer) its member in mf_model_config and one row in
 *               MF_MODEL_FIELDS (type, default, range, option, how checkpoints keep it, help); its
 *               bit in the rows of the mixers that read it; its family's code. The defaults,
 *               mf_model_check, mf_model_config_reset_unread and the example programs' options
 *               (build/train, sample, classify, ablate), their checkpoint keys and messages come
 *               from the row; tests/test_cli.sh fails when a row has no option.
 *   The math    of every mixer and memory model is in docs/math.md; comments cite it as
 *               "docs/math.md §n.m".
 *
 * LICENSE: MIT. See the end of the file.
 */
#ifndef METAFORMER_H
#define METAFORMER_H

/* ==== [mf:api] ============================================================================== */
/* QUICK REFERENCE: one line per public function, by area; the full contract of each (shapes,
   errors, return values) is in the comment at its declaration below. Every call that can fail
   returns NULL or -1 and leaves the reason in mf_error(ctx).

   context      mf_ctx_new / _free          a context (parameters, activations, RNG) from a seed
                mf_ok, mf_error             1 while no error happened; the first error's message
                mf_clear_error              forget the error and use the context again
                mf_set_threads              CPU threads of the kernels (0: all OpenMP threads)
                mf_set_training             training mode: dropout on (1) or off (0)
                mf_reset                    empty the activation arena and the tape, once per step
                mf_activation_bytes         activation bytes in use now (_peak_bytes: the maximum)
                mf_ctx_set_memory_limit     a cap on memory use (_memory_limit, _memory_bytes read it)
                mf_set_check_finite         make the first NaN / Inf of any op an error naming it
                mf_set_profile              time every op and GEMM (_profile_entries, _profile_report)
                mf_param_count              floats in the flat parameter buffer (with alignment gaps)
                mf_param_values             parameter values: the model's size (all, or trainable only)
                mf_time                     seconds of a wall clock, for timing
   tensors      mf_new, mf_from             an activation tensor: zeros, or a copy of host values
                mf_shape_str                "[2, 3, 4]" of a tensor
   parameters   mf_param                    a named parameter in the flat buffer
                mf_param_find, _at, _tensors   a parameter by name, by index; how many
                mf_param_set_trainable      freeze or unfreeze a parameter
                mf_param_data, _grads       the flat parameter and gradient buffers
                mf_init_const, _uniform, _normal, _kaiming_uniform, _bias   initialisers (PyTorch's)
   autograd     mf_backward                 accumulate the gradients of a one-element loss
                mf_set_grad                 record the tape (1) or not (0, a no-grad region)
                mf_set_keep_activation_grads   recycle activation gradients inside the backward (0)
                mf_detach                   the same values without a gradient path
                mf_zero_grad                zero every parameter gradient
   ops          mf_matmul, mf_head_matmul, mf_linear                    products
                mf_add, _sub, _mul, _scale, _reciprocal                 elementwise arithmetic
                mf_relu, _gelu, _sigmoid, _silu, _exp, _elu1            activations
                mf_softmax, _log_softmax, _cross_entropy, _mse          softmax and losses
                mf_layernorm, mf_embedding, mf_dropout                  layers as ops
                mf_reshape, _permute, _transpose, _concat, _slice, _roll   shapes and copies
                mf_sum, _mean, _sum_axis                                reductions
                mf_conv1d, mf_avg_pool_seq                              along the sequence
                mf_attention, _attention_layout                         fused scaled dot-product attention
                mf_rel_attention                                        fused Transformer-XL attention
                mf_dpfp, _fast_weights, _linear_attention               fast weights, linear attention
                mf_feedback_attention                                   one query against the feedback memory
   layers       mf_linear_layer_new         the weight and bias of a Linear layer, PyTorch's init
   devices      mf_cuda_available           usable CUDA devices, or 0 and why
                mf_ctx_set_device, _device  put a context on the GPU (right after mf_ctx_new)
                mf_ctx_set_precision        fp32, TF32 (CUDA) or bf16 arithmetic (_precision reads it;
                                            mf_precision_name / _from_name; mf_cuda_set_tf32)
                mf_to_host, mf_grad_to_host copy values or gradients to host memory
                mf_set_data                 overwrite a tensor's values from host memory
                mf_item                     the first value of a tensor (a loss)
   GEMM         mf_sgemm, mf_sgemm_batched  row-major SGEMM, one or a batch of products
                mf_bgemm                    the same in bf16 on one of the CPU's bf16 kernels
                mf_cpu_bf16_kernel, mf_cpu_features   what the CPU offers (AMX, AVX512-BF16)
                mf_ctx_set_bf16_kernel, _bf16_kernel  the kernel of a context's bf16 products
                mf_bf16_from_float, _to_float         one value to bf16 and back
   optimizers   mf_optimizer_default        PyTorch's defaults for Adam, labml's Adam, AdamW, SGD
                mf_schedule_lr              the learning rate of a schedule at a step
                mf_optimizer_step           one update of every trainable parameter
                mf_optimizer_steps          updates made so far
                mf_clip_grad_norm           global-norm clipping; returns the norm
                mf_train_update             clip + step + zero the gradients in one pass
   model        mf_model_config_default     the default config (set vocab)
                mf_mixer_name / _from_name / _compiled   mixers by name; compiled in or not
                mf_pos_, mf_act_, mf_feature_, mf_metric_form_, mf_block_ name / _from_name   other config names
                mf_model_check              validate a config, naming the field at fault
                mf_model_config_reset_unread  the fields the config's mixer does not read back to default
                mf_config_field_at, _choice, _readers, _get, _set   the mixers' fields (MF_MODEL_FIELDS) at run time
                mf_mixer_reads              whether a mixer reads one of those fields
   your mixer   mf_mixer_register           a token mixer of your own (mf_mixer_def), by name from then on
                mf_mixer_count, _help, _field_of   every mixer of the program; its help; its fields
                mf_mixer_flags              what a mixer is: heads, non-causal form, fixed state, memories
                mf_model_memory_slot_now, _rows_now, mf_state_mode / _ints / _floats   a mixer's memories, checkpoints
                mf_model_ln1, _ffn, _layer_state   a run_stack's parts of layer l: LN1, the FFN sub-block, its struct
                mf_model_flops              the forward's product FLOPs per token (each family counts its own)
                mf_model_config_set / _get  a registered mixer's config field by name
                mf_model_ctx, _param, _field   inside its hooks: the context, a layer parameter, a field
                mf_model_new / _free        a model's parameters in a context / the model
                mf_model_get_config         the config of a model
                mf_model_forward            logits of a batch of ids
                mf_model_loss               mean next-token cross-entropy (plus the auxiliary loss)
                mf_model_loss_part          a micro-batch's share of a larger batch's loss
                mf_model_classify_logits / _loss   sequence classification (n_classes > 0)
                mf_model_generate           continue a prompt with a cache (greedy, temperature, top-k)
                mf_model_memory_slot, _reset_memory   the memory models' memory slots
                mf_model_memory_rows        which memory rows a micro-batch uses
                mf_model_aux_loss           the compressive transformer's reconstruction loss
   inspection   mf_model_attention_keys     keys per query of a forward (sizes the buffers)
                mf_model_attention          every layer's and head's scores and probabilities
                mf_model_attention_form     a head's bilinear form (metric tensor, Wq Wk^T)
   checkpoints  mf_save, mf_load            every parameter (and optimizer state) in safetensors
                mf_load_meta                a metadata value of a checkpoint
                mf_model_save, _load        the same with the model's state (memories)
   dist (METAFORMER_MPI)
                mf_dist_config_default, mf_dist_new   a data-parallel context on an MPI communicator
                mf_dist_rank, _world, _local_rank     where this process is
                mf_dist_seed                this rank's dropout seed
                mf_dist_attach              check the model on every rank, broadcast rank 0's weights
                mf_dist_no_sync             no averages in the coming backwards (accumulation)
                mf_dist_sync                finish the gradient averages, sum scalars, agree on failure
                mf_dist_check               agree on failure at any other point
                mf_dist_clip_grad_norm, _optimizer_step   clipping and the update (ZeRO-1 too)
                mf_dist_save, _load         checkpoints resumable on any world size
                mf_dist_error, _free        the last error; free the context
   tokenizers (not under METAFORMER_NO_DATA)
                mf_tokenizer_bytes, _chars, _gpt2, _train_bpe   the 256 bytes, a text's characters,
                                            GPT-2's files, a BPE trained on a text
                mf_tokenizer_save, _load    one small text file
                mf_tokenizer_error          NULL, or why the tokenizer failed
                mf_tokenizer_get_kind, _vocab_size, _token   kind, ids, one token's bytes
                mf_tokenizer_encode, _decode   bytes to ids and back (lossless on any bytes)
                mf_tokenizer_free           free it
   token data   mf_shard_write              ids to a shard file (llm.c's format or raw uint16)
                mf_tokens_open              shard files as one stream (memory-mapped)
                mf_tokens_from_ids          a stream over an array of ids
                mf_tokens_error, _count, _files   why it failed; ids; shard files
                mf_tokens_set_vocab         check every id read against a vocabulary size
                mf_tokens_read, _close      read ids across file boundaries; close
                mf_loader_init, _next, _batches, _restore, _free   shuffled windows or sequential
                                            columns, with a checkpointable state */
#include <stddef.h>
#include <stdint.h>
#ifdef METAFORMER_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 /* C++: the C API only (MPI's C++ bindings are deprecated and warn) */
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif

#define METAFORMER_VERSION "0.1.0"

#ifndef MFDEF
#if defined(METAFORMER_STATIC) && (defined(__GNUC__) || defined(__clang__))
#define MFDEF static __attribute__((unused)) /* no warning for the functions a file does not use */
#elif defined(METAFORMER_STATIC)
#define MFDEF static
#else
#define MFDEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MF_MAX_DIMS 4
#define MF_MAX_SRC 8   /* inputs of one op: mf__begin sets src[0..3], an op with more sets src[4..7] before mf__finish */

typedef struct mf_ctx mf_ctx;
typedef struct mf__op mf__op;

/* A float32 tensor. Read data/shape freely; the fields below the line are the autograd's. */
typedef struct mf_tensor {
    float *data;                 /* ne values, row-major */
    float *grad;                 /* same layout; NULL when the tensor takes no gradient */
    int64_t ne;                  /* number of elements */
    int ndim;                    /* 1..4 */
    int shape[MF_MAX_DIMS];
    const char *name;            /* parameters: their unique name; activations: NULL */
    /* ------------------------------------------------------------------ autograd internals */
    const mf__op *op;            /* the op that made it; NULL for leaves */
    struct mf_tensor *src[MF_MAX_SRC];
    int iarg[8];                 /* op arguments, in the slots each op names ([mf:ops]) */
    float farg[4];
    void *aux;                   /* op inputs that are not tensors (token ids, targets) */
    float *saved;                /* values the forward keeps for the backward */
    int requires_grad;
    int is_param;
    int grad_pending;            /* mf_backward: the gradient buffer is not zeroed yet */
    int n_uses;                  /* mf_backward: how many ops on the tape read it */
    int bf16;                    /* data holds bf16 values (2 bytes each): a CUDA context in MF_PREC_BF16
                                    stores some activations so (mf_ctx_set_precision); mf_to_host and
                                    mf_item convert them */
    int64_t offset;              /* parameters: position in the flat buffers */
} mf_tensor;

/* ---- context --------------------------------------------------------------------------------- */
/* A context with the given seed (initialisation and dropout are reproducible from it).
   Returns NULL only when memory is exhausted. */
MFDEF mf_ctx *mf_ctx_new(uint64_t seed);
MFDEF void mf_ctx_free(mf_ctx *ctx);
/* 1 while no error happened, 0 after one (and for a NULL ctx). */
MFDEF int mf_ok(const mf_ctx *ctx);
/* The first error's message, or "" when there is none. */
MFDEF const char *mf_error(const mf_ctx *ctx);
/* Forget the error so the context can be used again (tensors made by failed calls are gone). */
MFDEF void mf_clear_error(mf_ctx *ctx);
/* Threads for the CPU kernels: 0 = all OpenMP threads (default), 1 = single-threaded. */
MFDEF void mf_set_threads(mf_ctx *ctx, int n_threads);
/* Training mode (default 1): dropout is active only in training mode. Returns the old mode. */
MFDEF int mf_set_training(mf_ctx *ctx, int training);
/* Empty the activation arena and the tape: call once per step, after the optimizer step.
   Every activation tensor made before becomes invalid; parameters are kept (on a GPU their
   buffers, which grow by doubling while a model adds parameters, are cut to the floats in use
   here: their pointers may change, the values do not). */
MFDEF void mf_reset(mf_ctx *ctx);
/* Bytes in use by activations now / at most since the context was made, and parameter floats. */
MFDEF size_t mf_activation_bytes(const mf_ctx *ctx);
MFDEF size_t mf_activation_peak_bytes(const mf_ctx *ctx);
/* A memory cap of `bytes` (0 = none, the default) on what grows with the model and the batch: the
   activation arena (host, and device on CUDA), the parameter and gradient buffers and the optimizer
   moments (and in bf16 on CUDA the bf16 weight copy and GEMM scratch). Growth beyond it fails the
   context with a message naming the cap, the use, the request, who asked (the op, "parameters",
   "optimizer moments" or "bf16 copies") and the fix; a cap that is large enough
   changes nothing (the same values bit for bit: the arena's last block is cut to the room left).
   The GEMM workspace, model memories and bookkeeping are outside it. Returns 0, or -1 with the
   error in ctx when the context already uses more. mf_ctx_memory_bytes: what the cap counts now. */
MFDEF int mf_ctx_set_memory_limit(mf_ctx *ctx, size_t bytes);
MFDEF size_t mf_ctx_memory_limit(const mf_ctx *ctx);
MFDEF size_t mf_ctx_memory_bytes(const mf_ctx *ctx);
/* Check mode (off by default; costs nothing when off): after every op's forward its output, and
   after every op's backward the gradients it wrote into its inputs, are tested for NaN / Inf; the
   first op that produced one fails the context with its name, the shapes, the element and whether
   its inputs (or, in the backward, its output gradient) were finite - so the message names the
   origin, not an op downstream of it. A non-finite input names where the value came from outside
   the ops (a parameter, mf_from data, a loaded checkpoint). Slow (a pass over every output; on
   CUDA a copy to the host); for finding where a loss goes NaN. Returns the old setting. */
MFDEF int mf_set_check_finite(mf_ctx *ctx, int on);
/* Op profiler (off by default; when off it costs one test of a flag per op and per GEMM call):
   while on, every op's forward and backward is timed, and so is the part of it spent in the GEMM
   driver (the matmul / linear / conv products, cuBLAS on a GPU; the small per-tile products inside
   the fused attention and fast-weights kernels count to their op), plus mf_optimizer_step,
   mf_clip_grad_norm, mf_train_update, mf_zero_grad and the zeroing of activation gradients in
   mf_backward. Times add up per op name over all calls until the next mf_set_profile(ctx, 1), which
   zeroes them. On a GPU context the profiler waits for the device's queue before and after every
   timed region (kernels run asynchronously otherwise), so each op's time is the device's, launch
   latency included, and a profiled step is slower than an unprofiled one, whose launches overlap
   the kernels: read the shares, not the sum. Returns the old setting. Each op name belongs to one
   kind (mf_profile_entry's kind: "matmul", "attention", "layernorm", "elementwise", "loss",
   "embedding", "copy", "optimizer", "memset"), so a report can group them as PyTorch's profiler
   would. */
typedef struct mf_profile_entry {
    const char *name;        /* the op's name ("linear", "attention", ...) or "optimizer_step",
                                "clip_grad_norm", "zero_grad", "zero_activation_grads" */
    const char *kind;        /* its group, see above */
    int64_t calls;           /* forward calls (backward calls for what runs only there) */
    double fwd_s, fwd_gemm_s; /* seconds in its forward, of which in the GEMM driver */
    double bwd_s, bwd_gemm_s; /* seconds in its backward (and the non-op entries), of which in GEMM */
} mf_profile_entry;
MFDEF int mf_set_profile(mf_ctx *ctx, int on);
/* The profile's entries into out[0 .. max-1], the slowest (forward + backward) first; returns how
   many there are (more than max: the rest were left out), 0 when none, -1 for a NULL ctx. */
MFDEF int mf_profile_entries(const mf_ctx *ctx, mf_profile_entry *out, int max);
/* The profile as a text table into buf (one line per op, then the time per kind with GEMM apart),
   each time divided by n_steps (the steps profiled; 1 = totals); returns the length of the whole
   text as snprintf does (buf may be NULL with size 0 to ask), -1 for a NULL ctx or n_steps < 1. */
MFDEF int mf_profile_report(const mf_ctx *ctx, int n_steps, char *buf, size_t size);
/* The length of the flat parameter buffer: every parameter and the zero gaps that align each one
   to 16 floats (the size of mf_param_data and mf_param_grads). To count parameters, mf_param_values. */
MFDEF int64_t mf_param_count(const mf_ctx *ctx);
/* The number of parameter values, as PyTorch's sum(p.numel() for p in model.parameters()) - no
   alignment gaps; trainable_only = 1: of the parameters that train (mf_param_set_trainable). */
MFDEF int64_t mf_param_values(const mf_ctx *ctx, int trainable_only);
/* Seconds since an arbitrary point (wall clock with OpenMP or POSIX clocks, else CPU time). */
MFDEF double mf_time(void);

/* ---- tensors --------------------------------------------------------------------------------- */
/* Activation tensors (valid until mf_reset), no gradient. shape has ndim (1..4) positive sizes. */
MFDEF mf_tensor *mf_new(mf_ctx *ctx, int ndim, const int *shape);               /* zeros */
MFDEF mf_tensor *mf_from(mf_ctx *ctx, int ndim, const int *shape, const float *values); /* copy */
/* "[2, 3, 4]" into buf (at least 64 bytes); returns buf. */
MFDEF char *mf_shape_str(const mf_tensor *t, char *buf, size_t size);

/* ---- parameters ------------------------------------------------------------------------------ */
/* A named parameter (zeros) in the flat parameter buffer; names are unique per context.
   The pointer stays valid until mf_ctx_free. */
MFDEF mf_tensor *mf_param(mf_ctx *ctx, const char *name, int ndim, const int *shape);
/* The parameter of that name, or NULL (no error is raised). */
MFDEF mf_tensor *mf_param_find(const mf_ctx *ctx, const char *name);
/* The i-th parameter in creation order (NULL when out of range), and their number. */
MFDEF mf_tensor *mf_param_at(const mf_ctx *ctx, int i);
MFDEF int mf_param_tensors(const mf_ctx *ctx);
/* Freeze (0) or unfreeze (1) a parameter: frozen ones get no gradient and no update. */
MFDEF void mf_param_set_trainable(mf_tensor *param, int trainable);
/* The flat buffers: mf_param_count(ctx) floats each (gaps between tensors are zero); device
   pointers on a CUDA context (see mf_ctx_set_device). */
MFDEF float *mf_param_data(mf_ctx *ctx);
MFDEF float *mf_param_grads(mf_ctx *ctx);

/* ---- initialisers (reproducible: keyed by the context seed and the parameter's name; an
   unnamed tensor's by the seed and the number of unnamed tensors initialised before it) ------- */
MFDEF int mf_init_const(mf_ctx *ctx, mf_tensor *t, float value);
MFDEF int mf_init_uniform(mf_ctx *ctx, mf_tensor *t, float lo, float hi);
MFDEF int mf_init_normal(mf_ctx *ctx, mf_tensor *t, float mean, float std);
/* PyTorch's default for Linear/Conv weights: kaiming_uniform(a = sqrt 5) = U(-b, b),
   b = 1/sqrt(fan_in), fan_in = ne / shape[0] (in_features, or in_channels * kernel). */
MFDEF int mf_init_kaiming_uniform(mf_ctx *ctx, mf_tensor *t);
/* PyTorch's default bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
MFDEF int mf_init_bias(mf_ctx *ctx, mf_tensor *t, int fan_in);

/* ---- autograd -------------------------------------------------------------------------------- */
/* Back-propagate from a one-element tensor: parameter gradients ACCUMULATE (call mf_zero_grad
   between steps); activation gradients are recomputed on each call (and not kept at all after
   mf_set_keep_activation_grads(ctx, 0)). Returns 0 or -1. */
MFDEF int mf_backward(mf_ctx *ctx, mf_tensor *loss);
/* Enable (1) or disable (0) recording; returns the old state. Ops in a no-grad region make
   tensors without gradient (use it for evaluation, memory updates, sampling). */
MFDEF int mf_set_grad(mf_ctx *ctx, int enabled);
/* Keep (1, the default) or recycle (0) activation gradients; returns the old setting. Recycled:
   mf_backward gives an activation its gradient buffer when the first op that adds to it runs and
   hands the buffer on as soon as its own op is done, so activation tensors have grad == NULL
   after the call (as PyTorch keeps no gradient of a non-leaf tensor). Parameter gradients and
   every value are the same bit for bit; the backward needs much less memory and writes into
   buffers still in cache. What a training loop wants, on either device. */
MFDEF int mf_set_keep_activation_grads(mf_ctx *ctx, int keep);
/* A tensor with the same values and no gradient path (shares the data). */
MFDEF mf_tensor *mf_detach(mf_ctx *ctx, mf_tensor *x);
/* Set every parameter gradient to zero. */
MFDEF void mf_zero_grad(mf_ctx *ctx);

/* ---- ops: each returns a new tensor, or NULL with the error stored in ctx ------------------- */
/* a [..., M, K] @ b [..., K, N] -> [..., M, N]; trans_a / trans_b use the operand transposed
   (a stored [..., K, M], b stored [..., N, K]). Leading dims must match, or one operand is 2-D
   and is shared by every matrix of the other. */
MFDEF mf_tensor *mf_matmul(mf_ctx *ctx, mf_tensor *a, mf_tensor *b, int trans_a, int trans_b);
/* One matrix per head: x [..., H, K] (any leading dims, e.g. token-major [B, T, H, K]) and
   w [H, K, N] -> y [..., H, N] with y[..., h, :] = x[..., h, :] @ w[h]. Reads x where it lies (the
   rows of head h are H*K floats apart: no head split or merge copies); e.g. metric attention's
   q = p M per head. */
MFDEF mf_tensor *mf_head_matmul(mf_ctx *ctx, mf_tensor *x, mf_tensor *w);
/* x [..., in] @ w[out, in]^T + b[out] -> [..., out] (b may be NULL), as torch.nn.Linear. */
MFDEF mf_tensor *mf_linear(mf_ctx *ctx, mf_tensor *x, mf_tensor *w, mf_tensor *b);
/* Elementwise with broadcasting: the smaller operand's shape must equal the trailing dims of
   the larger one (e.g. a bias [D] on [B, T, D]) or have one element. */
MFDEF mf_tensor *mf_add(mf_ctx *ctx, mf_tensor *a, mf_tensor *b);
MFDEF mf_tensor *mf_sub(mf_ctx *ctx, mf_tensor *a, mf_tensor *b);
MFDEF mf_tensor *mf_mul(mf_ctx *ctx, mf_tensor *a, mf_tensor *b);
MFDEF mf_tensor *mf_scale(mf_ctx *ctx, mf_tensor *x, float s);
MFDEF mf_tensor *mf_relu(mf_ctx *ctx, mf_tensor *x);
/* GELU: exact erf form (torch default) when tanh_approx == 0, else the tanh approximation. */
MFDEF mf_tensor *mf_gelu(mf_ctx *ctx, mf_tensor *x, int tanh_approx);
MFDEF mf_tensor *mf_sigmoid(mf_ctx *ctx, mf_tensor *x);
MFDEF mf_tensor *mf_silu(mf_ctx *ctx, mf_tensor *x);
MFDEF mf_tensor *mf_exp(mf_ctx *ctx, mf_tensor *x);
/* 1 / x elementwise (torch.reciprocal; a zero gives Inf): divisions in op compositions, e.g. the
   normaliser of non-causal linear attention */
MFDEF mf_tensor *mf_reciprocal(mf_ctx *ctx, mf_tensor *x);
/* Softmax over the last axis. causal != 0: x is [..., Tq, Tk] scores and key j is hidden from
   query i when j > i + (Tk - Tq) (the last Tq keys are the queries' own positions). */
MFDEF mf_tensor *mf_softmax(mf_ctx *ctx, mf_tensor *x, int causal);
MFDEF mf_tensor *mf_log_softmax(mf_ctx *ctx, mf_tensor *x);
/* Mean cross-entropy of softmax(logits [..., V]) against targets (one int per row of logits,
   in [0, V)); rows whose target == ignore_index do not count (e.g. -1: mark padding with -1).
   Returns [1].
   When every row is ignored the loss is 0. */
MFDEF mf_tensor *mf_cross_entropy(mf_ctx *ctx, mf_tensor *logits, const int32_t *targets,
                                  int ignore_index);
/* mean((a - b)^2) over all elements; same shapes. Returns [1]. */
MFDEF mf_tensor *mf_mse(mf_ctx *ctx, mf_tensor *a, mf_tensor *b);
/* LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta (biased var).
   gamma and beta are [D]; either may be NULL (then 1 / 0). */
MFDEF mf_tensor *mf_layernorm(mf_ctx *ctx, mf_tensor *x, mf_tensor *gamma, mf_tensor *beta,
                              float eps);
/* Rows of table [V, D] picked by ids (ndim dims, shape as given) -> [shape..., D]. */
MFDEF mf_tensor *mf_embedding(mf_ctx *ctx, mf_tensor *table, const int32_t *ids, int ndim,
                              const int *shape);
/* Inverted dropout with probability p in [0, 1); identity outside training mode. The mask
   comes from a counter-based RNG (seed, call number, index): reproducible and never stored. */
MFDEF mf_tensor *mf_dropout(mf_ctx *ctx, mf_tensor *x, float p);
/* Same data, new shape (same element count); one size may be -1 (inferred). */
MFDEF mf_tensor *mf_reshape(mf_ctx *ctx, mf_tensor *x, int ndim, const int *shape);
/* out.shape[i] = x.shape[perm[i]] (a copy), as torch.permute. */
MFDEF mf_tensor *mf_permute(mf_ctx *ctx, mf_tensor *x, const int *perm);
MFDEF mf_tensor *mf_transpose(mf_ctx *ctx, mf_tensor *x, int dim0, int dim1);
/* a and b joined along axis (other sizes equal). Negative axes count from the end. */
MFDEF mf_tensor *mf_concat(mf_ctx *ctx, mf_tensor *a, mf_tensor *b, int axis);
/* x[..., start : start + len, ...] along axis. */
MFDEF mf_tensor *mf_slice(mf_ctx *ctx, mf_tensor *x, int axis, int start, int len);
/* torch.roll along one axis: out[(i + shift) mod n] = x[i]. */
MFDEF mf_tensor *mf_roll(mf_ctx *ctx, mf_tensor *x, int shift, int axis);
/* Sum / mean of all elements -> [1]; sum over one axis (removed; a 1-D x gives [1]). */
MFDEF mf_tensor *mf_sum(mf_ctx *ctx, mf_tensor *x);
MFDEF mf_tensor *mf_mean(mf_ctx *ctx, mf_tensor *x);
MFDEF mf_tensor *mf_sum_axis(mf_ctx *ctx, mf_tensor *x, int axis);
/* 1-D convolution over time, channels last: x [B, T, Cin], w [Cout, Cin, K] (torch layout),
   b [Cout] or NULL -> [B, (T + 2*pad - K) / stride + 1, Cout]; zero padding. */
MFDEF mf_tensor *mf_conv1d(mf_ctx *ctx, mf_tensor *x, mf_tensor *w, mf_tensor *b, int stride,
                           int pad);

/* Mean over a window of the sequence axis of x [B, T, D]: centred (t - k/2 .. t + k/2, k odd) or
   causal (t - k + 1 .. t); positions outside [0, T) do not count (count_include_pad = false). */
MFDEF mf_tensor *mf_avg_pool_seq(mf_ctx *ctx, mf_tensor *x, int kernel, int causal);
/* ---- fast weights and linear attention (docs/math.md §7) ------------------------------------
   DPFP features (Schlag et al. 2021): x [..., dk] -> [..., 2 dk nu], nu in [1, 2 dk - 1]:
   a = relu(concat(x, -x)), phi[(r - 1) 2dk + j] = a[j] a[(j - r) mod 2dk] for r = 1..nu (labml's
   roll direction), out = phi / (sum(phi) + eps) (labml: eps 1e-6): non-negative, sums to ~1. */
MFDEF mf_tensor *mf_dpfp(mf_ctx *ctx, mf_tensor *x, int nu, float eps);
/* elu(x) + 1: x + 1 for x > 0, exp(x) else (the linear transformer's positive feature map). */
MFDEF mf_tensor *mf_elu1(mf_ctx *ctx, mf_tensor *x);
/* Fast weights with the delta rule, per (batch, head), W [dv, d_dot] starting at zero:
       W = W + beta_t (v_t - W k_t) k_t^T;  out_t = W q_t     (write first, then read: t sees itself)
   Token-major layout (the projections x W^T [B, T, H * d] reshaped, no head transposes):
   q, k [B, T, H, d_dot] (features, e.g. mf_dpfp of the projections), v [B, T, H, dv],
   beta [B, T, H] (gates in (0, 1)) -> [B, T, H, dv]. chunk picks the kernel (the same values up
   to rounding): 1 = recurrent (token by token; keeps ceil(T / 32) states per head for the
   backward), n > 1 = chunkwise-parallel with chunks of n tokens (DeltaNet's WY form: small dense
   products; keeps 2 T / n states and T * (d_dot + dv) floats per head), 0 = automatic (recurrent
   below T = 16 tokens, chunkwise by 16 from there: the faster one on the CPU). A CUDA context runs
   the same forms on the GPU (same selection; its chunkwise backward takes chunks of up to 128). */
MFDEF mf_tensor *mf_fast_weights(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, mf_tensor *beta,
                                 int chunk);
/* Causal linear attention with the same kernels: W = W + v_t k_t^T, out_t = W q_t (normalise 0:
   for features that are already sum-normalised, mf_dpfp: docs/math.md §7.5), or with normalise 1
   also z = z + k_t and out_t = W q_t / (z . q_t + eps) (Katharopoulos et al.; features must be
   non-negative, e.g. mf_elu1; eps guards a zero denominator, the mixer uses 1e-6; eps is not read
   when normalise is 0). Shapes and chunk as mf_fast_weights. */
MFDEF mf_tensor *mf_linear_attention(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, int normalise,
                                     float eps, int chunk);
/* Feedback attention (docs/math.md §8.2): one query per batch row and head against n memory slots, with
   the relative position tables of the feedback transformer. q [B, H, dk]; k, v [B, H, n, dk]
   (slot 0 the oldest); u [H, dk] the query position bias; r [P, H, dk] the key position
   embeddings and s [P, H] the key position biases, of which the LAST n rows are used (slot j reads
   row P - n + j: the previous step is row P - 1), n <= P -> [B, H, dk]:
       out[b][h] = sum_j a_j v[b][h][j],  a = softmax_j(scale * ((q + u) . k_j + q . r_j + s_j))
   (scale is usually 1 / sqrt(dk)). The query never sees itself: the slots are the past only.
   Saves B*H floats (the log-sum-exp); the backward recomputes the probabilities. dropout: as
   mf_attention's, on a [B, H, n] (element (b, h, j) of mf_dropout's draw on that tensor). */
MFDEF mf_tensor *mf_feedback_attention(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v,
                                       mf_tensor *u, mf_tensor *r, mf_tensor *s, float scale, float dropout);
/* Fused multi-head scaled dot-product attention (FlashAttention-2 style on the CPU):
   q [B, H, Tq, dk], k [B, H, Tk, dk], v [B, H, Tk, dv] -> [B, H, Tq, dv],
   out = softmax(scale * q k^T [+ causal mask]) v. causal != 0: query i sees key j iff
   j <= i + (Tk - Tq) (the first Tk - Tq keys are memory, visible to every query; the same mask
   as mf_softmax). A query that sees no key outputs zeros. No Tq x Tk matrix is kept: the op
   saves B*H*Tq floats (the row log-sum-exp) and the backward recomputes the probabilities tile
   by tile, so memory grows linearly with the sequence. Gradients are deterministic (they do not
   depend on the thread count). scale is usually 1 / sqrt(dk).
   dropout in [0, 1): in training mode, inverted dropout on the probabilities before they weight
   the values (labml's dropout(attn)): out = (softmax(s) * mask / (1 - dropout)) v, the mask never
   stored - it is exactly what mf_dropout(ctx, P, dropout) would draw on the [B, H, Tq, Tk]
   probabilities at the same point of the context's RNG (the op takes one dropout call), and the
   backward redraws it (docs/math.md §4.1). 0, or outside training mode: no dropout, no RNG use. */
MFDEF mf_tensor *mf_attention(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, float scale,
                              int causal, float dropout);
/* Where mf_attention_layout's operands keep their heads: MF_ATTN_HEADS_MAJOR is mf_attention's
   [B, H, T, d]; MF_ATTN_TOKENS_MAJOR is [B, T, H, d], the layout of a linear layer's [B, T, H*d]
   output reshaped (a view, no copy). */
typedef enum { MF_ATTN_HEADS_MAJOR = 0, MF_ATTN_TOKENS_MAJOR = 1 } mf_attn_layout;
/* mf_attention with the operands in `layout`: MF_ATTN_TOKENS_MAJOR takes q [B, Tq, H, dk],
   k [B, Tk, H, dk], v [B, Tk, H, dv] and returns [B, Tq, H, dv] (mf_reshape it to [B, Tq, H*dv]
   for the output projection), so a model needs no head split and merge copies around the op. The
   math, the saved log-sum-exp, the dropout mask (indexed by (b, h, i, j) as in mf_attention) and
   the gradients are those of mf_attention on the permuted operands. */
MFDEF mf_tensor *mf_attention_layout(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, float scale,
                                     int causal, float dropout, mf_attn_layout layout);
/* Transformer-XL relative multi-head attention (docs/math.md §5.2), fused like mf_attention:
   q [B, H, Tq, dk], k [B, H, Tk, dk], v [B, H, Tk, dv] with Tq <= Tk: the first M = Tk - Tq keys
   are memory, visible to every query; the last Tq keys are the queries' own positions (causal).
   u [H, dk] is the query bias of the content term; R [2P, H, dk] and S [2P, H] are the position
   tables (P = rows / 2; row P = distance 0, row P - d = the key d steps in the past). -> [B, H, Tq, dv]:
       score[i][j] = scale * ((q_i + u) . k_j + q_i . R[rho] + S[rho]),   rho = P + j - i - M,
   softmax over the visible keys (j <= i + M), times v. Requires Tk <= P. No Tq x Tk matrix is
   kept (the op saves the row log-sum-exp; the backward recomputes the scores tile by tile); only
   the rows P - Tk + 1 .. P of R and S, the ones some query sees, receive gradient. Gradients are
   deterministic; the CPU backward runs one thread per (batch, head) pair, CUDA uses tiled kernels
   (metaformer_cuda.cuh, [cu:xl]). scale is usually 1/sqrt(dk). dropout: as mf_attention's, over
   all Tk keys (the memories too). */
MFDEF mf_tensor *mf_rel_attention(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, mf_tensor *u,
                                  mf_tensor *R, mf_tensor *S, float scale, float dropout);
/* P of the relative mixer's tables: R [2 * MF_XL_P][H][dk], S [2 * MF_XL_P][H] (docs/math.md §5.1); the
   feedback transformer's tables have P rows of the same P (docs/math.md §8.1). */
#define MF_XL_P 4096

/* ---- layers ---------------------------------------------------------------------------------- */
typedef struct mf_linear_layer { mf_tensor *weight, *bias; } mf_linear_layer;
/* Parameters "<name>.weight" [out, in] (kaiming-uniform) and "<name>.bias" [out] (when
   has_bias; PyTorch bias init), as torch.nn.Linear(in, out). Apply with mf_linear. */
MFDEF mf_linear_layer mf_linear_layer_new(mf_ctx *ctx, const char *name, int in, int out,
                                          int has_bias);

/* ---- CUDA -------------------------------------------------------------------------------------- */
/* The number of usable CUDA devices, or 0 with the reason in why (size bytes, may be NULL):
   "this build has no CUDA" unless the implementation was compiled by nvcc with METAFORMER_CUDA. */
MFDEF int mf_cuda_available(char *why, size_t size);
/* Where a context keeps tensor data and runs its ops. Call mf_ctx_set_device right after
   mf_ctx_new, before any parameter or tensor exists (-1 otherwise). On MF_DEVICE_CUDA the
   tensor headers, op arguments and token ids stay in host memory but t->data, t->grad and the
   flat parameter / gradient / moment buffers are DEVICE pointers (cudaMalloc): read them with
   mf_to_host / mf_grad_to_host / mf_item, fill tensors with mf_from / the initialisers, and
   never dereference them on the host. Returns 0, or -1 with the reason in ctx: "this build has
   no CUDA ..." (the implementation was not compiled by nvcc with METAFORMER_CUDA) or
   "no CUDA device: ..." (no usable GPU). Every op, the optimizers, clipping, checkpoints and
   generation work on both devices and give the same results up to float rounding. */
typedef enum mf_device { MF_DEVICE_CPU = 0, MF_DEVICE_CUDA = 1 } mf_device;
MFDEF int mf_ctx_set_device(mf_ctx *ctx, mf_device dev);
MFDEF mf_device mf_ctx_device(const mf_ctx *ctx);
/* The arithmetic of a context (docs/math.md §22, "Mixed precision"):
     MF_PREC_FP32  exact float32 everywhere (the default);
     MF_PREC_TF32  CUDA only: cuBLAS and the fused attention kernels (sm_80+) round their inputs to
                   TF32 (10-bit mantissa) on the tensor cores, fp32 accumulation: ~1e-3 relative error;
     MF_PREC_BF16  mixed precision: parameters, gradients and optimizer moments stay fp32 (the
                   master copy, what checkpoints hold); every GEMM reads its operands rounded to bf16
                   (8 significant bits: at most 2^-8 relative error per input) with fp32 accumulation; LayerNorm
                   statistics, softmax, the loss, the residual stream, every gradient and every
                   reduction stay fp32. On CUDA the weights' bf16 copies are refreshed after each
                   optimizer step, mf_set_data and a load, and the activations the backward keeps of
                   linear, head_matmul, layernorm, gelu, relu and attention are stored in bf16 (half
                   their memory; t->bf16, read them with mf_to_host / mf_item). On the CPU the GEMMs
                   (linear, matmul, head_matmul, conv1d) run on the CPU's bf16 kernel
                   (mf_cpu_bf16_kernel: AMX tiles where the CPU and OS offer them, else the fp32
                   kernels on operands rounded to bf16; mf_ctx_set_bf16_kernel picks another), and
                   the small products inside the fused attention, relative attention and chunkwise
                   fast-weight kernels and the feedback recurrence's per-step products take bf16
                   operands (on the fp32 FMAs); the recurrent fast-weight form, the feedback step's
                   attention and every activation stay fp32.
   mf_ctx_set_precision sets it for the context's device (set the device first); on CUDA it switches
   between steps (leaving bf16 while a step's bf16 activations are on the tape fails: call it after
   mf_reset). Returns 0, or -1 with the reason in ctx (tf32 on the CPU, bf16 on a GPU without it, an
   unknown value). mf_cuda_set_precision / mf_cuda_precision are the same calls under their
   earlier names. */
typedef enum mf_precision { MF_PREC_FP32 = 0, MF_PREC_TF32, MF_PREC_BF16 } mf_precision;
MFDEF int mf_ctx_set_precision(mf_ctx *ctx, mf_precision p);
MFDEF int mf_cuda_set_precision(mf_ctx *ctx, mf_precision p);
/* The precision of ctx (MF_PREC_FP32 for NULL). */
MFDEF mf_precision mf_ctx_precision(const mf_ctx *ctx);
MFDEF mf_precision mf_cuda_precision(const mf_ctx *ctx);
/* "fp32", "tf32", "bf16" ("unknown" for a value out of range), and back: the value for a name,
   or -1 for an unknown name (or NULL). */
MFDEF const char *mf_precision_name(mf_precision p);
MFDEF int mf_precision_from_name(const char *name);
/* Shorthand: on = 1 is mf_cuda_set_precision(ctx, MF_PREC_TF32), on = 0 is MF_PREC_FP32.
   Returns 0, or -1 (nothing changes, no error recorded) when ctx is not on a CUDA device. */
MFDEF int mf_cuda_set_tf32(mf_ctx *ctx, int on);
/* Copy the t->ne values (or gradients) of a tensor on any device into dst (host memory).
   Returns 0, or -1 with the error in ctx (no gradient: -1). */
MFDEF int mf_to_host(mf_ctx *ctx, const mf_tensor *t, float *dst);
MFDEF int mf_grad_to_host(mf_ctx *ctx, const mf_tensor *t, float *dst);
/* Overwrite the t->ne values of a tensor (e.g. a parameter) on any device with values from host
   memory. Returns 0, or -1 with the error in ctx. */
MFDEF int mf_set_data(mf_ctx *ctx, mf_tensor *t, const float *values);
/* The first value of t (e.g. a loss) on any device; NaN when t is NULL or the context failed. */
MFDEF float mf_item(mf_ctx *ctx, const mf_tensor *t);

/* ---- GEMM ------------------------------------------------------------------------------------ */
/* C[M][N] = alpha * op(A) @ op(B) + beta * C, row-major; op(X) = X or X^T (trans != 0).
   beta == 0 overwrites C without reading it. n_threads <= 0: all OpenMP threads. */
MFDEF void mf_sgemm(int transA, int transB, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc, int n_threads);
/* batch products; matrix i at A + i*strideA, ...; a stride of 0 shares that operand. */
MFDEF void mf_sgemm_batched(int transA, int transB, int M, int N, int K, float alpha,
                    const float *A, int lda, long long strideA, const float *B, int ldb,
                    long long strideB, float beta, float *C, int ldc, long long strideC,
                    int batch, int n_threads);
/* bf16 products (the CPU's MF_PREC_BF16, docs/math.md §22.5): mf_sgemm with A and B rounded to bf16
   (round to nearest even) and fp32 products and sums, on one of the CPU's bf16 kernels:
     MF_BF16_AMX       Intel AMX tiles (tdpbf16ps): Sapphire Rapids and later
     MF_BF16_FMA       the fp32 engine's kernels on operands rounded to bf16 as they are packed: any
                       CPU, at fp32's speed (the product of two bf16 values is exact in fp32)
     MF_BF16_AVX512    AVX512-BF16 (vdpbf16ps): Intel Cooper Lake and later, AMD Zen 4 and later
     MF_BF16_PORTABLE  plain C, any CPU: vdpbf16ps's arithmetic, several times slower than fp32
     MF_BF16_AMX_EMU   the AMX kernel on a plain-C emulation of the tile unit (tests; slow)
   Returns 0, or -1 when the kernel cannot run on this CPU (or memory runs out). */
#define METAFORMER_CPU_BF16 1 /* this header has the calls below (programs built against older ones test it) */
typedef enum mf_bf16_kernel {
    MF_BF16_NONE = 0, MF_BF16_PORTABLE, MF_BF16_AVX512, MF_BF16_AMX, MF_BF16_AMX_EMU, MF_BF16_FMA
} mf_bf16_kernel;
MFDEF int mf_bgemm(mf_bf16_kernel kernel, int transA, int transB, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc, int n_threads);
/* The fastest bf16 kernel this CPU and OS offer: MF_BF16_AMX (cpuid, and on Linux the kernel's grant
   of the AMX tile state, asked for once per process), else MF_BF16_FMA. (MF_BF16_AVX512 runs only
   when named: on the CPU measured, vdpbf16ps issued at half the rate of fp32 FMAs, docs/benchmarks.md.) */
MFDEF mf_bf16_kernel mf_cpu_bf16_kernel(void);
/* What the CPU offers, in words ("avx512f yes, avx512_bf16 yes, amx_bf16 no"): for reports. */
MFDEF const char *mf_cpu_features(void);
/* "none", "portable", "avx512-bf16", "amx", "amx-emulated", "fp32-fma" ("unknown" out of range), and
   back (-1: unknown name or NULL). */
MFDEF const char *mf_bf16_kernel_name(mf_bf16_kernel k);
MFDEF int mf_bf16_kernel_from_name(const char *name);
/* One value to bf16 (round to nearest even; NaN stays NaN) and back (exact). */
MFDEF uint16_t mf_bf16_from_float(float x);
MFDEF float mf_bf16_to_float(uint16_t h);
/* The bf16 kernel a CPU context's products run on in MF_PREC_BF16: MF_BF16_NONE (the default) is the
   fastest the CPU has (mf_cpu_bf16_kernel); naming one the CPU cannot run fails with the CPU's
   features in the message. mf_ctx_bf16_kernel: the kernel the products run on now (MF_BF16_NONE in
   fp32 or on a device). */
MFDEF int mf_ctx_set_bf16_kernel(mf_ctx *ctx, mf_bf16_kernel k);
MFDEF mf_bf16_kernel mf_ctx_bf16_kernel(const mf_ctx *ctx);

/* ---- optimizers and schedules ---------------------------------------------------------------- */
typedef enum mf_schedule_kind {
    MF_SCHED_CONSTANT = 0, /* lr */
    MF_SCHED_WARMUP,       /* labml AdamWarmup: 1e-8 + t * lr / warmup while t < warmup, then lr */
    MF_SCHED_NOAM,         /* lr * d_model^-0.5 * min(t^-0.5, t * warmup^-1.5) */
    MF_SCHED_COSINE        /* lr * t / warmup, then cosine from lr to min_lr at total_steps */
} mf_schedule_kind;

typedef struct mf_schedule {
    mf_schedule_kind kind;
    float lr;              /* base / peak learning rate */
    int warmup;            /* warm-up steps (WARMUP, NOAM, COSINE) */
    int total_steps;       /* COSINE: the step where min_lr is reached */
    float min_lr;          /* COSINE */
    int d_model;           /* NOAM */
} mf_schedule;

typedef enum mf_optimizer_kind {
    MF_OPT_ADAM = 0,   /* torch.optim.Adam: bias-corrected moments; weight_decay adds wd*theta to g */
    MF_OPT_ADAM_LABML, /* labml "optimized update": eps added to sqrt(v) before bias correction;
                          weight_decay decoupled with the base lr: theta *= 1 - lr * wd */
    MF_OPT_ADAMW,      /* torch.optim.AdamW: decoupled theta *= 1 - lr_t * wd */
    MF_OPT_SGD         /* torch.optim.SGD with momentum (and nesterov); weight_decay adds wd*theta */
} mf_optimizer_kind;

typedef struct mf_optimizer {
    mf_optimizer_kind kind;
    float beta1, beta2, eps;   /* Adam family */
    float weight_decay;
    float momentum;            /* SGD */
    int nesterov;              /* SGD */
    mf_schedule schedule;      /* the learning rate at step t (t = 1 for the first step) */
} mf_optimizer;

/* PyTorch's defaults for that optimizer (Adam/AdamW betas (0.9, 0.999), eps 1e-8, AdamW wd
   0.01, SGD momentum 0) with a constant learning rate lr. */
MFDEF mf_optimizer mf_optimizer_default(mf_optimizer_kind kind, float lr);
/* The learning rate of a schedule at step t >= 1 (t <= 0 is treated as 1). */
MFDEF float mf_schedule_lr(const mf_schedule *s, int64_t t);
/* One update of every trainable parameter from its gradient (increments the step counter,
   allocates the moments on first use). Returns 0, or -1 on bad config / failed context. */
MFDEF int mf_optimizer_step(mf_ctx *ctx, const mf_optimizer *opt);
/* Steps taken so far (t of the last update). */
MFDEF int64_t mf_optimizer_steps(const mf_ctx *ctx);
/* Global L2 norm of all gradients; when max_norm > 0 and norm > max_norm, gradients are scaled
   by max_norm / (norm + 1e-6) (torch.nn.utils.clip_grad_norm_). Returns the norm before. */
MFDEF float mf_clip_grad_norm(mf_ctx *ctx, float max_norm);
/* The end of a training step in one call: mf_clip_grad_norm(ctx, max_norm), mf_optimizer_step
   and mf_zero_grad, the same values bit for bit. On the CPU it reads the gradients twice (their norm,
   then the update that scales, applies and zeroes them), where the three calls stream them five
   times. Returns the norm before clipping; a norm that is not finite (NaN or inf in a gradient)
   updates nothing (the gradients are still zeroed). -1 on bad config / failed context. For ZeRO-1
   ([mf:dist]) use the three mf_dist_* calls. */
MFDEF float mf_train_update(mf_ctx *ctx, const mf_optimizer *opt, float max_norm);
#define MF_TRAIN_UPDATE 1 /* feature test: mf_train_update is declared (bench/bench_model.c, built by
                             bench/ab.sh against other revisions of this header, asks) */

/* ---- the MetaFormer language model ------------------------------------------------------------
   Block (pre-norm): x = x + drop(mixer(LN1(x))); x = x + drop(FFN(LN2(x))).
   Model: token embedding (N(0,1)) [+ positions] -> n_layers blocks -> final LN -> Linear(D, V);
   a sequence classifier (n_classes > 0) ends in the mean over positions -> Linear(D, n_classes).
   causal = 0 makes the mixers see the whole sequence (docs/math.md §20).
   The token mixer is interchangeable (docs/math.md §4, §9): */
typedef enum mf_mixer_kind {
    MF_MIXER_SDPA = 0,  /* multi-head attention (causal unless causal = 0); q, k, v, out Linear with bias (labml MHA) */
    MF_MIXER_METRIC,    /* per head p = x Wp, symmetric M (upper triangle), softmax(p M p^T / sqrt(dk)) p, E without bias */
    MF_MIXER_QUADRATIC, /* the same with an unconstrained M per head */
    MF_MIXER_POOL,      /* mean over a window of pool_size tokens minus x (count_include_pad = false) */
    MF_MIXER_IDENTITY,  /* no token mixing: the mixer sub-block is skipped */
    MF_MIXER_RELATIVE,  /* Transformer-XL relative attention over [memory; x] (docs/math.md §5); mem_len, compressive (docs/math.md §6) */
    MF_MIXER_FAST_WEIGHTS, /* DPFP + delta rule fast weights (docs/math.md §7); no LayerNorm before this mixer */
    MF_MIXER_LINEAR,    /* linear attention W += v phi(k)^T, y = W phi(q) (DPFP: sum-normalised features);
                           elu + 1 features: also z += phi(k), y = W phi(q) / (z . phi(q) + 1e-6) */
    MF_MIXER_FEEDBACK,  /* feedback transformer, per-layer key/value projections (docs/math.md §8.4) */
    MF_MIXER_FEEDBACK_KV, /* feedback transformer, one key/value projection shared by all layers (docs/math.md §8.5) */
    MF_MIXER_COUNT
} mf_mixer_kind;
typedef enum mf_pos_kind { MF_POS_NONE = 0, MF_POS_LEARNED, MF_POS_SINUSOIDAL } mf_pos_kind;
typedef enum mf_act_kind { MF_ACT_RELU = 0, MF_ACT_GELU, MF_ACT_GELU_TANH, MF_ACT_SILU } mf_act_kind;
typedef enum mf_feature_kind { MF_FEATURE_DPFP = 0, MF_FEATURE_ELU1 } mf_feature_kind;
/* The metric mixer's form of M_h (docs/math.md §9.10): SYMMETRIC, any symmetric matrix (its upper
   triangle is the parameter "attn.metric" [H, dk (dk + 1) / 2]); CHOLESKY, M = L L^T with L the lower
   triangle of "attn.metric_l" [H, dk dk] (the NLP MetaFormer seed's earlier version, commit 13ab95e);
   SOFTMAX_TRIL, M = S S^T with S = softmax over each row of the lower triangle of "attn.metric_p"
   [H, dk dk] / sqrt(dk) (the seed's MetricSelfAttention at commit cf58104). The last two are positive
   semi-definite by construction; both start as the seed's, N(0, 1) + 0.01 I. */
typedef enum mf_metric_form { MF_METRIC_SYMMETRIC = 0, MF_METRIC_CHOLESKY, MF_METRIC_SOFTMAX_TRIL } mf_metric_form;
/* The block layout (docs/math.md §19.2). pre_norm: x = x + mixer(LN1(x)); x = x + FFN(LN2(x)).
   stream_norm (the NLP MetaFormer sorter's, where the residual stream itself is normalised):
   s = LN1(x); s = s + mixer(s); s = LN_mid(s); x = s + FFN(LN2(s)) - one more LayerNorm per block
   ("layers.<l>.ln_mid.*", after the mixer's parameters); mixers whose block applies ln1 only. */
typedef enum mf_block_kind { MF_BLOCK_PRE_NORM = 0, MF_BLOCK_STREAM_NORM } mf_block_kind;

#define MF_MIXER_MAX_FIELDS 8 /* config fields of one registered mixer (mf_mixer_def) */
typedef struct mf_model_config {
    int vocab;              /* tokens 0 .. vocab-1 (required) */
    int d_model, n_heads, n_layers, d_ff;
    int max_seq;            /* longest sequence (size of the learned position table, generation window;
                               feedback: the capacity of the memory stacks, at most 4096) */
    mf_mixer_kind mixer;
    mf_pos_kind pos;
    mf_act_kind ffn_act;
    int ffn_bias;           /* biases in both FFN Linears (labml: 1) */
    int attn_bias;          /* sdpa: biases in q, k, v and the output Linear (labml: 1); the other
                               mixers have the biases of their seeds (see docs/math.md §16) */
    int pool_size;          /* pool: window length, odd when centred */
    int pool_causal;        /* pool in a causal model: window [t - pool_size + 1, t] (1, default; what a language
                               model needs) or centred (0: it sees pool_size / 2 later tokens). A non-causal model
                               (causal = 0) always pools the centred window and does not read pool_causal, which
                               then keeps its default (one way to ask for a centred window: causal = 0) */
    float dropout;          /* on both residual branches and the FFN hidden layer */
    int clone_layers;       /* labml: all layers start as copies of layer 0 */
    float ln_eps;
    /* relative (Transformer-XL / compressive transformer) */
    int mem_len;            /* memories kept per layer: the detached inputs of the last mem_len positions */
    int compressive;        /* compressive transformer: a conv1d compressor per layer and the AR loss */
    int c_mem_len;          /* compressive: compressed memories kept per layer */
    int compression_rate;   /* compressive: c, the compressor's kernel size and stride */
    /* fast_weights / linear */
    int dpfp_nu;            /* DPFP order nu: feature size 2 * dk * nu */
    mf_feature_kind linear_feature; /* linear: DPFP or elu(x) + 1 features */
    int chunk_size;         /* fast_weights training kernel: 0 = automatic, 1 = recurrent, n = chunkwise by n */
    mf_block_kind block;    /* block layout: pre_norm (default) or stream_norm (see mf_block_kind) */
    float attn_dropout;     /* dropout on the attention probabilities, inside the fused kernels of the
                               softmax mixers (sdpa, metric, quadratic, relative over its memories,
                               feedback; labml's dropout(attn)), training mode only; in [0, 1) */
    /* non-causal models and classification (docs/math.md §20) */
    int causal;             /* 1 (default): position t sees positions <= t, a language model. 0: every position
                               sees the whole sequence (sdpa, metric, quadratic: no mask; pool: the centred window;
                               linear: W and z summed over all positions; identity: nothing changes); refused by
                               the recurrent mixers (relative, fast_weights, feedback, feedback_kv) and by
                               mf_model_generate */
    mf_metric_form metric_form; /* metric: the form of M (mf_metric_form; default SYMMETRIC) */
    int n_classes;          /* 0 (default): a language model with the head Linear(D, vocab). > 0: a sequence
                               classifier: the head is "cls.weight" [n_classes, D], "cls.bias" [n_classes] on the
                               mean of the final LayerNorm's output over each row's positions (no "head.*"
                               parameters are made; use mf_model_classify_logits / mf_model_classify_loss) */
    /* a registered mixer's own fields (mf_mixer_def): set and read them by name with
       mf_model_config_set / mf_model_config_get; a field not set has its declared default */
    float mixer_field[MF_MIXER_MAX_FIELDS]; /* in the order of the mixer's declaration */
    unsigned mixer_field_set;               /* bit i: mixer_field[i] was set */
} mf_model_config;

/* ---- the mixers' config fields: one table ----------------------------------------------------
   The members of mf_model_config that only some mixers read, one row each, in the order programs
   store them. The mixer table says which mixer reads which (mf_mixer_reads); mf_model_check refuses
   a value other than the default for a mixer that does not read it, and one outside [lo, hi]. A
   program generates its options from the table (examples/common.h does):
       X(A, ID, member, ctype, KIND, def, lo, hi, "option", STORE, ROLE, "help")
   ID      the row's index MF_FIELD_<ID> (0 .. MF_FIELD_COUNT - 1)
   ctype   the member's C type; KIND: INT, FLAG (0 or 1), FLOAT, or ENUM (an enum whose names
           mf_config_field_choice gives)
   def     the default (mf_model_config_default); lo, hi: the range mf_model_check enforces
   option  the example programs' option (--mem-len)
   STORE   how a program that keeps its options in checkpoints keeps it: MODEL (it defines the
           model: a resumed run keeps it), KERNEL (it picks a kernel of the same function: a resumed
           run may change it), LATE (as MODEL, but added after checkpoints existed: stored only when
           it differs from its default, so a checkpoint without it has the default)
   ROLE    FIELD; SHARED (a setting of a seed's whole experiment, given to every model of a
           comparison: a program drops it for a mixer that does not read it rather than refuse it);
           VARIANT (it makes a model of its own, the compressive transformer: a comparison offers it
           as one of its models)
   A is the caller's, passed through to each X. */
#define MF_MODEL_FIELDS(X, A) \
    X(A, MEM_LEN, mem_len, int, INT, 0, 0, 0x7fffffff, "mem-len", MODEL, FIELD, \
      "memories kept per layer (Transformer-XL; 0 = none)") \
    X(A, COMPRESSIVE, compressive, int, FLAG, 0, 0, 1, "compressive", MODEL, VARIANT, \
      "the compressive transformer: compressed memories and the reconstruction loss") \
    X(A, C_MEM_LEN, c_mem_len, int, INT, 0, 0, 0x7fffffff, "c-mem-len", MODEL, FIELD, \
      "compressive: compressed memories kept per layer") \
    X(A, COMPRESSION_RATE, compression_rate, int, INT, 2, 1, 0x7fffffff, "compression-rate", MODEL, FIELD, \
      "compressive: memories per compressed memory (the compressor's kernel size and stride)") \
    X(A, DPFP_NU, dpfp_nu, int, INT, 1, 0, 0x7fffffff, "dpfp-nu", MODEL, FIELD, \
      "DPFP order nu (feature size 2 * d_head * nu; the DPFP features read it)") \
    X(A, LINEAR_FEATURE, linear_feature, mf_feature_kind, ENUM, 0, 0, 1, "feature", MODEL, FIELD, \
      "feature map of queries and keys") \
    X(A, CHUNK_SIZE, chunk_size, int, INT, 0, 0, 0x7fffffff, "chunk", KERNEL, FIELD, \
      "training kernel (0 = automatic, 1 = recurrent, n = chunks of n)") \
    X(A, ATTN_BIAS, attn_bias, int, INT, 1, 0, 1, "attn-bias", MODEL, SHARED, \
      "biases in q, k, v and out (1: labml MHA, 0: the MetaFormer baseline); other mixers ignore it") \
    X(A, ATTN_DROPOUT, attn_dropout, float, FLOAT, 0, 0, 1, "attn-dropout", MODEL, FIELD, \
      "dropout on the attention probabilities, in [0, 1)") \
    X(A, METRIC_FORM, metric_form, mf_metric_form, ENUM, 0, 0, 2, "metric-form", LATE, FIELD, \
      "the form of M (cholesky: L L^T, softmax_tril: the NLP MetaFormer seed's S S^T)") \
    X(A, POOL_SIZE, pool_size, int, INT, 3, 1, 0x7fffffff, "pool-size", LATE, FIELD, \
      "the window's length (odd when centred)") \
    X(A, POOL_CAUSAL, pool_causal, int, INT, 1, 0, 1, "pool-causal", LATE, FIELD, \
      "in a causal model: 1 the window of the last tokens, 0 centred (sees later tokens)")
#define MF__FIELD_ID(A, ID, ...) MF_FIELD_##ID,
enum { MF_MODEL_FIELDS(MF__FIELD_ID, ~) MF_FIELD_COUNT };
enum { MF_CFG_INT, MF_CFG_FLAG, MF_CFG_FLOAT, MF_CFG_ENUM };   /* KIND */
enum { MF_CFG_MODEL, MF_CFG_KERNEL, MF_CFG_LATE };              /* STORE */
enum { MF_CFG_FIELD, MF_CFG_SHARED, MF_CFG_VARIANT };           /* ROLE */
/* A row of the table at run time. */
typedef struct mf_config_field {
    const char *name, *option, *help; /* the member ("mem_len"), the option ("mem-len"), the help */
    int kind, store, role;            /* MF_CFG_* */
    double def, lo, hi;
    size_t offset, size;              /* of the member in mf_model_config */
} mf_config_field;
/* Row i of the table (MF_FIELD_*), or NULL out of range. */
MFDEF const mf_config_field *mf_config_field_at(int i);
/* The name of value k of an ENUM field ("dpfp"), or NULL (k out of range, or not an ENUM). */
MFDEF const char *mf_config_field_choice(int i, int k);
/* 1 when the mixer reads field i, else 0. */
MFDEF int mf_mixer_reads(mf_mixer_kind kind, int i);
/* The built-in mixers that read field i, ", "-separated into buf ("fast_weights, linear"); their count. */
MFDEF int mf_config_field_readers(int i, char *buf, size_t size);
/* Field i of c as a double (an INT, FLAG or ENUM as its integer) / set from one (converted to the
   member's type; no check: mf_model_check does that). -1 / NaN for i out of range or c NULL. */
MFDEF double mf_config_field_get(const mf_model_config *c, int i);
MFDEF int mf_config_field_set(mf_model_config *c, int i, double v);

typedef struct mf_model mf_model;

/* The defaults: d_model 128, 4 heads, 4 layers, d_ff 512, max_seq 256, sdpa, learned positions,
   GELU (exact), FFN biases on, dropout 0, no cloning, eps 1e-5; block pre_norm; causal 1,
   n_classes 0 (a language model); vocab unset; the mixers' fields as MF_MODEL_FIELDS says.
   The labml experiments of the seeds use pos = MF_POS_NONE and ffn_act = MF_ACT_RELU. */
MFDEF mf_model_config mf_model_config_default(void);
/* Names <-> kinds: the one way to turn a name into a config value and back (command lines, files).
   Mixers: "sdpa", "metric", "quadratic", "pool", "identity", "relative", "fast_weights", "linear",
   "feedback", "feedback_kv" (list them with mf_mixer_name(k) for k = 0 .. MF_MIXER_COUNT - 1);
   positions: "none", "learned", "sinusoidal"; FFN activations: "relu", "gelu", "gelu_tanh", "silu";
   linear's features: "dpfp", "elu1"; metric forms: "symmetric", "cholesky", "softmax_tril"; block layouts: "pre_norm", "stream_norm". *_name returns "unknown" for a value out of range, *_from_name
   -1 for an unknown name (or NULL). mf_mixer_compiled: 1 when the mixer's family is compiled in
   (see METAFORMER_NO_XL etc. under OPTIONS), 0 when not or unknown. */
MFDEF const char *mf_mixer_name(mf_mixer_kind kind);
MFDEF int mf_mixer_from_name(const char *name);
MFDEF int mf_mixer_compiled(mf_mixer_kind kind);

/* ---- your own token mixer (docs/math.md §23) ---------------------------------------------------
   A mixer defined in your program, outside this header: describe it in an mf_mixer_def and register
   it once, before any model uses it. From then on it is a mixer like the built-in ones: its name
   works in mf_mixer_from_name (and so in every example's --mixer), mf_model_new builds it, the
   autograd gives its backward (build the forward from the public ops), its parameters are saved,
   loaded, cloned, sharded by ZeRO-1 and moved to the GPU with the others, classification and
   generation work, and a CUDA context runs it with no code of yours. The block around it is the
   library's: x = x + drop(forward(LN1(x))) (pre_norm and stream_norm alike). A minimal mixer:

       static void mk(mf_model *m, int l, void *st) {        // parameters of layer l
           mf_tensor **w = (mf_tensor **)st;
           int D = mf_model_get_config(m)->d_model, shape[2];
           shape[0] = D; shape[1] = D;
           *w = mf_model_param(m, l, "mix.weight", 2, shape);
           mf_init_kaiming_uniform(mf_model_ctx(m), *w);
       }
       static mf_tensor *fw(mf_model *m, int l, void *st, mf_tensor *x) { // [B, T, D] -> [B, T, D]
           return mf_linear(mf_model_ctx(m), x, *(mf_tensor **)st, NULL); // no token mixing at all
       }
       mf_mixer_def d = {0};
       d.name = "mine"; d.help = "..."; d.layer_size = sizeof(mf_tensor *); d.make_layer = mk; d.forward = fw;
       int kind = mf_mixer_register(&d, NULL, 0);   // cfg.mixer = (mf_mixer_kind)kind

   The strings and the fields array of a definition must outlive its use (static storage). */
typedef struct mf_mixer_field {
    const char *name;   /* the config field: [a-z][a-z0-9_]*, at most 31 bytes, none of another field of the mixer */
    float def, lo, hi;  /* default, and the range [lo, hi] that mf_model_check enforces */
    int integer;        /* 1: whole numbers only */
    const char *help;   /* one line, for --help */
} mf_mixer_field;
enum {
    MF_MIXER_HEADS = 1,       /* splits d_model into n_heads heads: mf_model_check wants n_heads | d_model */
    MF_MIXER_NONCAUSAL = 2,   /* forward reads c->causal and has a non-causal form (causal = 0 allowed) */
    MF_MIXER_FIXED_STATE = 4, /* gen_step keeps a state of a fixed size: with pos = NONE it generates past max_seq */
    MF_MIXER_OWN_NORM = 16,   /* the block applies no LayerNorm before it: forward gets the block input itself
                                 (no "ln1" parameters; the mixer normalises as it likes, or not at all) */
    MF_MIXER_MEMORY = 8       /* (mf_mixer_flags only) it keeps memories from one forward call to the next: train
                                 it on consecutive windows (a sequential loader), validate on memory slot 1 */
};
/* What a mixer's state hook talks to (checkpoints): mf_state_mode, mf_state_ints, mf_state_floats. */
typedef struct mf_state_io mf_state_io;
typedef struct mf_mixer_def {
    const char *name;   /* [a-z][a-z0-9_]*, at most 31 bytes, no other mixer's name (required) */
    const char *help;   /* one line: what it computes and where it comes from (required) */
    unsigned flags;     /* MF_MIXER_* */
    int n_fields;       /* 0 .. MF_MIXER_MAX_FIELDS */
    const mf_mixer_field *fields;
    size_t layer_size;  /* bytes of the per-layer struct the hooks get as st (zeroed; 0: none, st NULL) */
    /* required: the parameters of layer l, made with mf_model_param in a fixed order (the order of
       the flat buffer and the checkpoint); errors stay in the context */
    void (*make_layer)(mf_model *m, int layer, void *st);
    /* required: the mixer of layer l on x = LN1(block input) [B, T, D]; returns [B, T, D]. In a
       causal model (the default) position t must not read positions after t: the tests of a
       mixer check this (tests/test_custom_mixer.c shows how) */
    mf_tensor *(*forward)(mf_model *m, int layer, void *st, mf_tensor *x);
    /* optional: another check of the config (the library checks each field's range) */
    int (*check)(mf_ctx *ctx, const mf_model_config *c);
    /* optional, O(1) generation: gen_begin once per mf_model_generate and layer (0; 1: no state for
       this config, every token reruns the window; -1: error in the context), then gen_step on
       x [1, n, D] = the rows of positions pos0 .. pos0 + n - 1, continuing
       its state; pos0 = 0 starts again from nothing (the prompt, or the window when it is full).
       Without gen_step every generated token reruns forward on the whole window. */
    int (*gen_begin)(mf_model *m, int layer, void *st);
    mf_tensor *(*gen_step)(mf_model *m, int layer, void *st, mf_tensor *x, int pos0);
    /* optional: a loss term of the last forward that mf_model_loss adds (one element), or NULL */
    mf_tensor *(*aux_loss)(mf_model *m);
    /* optional: free what the per-layer struct holds (not the struct) */
    void (*free_layer)(mf_model *m, int layer, void *st);
    /* optional, memories: state kept from one forward call to the next (e.g. the last segment's
       inputs), in the mixer's per-layer struct (host memory), one per slot: 0 training, 1 validation,
       2 generation. forward reads and updates the slot mf_model_memory_slot_now names (memories
       carry no gradient); reset_memory empties slot `slot` of layer l (mf_model_reset_memory, and
       slot 2 whenever generation starts or reruns its window); state lists slots 0 and 1 of layer
       l for checkpoints with mf_state_ints / mf_state_floats, in the same order every call. Give
       both or neither; the mixer then has MF_MIXER_MEMORY. Micro-batches of a larger batch
       (gradient accumulation) name their rows of the memory: mf_model_memory_rows_now. */
    void (*reset_memory)(mf_model *m, int layer, void *st, int slot);
    int (*state)(mf_model *m, int layer, void *st, mf_state_io *io);
    /* optional: the forward's matrix-product FLOPs per token of one layer's mixer (a multiply-add
       is 2) in sequences of T tokens, keys the mean keys a query sees ((T + 1) / 2 causal, T when
       every position sees all): mf_model_flops (benchmarks); without it, 0 */
    double (*flops)(const mf_model_config *c, int T, double keys);
    /* optional, a recurrence through the whole stack (as the feedback transformer's, docs/math.md
       §8): the embeddings x [B, T, D] to the last layer's output [B, T, D] (the final LayerNorm
       follows), in place of the blocks: from the public ops, the mixer's parameters of every layer
       and the library's parts of layer l, mf_model_ln1 and mf_model_ffn. forward is then not called
       (it may be NULL); no gen_step (generation reruns the window); block pre_norm only. */
    mf_tensor *(*run_stack)(mf_model *m, mf_tensor *x);
    /* the fields of the library's table (MF_MODEL_FIELDS) the mixer reads too, bits 1u << MF_FIELD_*
       (e.g. MF_FIELD_ATTN_DROPOUT): they may then differ from their defaults, their options reach it,
       and mf_model_config_reset_unread keeps them. A VARIANT field is another mixer's. */
    unsigned model_fields;
} mf_mixer_def;
#define MF_MIXER_MAX_REGISTERED 32
/* Register a mixer: its kind (MF_MIXER_COUNT or more), or -1 with the reason in err (when err is
   not NULL; size bytes): a bad name, a name taken, a missing hook, a bad field, or the table full.
   Registering the same definition (same name, same hooks) again returns its kind. Not thread-safe:
   register at the start of the program. */
MFDEF int mf_mixer_register(const mf_mixer_def *def, char *err, size_t size);
/* Kinds 0 .. mf_mixer_count() - 1 are the mixers of this program: the built-in ones, then the
   registered ones in registration order. */
MFDEF int mf_mixer_count(void);
/* The MF_MIXER_* flags of a mixer, built in or registered (0 for an unknown kind). */
MFDEF unsigned mf_mixer_flags(mf_mixer_kind kind);
/* One line about a mixer (its help), "" for an unknown kind. */
MFDEF const char *mf_mixer_help(mf_mixer_kind kind);
/* The i-th config field of a registered mixer, or NULL (a built-in mixer, or i out of range). */
MFDEF const mf_mixer_field *mf_mixer_field_of(mf_mixer_kind kind, int i);
/* Set a field of the config's mixer (c->mixer: set the mixer first) by name. 0, or -1 when the
   mixer has no such field (the value is checked by mf_model_check). */
MFDEF int mf_model_config_set(mf_model_config *c, const char *field, float value);
/* The value of a field of the config's mixer: what was set, else its default; NaN when the mixer
   has no such field. */
MFDEF float mf_model_config_get(const mf_model_config *c, const char *field);
/* Inside a mixer's hooks: the context of the model, a field's value (mf_model_config_get of the
   model's config), and a parameter of layer l named "layers.<l>.<name>" (zeros: initialise it with
   mf_init_*). */
MFDEF mf_ctx *mf_model_ctx(const mf_model *m);
MFDEF float mf_model_field(const mf_model *m, const char *field);
MFDEF mf_tensor *mf_model_param(mf_model *m, int layer, const char *name, int ndim, const int *shape);
/* Inside a run_stack hook: the library's parts of layer l, LN1(x), and the FFN sub-block with its
   residual and the config's dropout, x + drop(FFN(LN2(x))) ([B, T, D] each; NULL on error). */
MFDEF mf_tensor *mf_model_ln1(mf_model *m, int layer, mf_tensor *x);
MFDEF mf_tensor *mf_model_ffn(mf_model *m, int layer, mf_tensor *x);
/* A registered mixer's per-layer struct of layer l (the st its per-layer hooks get), or NULL. */
MFDEF void *mf_model_layer_state(mf_model *m, int layer);
/* Inside a mixer's hooks: the memory slot a forward uses (0, 1, or 2 while mf_model_generate runs),
   and the memory rows of mf_model_memory_rows: returns rows (0: the rows of each call) and sets
   *row0 (a forward of B rows uses rows [row0, row0 + B) of a memory of that many). */
MFDEF int mf_model_memory_slot_now(const mf_model *m);
MFDEF int mf_model_memory_rows_now(const mf_model *m, int *row0);
/* Inside a state hook: what the call does (MF_STATE_SAVE: mf_model_save lists the pieces;
   MF_STATE_CHECK: mf_model_load checks them against the file, nothing changes; MF_STATE_APPLY:
   it copies them in), and the pieces, each by a name of 1 to 48 of a-z, 0-9, _ and . unique in
   its layer (stored as "__state__.layers.<l>.<name>"): n ints (saved from v, or read into v), or
   floats of a shape (ndim 1 to 4, each size >= 1; an empty memory is no piece) at host (saved
   from it, or read into it; NULL allowed when checking). Data-parallel checkpoints (mf_dist_save) gather a float piece by its
   first dimension, the batch rows, over the ranks, and an int piece named "*.lengths" holds the
   row count in element 0. 0, or -1 (a missing or different piece in the file: the reason in the
   model's context). */
enum { MF_STATE_SAVE, MF_STATE_CHECK, MF_STATE_APPLY };
MFDEF int mf_state_mode(const mf_state_io *io);
MFDEF int mf_state_ints(mf_state_io *io, const char *name, int32_t *v, int n);
MFDEF int mf_state_floats(mf_state_io *io, const char *name, float *host, int ndim, const int *shape);
MFDEF const char *mf_pos_name(mf_pos_kind kind);
MFDEF int mf_pos_from_name(const char *name);
MFDEF const char *mf_act_name(mf_act_kind kind);
MFDEF int mf_act_from_name(const char *name);
MFDEF const char *mf_feature_name(mf_feature_kind kind);
MFDEF int mf_feature_from_name(const char *name);
MFDEF const char *mf_metric_form_name(mf_metric_form form);
MFDEF int mf_metric_form_from_name(const char *name);
MFDEF const char *mf_block_name(mf_block_kind kind);
MFDEF int mf_block_from_name(const char *name);
/* Check a config; returns 0, or -1 with the reason in ctx. A field of MF_MODEL_FIELDS that the
   chosen mixer does not read must keep its default, and every one lies in its [lo, hi]: e.g.
   compressive = 1 with sdpa fails with "model config: compressive = 1 applies only to the relative
   mixer (set it to 0, or choose mixer relative) ...". */
MFDEF int mf_model_check(mf_ctx *ctx, const mf_model_config *cfg);
/* The forward's matrix-product FLOPs per token of a model of the config (a multiply-add is 2: the
   mixers, the FFNs and the head), T tokens per sequence; the attention counted causally (a query
   sees (T + 1) / 2 keys on average) or, full_attention = 1, over all T. A training step is about 3
   times it. The count of each mixer is its family's (a registered mixer's flops hook, or 0); -1
   for a config mf_model_check refuses (no context: nothing says why). */
MFDEF double mf_model_flops(const mf_model_config *cfg, int T, int full_attention);
#define METAFORMER_MODEL_FLOPS 1 /* this header has mf_model_flops (benchmarks built against older ones test it) */
/* Set every mixer-specific field that cfg->mixer does not read back to mf_model_config_default()'s
   value (an unknown mixer: nothing changes): one set of options, e.g. a metric form or a pool
   window, then builds every mixer of an ablation, each taking the fields it reads. */
MFDEF void mf_model_config_reset_unread(mf_model_config *cfg);
/* Create the model's parameters in ctx (names "tok_emb", "pos_emb", "layers.<l>.<...>",
   "ln_f.weight", "head.weight", ...; a classifier has "cls.weight", "cls.bias" instead of "head.*")
   with PyTorch's default initialisation. NULL on error. */
MFDEF mf_model *mf_model_new(mf_ctx *ctx, const mf_model_config *cfg);
/* Free the model (not its parameters: they belong to the context). Call it BEFORE
   mf_ctx_free: on a CUDA context the model's device buffers are released through the context. */
MFDEF void mf_model_free(mf_model *m);
MFDEF const mf_model_config *mf_model_get_config(const mf_model *m);
/* Logits [B, T, vocab] of ids [B][T] (row-major, B*T ints), T <= max_seq. A language model's
   (n_classes = 0; a classifier's calls of this and mf_model_loss fail: use mf_model_classify_*). */
MFDEF mf_tensor *mf_model_forward(mf_model *m, const int32_t *ids, int B, int T);
/* Mean cross-entropy of the next-token predictions: targets [B][T], -1 = not counted. [1]. */
MFDEF mf_tensor *mf_model_loss(mf_model *m, const int32_t *ids, const int32_t *targets, int B, int T);
/* The loss of a micro-batch as its part of a larger batch (gradient accumulation, data-parallel
   training; docs/math.md §18.2): its cross-entropy summed over its counted targets (not -1) and
   divided by total_targets, the counted targets of the whole batch (every micro-batch, every
   rank), plus the model's auxiliary loss (compressive: reconstruction) times B / total_rows. The
   parts of a batch add up to mf_model_loss of the whole batch, and so do their gradients, to float
   rounding; with total_targets = the call's own count and total_rows = B it is mf_model_loss. [1];
   NULL with the error in ctx when total_targets is below the call's count or total_rows below B. */
MFDEF mf_tensor *mf_model_loss_part(mf_model *m, const int32_t *ids, const int32_t *targets, int B, int T,
                                    int64_t total_targets, int64_t total_rows);
/* Sequence classification (n_classes > 0; docs/math.md §20.3): logits [B, n_classes] of ids [B][T]
   (row-major). lengths [B] gives each row's length in 1..T (NULL: every row has T tokens); the ids
   after a row's length are padding and never read, so texts of different lengths batch together
   and a row's logits do not depend on its padding nor on the other rows (the rows of each length
   run as one batch of that length: one forward per distinct length). logits = Linear(mean over the
   row's positions of the final LayerNorm's output). With causal = 0 every position sees the whole
   row (the seed's setup); a causal model averages causal features. NULL with the reason in ctx on a
   language model, bad sizes, a length outside [1, T] or an id outside the vocabulary. */
MFDEF mf_tensor *mf_model_classify_logits(mf_model *m, const int32_t *ids, const int32_t *lengths, int B, int T);
/* Mean cross-entropy over the B rows of mf_model_classify_logits against labels [B] (class ids in
   [0, n_classes); one outside is an error naming the row). [1]. */
MFDEF mf_tensor *mf_model_classify_loss(mf_model *m, const int32_t *ids, const int32_t *lengths, const int32_t *labels,
                                        int B, int T);
/* Sampling: temperature <= 0 is greedy (argmax); top_k > 0 keeps the k most likely tokens. */
typedef struct mf_sampler { float temperature; int top_k; uint64_t seed; } mf_sampler;
/* Continue prompt (n_prompt >= 1 tokens) by n_new tokens written to out, with a cache: the
   prompt is run once, then each new token costs one step (softmax mixers: a KV cache; relative:
   the XL memories; fast_weights / linear: the O(1) fast-weight state; feedback: the memory
   stacks). Past max_seq tokens the window slides (the cache is rebuilt from the last max_seq / 2
   tokens) - except for relative, fast_weights and linear with pos = MF_POS_NONE, whose state
   has a fixed size: they go on without limit. Uses the activation arena (it calls mf_reset)
   and never records gradients. Refused (-1) for a non-causal model (causal = 0) and a classifier
   (n_classes > 0). Returns 0 or -1. */
MFDEF int mf_model_generate(mf_model *m, const int32_t *prompt, int n_prompt, int n_new,
                            const mf_sampler *s, int32_t *out);
/* Relative mixer (Transformer-XL, compressive transformer; docs/math.md §5, §6): the memories carried from
   one call of mf_model_forward / mf_model_loss to the next, so batch row b of a call continues
   row b of the previous call (the batch size must stay the same until the memory is reset; each
   call's learned / sinusoidal positions, if any, restart at 0: Transformer-XL uses pos = NONE).
   Per layer the memory is the detached input of the layer at the last mem_len positions,
   normalised by the layer's ln1 when used (ln1 also learns from it); with compressive = 1 the
   oldest memories beyond mem_len are compressed c : 1 by the layer's conv1d into up to c_mem_len
   compressed memories, keys [c_mem ; mem ; segment]. Memories are updated by every call, with or
   without gradient, never carry gradient, and live in the model (mf_reset keeps them).
   Two independent slots: 0 (training, the default) and 1 (validation). mf_model_memory_slot
   selects one and returns the previous slot (-1 on a slot other than 0 and 1, nothing changes;
   0 for models without memories); mf_model_reset_memory empties the current slot (call it when a
   pass over the data restarts).
   Generation (mf_model_generate) uses a third memory of its own, emptied whenever generation
   starts (or re-primes) at position 0: the prompt runs with an empty memory, then one token per
   step with the memory, maintained as in training (mem_len memories, compression; docs/math.md §5.6, 6.3).
   With mem_len = 0 it keeps up to max_seq - 1 tokens instead, so generation equals the full
   forward over the window (sliding past max_seq when pos = NONE).
   mf_model_aux_loss: the attention-reconstruction loss of the last forward (0 when that call
   compressed nothing or the model is not compressive); mf_model_loss already includes it, with
   weight 1 (it reaches only the compressors, which the cross-entropy never reaches). */
MFDEF int mf_model_memory_slot(mf_model *m, int slot);
MFDEF void mf_model_reset_memory(mf_model *m);
/* Memory rows, for micro-batches (gradient accumulation, docs/math.md §18.2): the next
   mf_model_forward / mf_model_loss calls with B rows use rows [row0, row0 + B) of a memory of
   `rows` rows (the current slot's; the default 0, 0 means the rows of each call, as above). The
   micro-batches of one step cover each row once, with the same T; a layer's new memories replace
   the old ones once all its rows are written, so micro-batch i reads the memories of the previous
   step like row block i of one call on all rows would, and the results equal that call's to
   float rounding. mf_model_save / mf_model_load keep all `rows` rows (a save between two
   micro-batches of a step is refused). Returns 0, or -1 with the error in ctx (row0 < 0, rows < 0,
   row0 >= rows); a model without memories accepts and ignores it. A call that runs past the
   memory, covers a row twice in a step, or changes the batch of a memory that holds rows fails. */
MFDEF int mf_model_memory_rows(mf_model *m, int row0, int rows);
MFDEF float mf_model_aux_loss(const mf_model *m);

/* ---- attention inspection (docs/math.md §19) ------------------------------------------------------
   What the softmax mixers attend to, for a forward pass of ids [B][T]: each layer's and head's raw
   scores and attention probabilities, computed with plain loops outside the fused kernels (training
   is unchanged). Mixers with attention maps: sdpa, metric, quadratic, relative (over its memories),
   feedback and feedback_kv (over the memory of the earlier steps; CPU contexts only); the others are
   refused with a message. Key layout, Tk keys per query (mf_model_attention_keys):
     sdpa, metric, quadratic  Tk = T, key j = token j; query i sees j <= i
     relative                 Tk = T + M: keys [compressed memories ; memories ; segment], the memories
                              of the current slot held now (M = the most any layer holds; a layer that
                              holds fewer has its first keys missing: score -inf, probability 0);
                              query i sees j <= i + M
     feedback, feedback_kv    Tk = T, key j = memory slot j (the memory of step j); query i sees j < i
                              (query 0 sees nothing: its row is all zeros); a key j >= i does not exist
                              at step i: score -inf
   scores[l][b][h][i][j] is the logit the softmax sees (scaled by 1/sqrt(dk), relative and feedback
   with their position terms), also at masked keys (before the mask); probs the softmax over the
   visible keys (0 elsewhere). */
/* Tk of a forward of length T now (relative: with the memories held now), or -1 with the reason in
   the model's context (a mixer without attention maps, T outside [1, max_seq], feedback on CUDA). */
MFDEF int mf_model_attention_keys(mf_model *m, int T);
/* Run the forward of ids [B][T] with the attention of every layer computed from the maps it returns:
   scores and probs (either may be NULL) receive n_layers * B * n_heads * T * Tk floats each, laid out
   [n_layers][B][n_heads][T][Tk]. Returns the logits [B, T, vocab] (arena, until mf_reset), equal to
   mf_model_forward's up to float rounding, or NULL with the reason in ctx. Runs without gradient and
   in evaluation mode (no dropout); like a forward, the relative mixer's call reads and then updates
   the current memory slot (select slot 1 to keep the training memory). Host buffers on any device. */
MFDEF mf_tensor *mf_model_attention(mf_model *m, const int32_t *ids, int B, int T, float *scores, float *probs);
/* The bilinear form of each head's scores (without the 1/sqrt(dk)), into out (host memory):
     MF_ATTN_FORM_HEAD  [H][dk][dk]: metric: M_h (symmetric, expanded from its triangle), quadratic:
                        M_h; sdpa: Wq_h Wk_h^T (Wq_h = rows h dk .. h dk + dk - 1 of attn.q.weight)
     MF_ATTN_FORM_MODEL [H][D][D], the form on the layer's normalised input x, score = x A x'^T:
                        sdpa: Wq_h^T Wk_h (the seed's "Wq Wk^T"), metric / quadratic: Wp_h^T M_h Wp_h
   (sdpa's biases add terms that are not part of the form.) Returns 0, or -1 with the reason in ctx (a
   mixer other than sdpa, metric, quadratic; layer out of range; NULL out). */
enum { MF_ATTN_FORM_HEAD = 0, MF_ATTN_FORM_MODEL = 1 };
MFDEF int mf_model_attention_form(mf_model *m, int layer, int form, float *out);

/* ---- checkpoints (safetensors: loadable with safetensors.torch.load_file) ---------------------
   Every parameter is stored under its name as F32. With with_optimizer != 0 the optimizer moments
   ("__optim__.m.<name>", "__optim__.v.<name>"), the step counter and the RNG position (metadata)
   are stored too, so a resumed run continues bit-identically. meta_kv holds n_meta (key, value)
   string pairs for the metadata section (e.g. the model config); keys starting "mf." are reserved.
   Crash-safe: the file is written to "<path>.tmp", fsynced, renamed over path and the directory
   fsynced (POSIX), so a crash, a kill or a power loss at any moment leaves path holding the previous
   checkpoint or the new one, whole (tests/test_crash.c kills a save at every step). A failure (disk
   full ENOSPC, file-size limit EFBIG, EIO, rename) removes the .tmp, leaves path untouched and says
   why in mf_error, with the system's reason. Returns 0 or -1. A model's memories are not in ctx: save
   with mf_model_save to resume a memory model exactly. */
MFDEF int mf_save(mf_ctx *ctx, const char *path, int with_optimizer, const char *const *meta_kv,
                  int n_meta);
/* Load every parameter of ctx from path (names, dtype and shapes must match; a tensor in the file
   that the model lacks is an error). with_optimizer != 0 also restores the optimizer state and RNG
   position, and fails if the file has none. All-or-nothing: on any error (missing file, truncated
   or corrupt header, shape mismatch) nothing in ctx changes. Returns 0 or -1. */
MFDEF int mf_load(mf_ctx *ctx, const char *path, int with_optimizer);
/* Copy the metadata value of key into buf (NUL-terminated, cut to size). Returns its full length,
   -1 when the file has no such key, -2 when the file cannot be read or is not a valid checkpoint
   (mf_load on it tells why). No context: nothing is recorded. */
MFDEF int mf_load_meta(const char *path, const char *key, char *buf, size_t size);
/* A checkpoint of a model with its state: mf_save of the model's context plus everything the model
   carries from one call of mf_model_forward / mf_model_loss to the next, so that training resumed
   from it is bit-identical to a run never interrupted (with_optimizer = 1; dropout included: the RNG
   position is in mf_save's optimizer state). Today that state is the relative mixer's memories
   (Transformer-XL, compressive; docs/math.md §5, §6; the file layout in §2) of slot 0 (training) and slot 1
   (validation), and the selected slot, stored as "__state__.memory.*" tensors (int32 lengths,
   float32 memories [B, len, D] per layer; on CUDA copied from the device) with the metadata
   "mf.state" = "1". The other mixers carry nothing across calls (the feedback memory and fast
   weights start empty at every training call), nor does generation (it empties its own memory when
   it starts), so for them this is mf_save. mf_load reads the weights of such a file and ignores the
   state. Returns 0 or -1. */
MFDEF int mf_model_save(mf_model *m, const char *path, int with_optimizer, const char *const *meta_kv,
                        int n_meta);
/* mf_load into the model's context, plus the model's state from a file of mf_model_save. Returns 0;
   1 when the model has state but the file holds none (a file of mf_save): weights and optimizer state are loaded and the memories are empty - tell the user that
   the run is not resumed exactly; -1 on error. Everything (weights, moments, state) is checked
   before anything changes. */
MFDEF int mf_model_load(mf_model *m, const char *path, int with_optimizer);

#ifdef METAFORMER_MPI
/* ---- data-parallel training over MPI ([mf:dist]; docs/math.md §18.3-18.8) ---------------------
   Compiled only with -DMETAFORMER_MPI (build with mpicc; the default build needs no MPI). Every rank
   runs the same program on its own rows of each global batch (contract: rank r, micro-batch i of
   accum takes the global rows [(r * accum + i) * B, (r * accum + i + 1) * B)). A step:
       mf_model_loss + mf_backward on the rank's rows (the backward starts the bucket averages);
       mf_dist_sync(d, ctx, sums, n)   -- every rank, also one whose ctx failed: -1 on every rank then;
       mf_dist_clip_grad_norm(d, ctx, max_norm); mf_dist_optimizer_step(d, ctx, &opt);
       mf_zero_grad(ctx); mf_reset(ctx);
   Gradients are AVERAGED over ranks (summed, divided by the world size): the mean loss of each rank
   must be over the same number of counted targets for the result to equal one big batch; otherwise
   scale each rank's loss by world * count_r / count_sum. Every function below that is marked
   "collective" must be called by every rank of the communicator, in the same order. No call hangs
   on a failed rank: failures are agreed on first and return -1 on every rank with "rank r: cause". */
typedef struct mf_dist mf_dist;
typedef struct mf_dist_config {
    int zero1;               /* 1: ZeRO-1, the optimizer moments sharded over the ranks */
    int64_t bucket_floats;   /* gradient floats per all-reduce bucket (whole parameters each) */
    int no_overlap;          /* 1: no reduction starts during the backward (all in mf_dist_sync) */
} mf_dist_config;
/* zero1 0, buckets of 2^20 floats, overlap on. */
MFDEF mf_dist_config mf_dist_config_default(void);
/* A distributed context on comm (e.g. MPI_COMM_WORLD; MPI_Init is the caller's), cfg NULL = the
   defaults. Collective. NULL on error, with the reason in err (err_size bytes; may be NULL). */
MFDEF mf_dist *mf_dist_new(MPI_Comm comm, const mf_dist_config *cfg, char *err, size_t err_size);
/* This rank, the number of ranks, and the rank among those on the same machine (picks the GPU). */
MFDEF int mf_dist_rank(const mf_dist *d);
MFDEF int mf_dist_world(const mf_dist *d);
MFDEF int mf_dist_local_rank(const mf_dist *d);
/* The dropout seed of this rank from a run's seed: rank 0 keeps seed (world 1 = a plain run), the
   others get a hash of (seed, rank), so the ranks draw different dropout masks. */
MFDEF uint64_t mf_dist_seed(const mf_dist *d, uint64_t seed);
/* Collective, once, after the model's parameters exist (no mf_param afterwards): checks that every
   rank has the same parameters (names, shapes, trainable; a difference is refused naming the first
   one and the rank), broadcasts their values from rank 0, re-seeds ctx's dropout with
   mf_dist_seed, lays the gradient buckets over the flat gradient buffer and installs the backward
   hook that starts a bucket's average as soon as its gradients are final. With zero1, before the
   first optimizer step or checkpoint load (the moments are then made for this rank's shard only, in
   GPU memory for a CUDA context). The MPI transport averages host buffers: CPU contexts (a CUDA
   context needs METAFORMER_NCCL, whose transport also runs ZeRO-1 on the GPU; docs/math.md §18.8).
   0, or -1 on every rank. */
MFDEF int mf_dist_attach(mf_dist *d, mf_ctx *ctx);
/* Do not start averages in the coming backwards (on = 1: micro-batches before the last one of a
   step, gradient accumulation), or start them again (on = 0, the default). Returns the old value. */
MFDEF int mf_dist_no_sync(mf_dist *d, int on);
/* Collective, every step after the backward(s), also on a rank whose ctx failed: agrees on failure
   (-1 on EVERY rank, "rank r: <its error>" in mf_dist_error and in each ctx), finishes the gradient
   average (starting the buckets the backward did not) and sums sums[0 .. n_sums) over the ranks in
   the same call (e.g. loss * count, count). sums may be NULL when n_sums is 0. 0 or -1. With
   ZeRO-1 the gradients are reduce-scattered: this rank's buffer holds the average in its shard only. */
MFDEF int mf_dist_sync(mf_dist *d, mf_ctx *ctx, double *sums, int n_sums);
/* Collective failure agreement at any other point (opening files, loading data): ok = 0 on a rank
   that failed, why its reason (or NULL: ctx's error). 0 when every rank is ok, else -1 on every
   rank with "rank r: why" of the first failed rank in mf_dist_error and ctx. */
MFDEF int mf_dist_check(mf_dist *d, mf_ctx *ctx, int ok, const char *why);
/* mf_clip_grad_norm of the averaged gradients: the same norm and scaling on every rank (with ZeRO-1
   the shards' squares are summed over the ranks, and each rank scales its shard). Collective with
   ZeRO-1 (every rank calls it, also a failed one: 0 then). Call after mf_dist_sync. */
MFDEF float mf_dist_clip_grad_norm(mf_dist *d, mf_ctx *ctx, float max_norm);
/* mf_optimizer_step after mf_dist_sync: the parameters without gradient agree over the ranks; with
   ZeRO-1 each rank updates its shard of the flat buffer (its moments only) and the parameters are
   all-gathered. Collective. 0 or -1 (on every rank). */
MFDEF int mf_dist_optimizer_step(mf_dist *d, mf_ctx *ctx, const mf_optimizer *o);
/* Collective mf_model_save with the optimizer state: ZeRO-1's moments and every rank's memory rows
   (the relative mixer's, in rank order) are gathered, rank 0 writes path (crash-safe; on GPUs rank 0
   holds the whole moments in device memory while it writes). The file is an
   ordinary checkpoint: mf_model_load with one process reads it, as mf_dist_load on any world size
   whose batch layout fits (the memory rows divide evenly). 0 or -1 on every rank. */
MFDEF int mf_dist_save(mf_dist *d, mf_model *m, const char *path, const char *const *meta_kv, int n_meta);
/* Collective mf_model_load with the optimizer state, on any world size: each rank takes its memory
   rows and (ZeRO-1) its shard of the moments. A file that fails on any rank fails every rank. */
MFDEF int mf_dist_load(mf_dist *d, mf_model *m, const char *path);
/* The last error ("" when none). */
MFDEF const char *mf_dist_error(const mf_dist *d);
/* Free d and take its backward hook out of the attached context: call it before mf_ctx_free. */
MFDEF void mf_dist_free(mf_dist *d);
#endif /* METAFORMER_MPI */

#ifndef METAFORMER_NO_DATA
/* ---- tokenizers (docs/math.md §17) ------------------------------------------------------------
   One type for every vocabulary:
     MF_TOK_BYTES  256 ids, id = byte value: any byte sequence, lossless
     MF_TOK_CHARS  the sorted set of byte values of a text (what build/train uses on a text file);
                   a byte outside the set cannot be encoded
     MF_TOK_BPE    byte-level BPE: GPT-2's own files (encoder.json + vocab.bpe, ids identical to
                   GPT-2's encoder), or a vocabulary trained here; lossless on any bytes
   A constructor returns the tokenizer even when it fails (NULL only when out of memory): check
   mf_tokenizer_error, which is NULL on success and otherwise names the problem and the fix; every
   later call on a failed tokenizer fails. mf_tokenizer_encode keeps a cache in the tokenizer: one
   tokenizer per thread. */
typedef struct mf_tokenizer mf_tokenizer;
typedef enum { MF_TOK_BYTES, MF_TOK_CHARS, MF_TOK_BPE } mf_tokenizer_kind;
MFDEF mf_tokenizer *mf_tokenizer_bytes(void);
MFDEF mf_tokenizer *mf_tokenizer_chars(const void *text, size_t n);
/* GPT-2's vocabulary: encoder.json (token text -> id) and vocab.bpe (the ranked merges), ids exactly
   GPT-2's (docs/math.md §17.2). Pre-tokenization is GPT-2's regular expression, written by hand
   (§17.3: Unicode 14 classes; a byte that is not UTF-8 is a character of its own). <|endoftext|>
   (50256) decodes to its text; encode reads that text as ordinary text (7 ids), never as 50256. */
MFDEF mf_tokenizer *mf_tokenizer_gpt2(const char *encoder_json_path, const char *vocab_bpe_path);
/* Train byte-level BPE on text (GPT-2's pre-tokenization, docs/math.md §17.3, §17.4) until the
   vocabulary has vocab_size ids (256..16,777,216: ids 0..255 are the bytes, 256 + k the result of
   merge k) or the most frequent pair occurs fewer than min_frequency times. Each step merges the
   most frequent adjacent pair of ids within the pre-tokens (every position counts, so "aaa" holds
   (a, a) twice; a merge rewrites a pre-token left to right: "aaa" -> "aa" "a"); among equal counts
   the pair with the smaller left id, then the smaller right id. opt may be NULL. Deterministic and
   single-threaded; bench/bpe_train.sh measures its speed against HF tokenizers' trainer
   (bench/results/bpe_train_<date>.md). */
typedef struct mf_bpe_options {
    int min_frequency;   /* stop when the best pair occurs fewer times (0: the default, 2) */
    /* NULL: silent. Called once the pre-tokens are counted (merges_done 0), about every 1% of
       merges_total (vocab_size - 256) and at the end with the merges made */
    void (*progress)(void *user, int merges_done, int merges_total);
    void *user;
} mf_bpe_options;
MFDEF mf_tokenizer *mf_tokenizer_train_bpe(const void *text, size_t n, int vocab_size, const mf_bpe_options *opt);
/* One small text file for any kind (format in docs/math.md §17.5), written to "<path>.tmp" and
   renamed over path when complete. Returns 0, or -1 with the reason in err (NUL-terminated, cut to
   err_size; err may be NULL): a NULL or failed tokenizer, a NULL path, a file that cannot be
   written (the system's reason). tok is unchanged either way. */
MFDEF int mf_tokenizer_save(const mf_tokenizer *tok, const char *path, char *err, size_t err_size);
/* Read a file of mf_tokenizer_save; every line is checked (truncated, corrupt, foreign files, ids
   out of range, a merge whose result is not left + right): the error names the file and line. */
MFDEF mf_tokenizer *mf_tokenizer_load(const char *path);
MFDEF const char *mf_tokenizer_error(const mf_tokenizer *tok);
MFDEF mf_tokenizer_kind mf_tokenizer_get_kind(const mf_tokenizer *tok);
MFDEF int mf_tokenizer_vocab_size(const mf_tokenizer *tok);   /* -1 on a failed tokenizer */
/* Encode n bytes: writes at most cap ids and returns how many ids the whole text encodes to (so
   cap 0 sizes the output), or -1 (the error is stored in tok: a byte outside a character
   vocabulary, a failed tokenizer). */
MFDEF int64_t mf_tokenizer_encode(mf_tokenizer *tok, const void *text, size_t n, int32_t *ids, int64_t cap);
/* Decode: writes at most cap bytes and returns the length of the whole decoded text, or -1 (an id
   outside the vocabulary: the error is stored in tok). */
MFDEF int64_t mf_tokenizer_decode(mf_tokenizer *tok, const int32_t *ids, int64_t n, void *out, int64_t cap);
/* the bytes of one token (*len of them; valid while tok lives), NULL for an id outside the vocabulary */
MFDEF const unsigned char *mf_tokenizer_token(const mf_tokenizer *tok, int32_t id, int *len);
MFDEF void mf_tokenizer_free(mf_tokenizer *tok);

/* ---- token data (docs/math.md §12, §17.6) -------------------------------------------------------
   Declared by the [mf:data] section: token shards (llm.c's format and nanoGPT's raw uint16),
   memory-mapped and read as one stream, and the loaders of docs/math.md §12 over any stream. */
typedef enum { MF_SHARD_AUTO, MF_SHARD_LLMC, MF_SHARD_RAW16 } mf_shard_format;
/* Write ids [n] as one shard file, little-endian: MF_SHARD_LLMC (llm.c's format: a header of 256
   int32 - magic 20240520, version 1, the token count - then the tokens as uint16) or
   MF_SHARD_RAW16 (nanoGPT's train.bin / val.bin: the uint16 tokens alone). Written to
   "<path>.tmp" and renamed over path when complete. Every id must be in 0..65535. Returns 0, or
   -1 with the reason in err (NUL-terminated, cut to err_size; err may be NULL). */
MFDEF int mf_shard_write(const char *path, mf_shard_format format, const int32_t *ids, int64_t n, char *err,
                         size_t err_size);

/* A token stream: one or many shard files read as one sequence of ids (memory-mapped on POSIX, so
   files larger than memory work; elsewhere, or with METAFORMER_NO_MMAP, read with stdio), or an
   int32 array in memory. Like the tokenizer, a constructor returns the stream even when it fails
   (NULL only when out of memory): mf_tokens_error is NULL on success, else it names the file, what
   is wrong and the fix; every later call on a failed stream fails (docs/math.md §17.6).
   MF_SHARD_AUTO detects the format of each file: llm.c's header (magic 20240520; version 1; file
   size 1024 + 2 * count), else raw uint16 (even size). Empty files, odd sizes, truncated llm.c
   shards, llm.c's uint32 (LLaMA-3) shards and files that look like text are refused. */
typedef struct mf_tokens mf_tokens;
MFDEF mf_tokens *mf_tokens_open(const char *const *paths, int n_paths, mf_shard_format format);
/* a stream over ids [n] (not copied: the array must outlive the stream) */
MFDEF mf_tokens *mf_tokens_from_ids(const int32_t *ids, int64_t n);
MFDEF const char *mf_tokens_error(const mf_tokens *s);
MFDEF int64_t mf_tokens_count(const mf_tokens *s);          /* -1 on a failed stream */
MFDEF int mf_tokens_files(const mf_tokens *s);              /* shard files (0 for an array) */
/* Check every id read from now on against a vocabulary of vocab ids (0: no check): an id >= vocab
   fails the read, naming the id, its position and its file (data and tokenizer do not match). */
MFDEF void mf_tokens_set_vocab(mf_tokens *s, int vocab);
/* ids [start, start + n) as int32 into out, across file boundaries. Returns 0, or -1 (the range is
   outside the stream, an id is outside the vocabulary, a read failed: mf_tokens_error tells). */
MFDEF int mf_tokens_read(mf_tokens *s, int64_t start, int64_t n, int32_t *out);
MFDEF void mf_tokens_close(mf_tokens *s);

/* The training loaders of docs/math.md §12 over the range [start, start + count) of a stream:
     shuffled   each epoch visits the windows that start at i * T in a random order, each moved by a
                random offset in [0, T - 1] (inside the range); rows of T + 1 tokens
     sequential the range is cut into `batch` columns of count / batch tokens; batch row b
                continues row b of the previous batch, T tokens at a time (the last batch of a pass
                is shorter when count / batch - 1 is not a multiple of T): the memory models' loader
   The state (rng, epoch_rng, epoch_pos, seq_pos) is everything a checkpoint needs: copy it out,
   and mf_loader_restore replays the same batches. Both states exist in either mode (a program may
   save both).
   Data-parallel training (docs/math.md §18.1): with world w > 1 the loader reads a GLOBAL batch of
   batch * w rows (the windows, or the columns: the range is cut into batch * w columns) and rank r
   gets its rows [r * batch, (r + 1) * batch), so the w ranks together see what one loader of
   batch * w rows sees. The state is the same on every rank (each draws the whole global batch's
   random numbers), so any rank's state resumes any rank. The last global batch of a shuffled epoch
   may leave a rank fewer rows, or none (rows 0): it still calls mf_loader_next with the others. */
typedef struct mf_loader_config {
    int64_t start, count;   /* the range of the stream (count 0: from start to the end) */
    int batch, seq_len;     /* B rows of T tokens */
    int sequential;         /* 0: shuffled windows, 1: sequential columns */
    uint64_t seed;          /* the shuffled loader's RNG */
    int rank, world;        /* this process's rank in 0 .. world - 1; world 0 means 1 */
} mf_loader_config;
typedef struct mf_loader_state {
    uint64_t rng, epoch_rng; /* shuffled: the RNG now, and at the start of the current epoch */
    int64_t epoch_pos;       /* shuffled: windows of the current epoch already read (= windows: done) */
    int64_t seq_pos;         /* sequential: position in the columns (column length - 1: pass over) */
} mf_loader_state;
typedef struct mf_loader {
    mf_loader_config cfg;
    mf_loader_state state;
    mf_tokens *tokens;       /* borrowed */
    int64_t windows;         /* shuffled: windows per epoch, (count - 1) / T */
    int64_t column;          /* sequential: tokens per column, count / (batch * world) */
    int64_t *perm;           /* shuffled: this epoch's order */
    int32_t *row;            /* T + 1 ids */
    char error[512];         /* "" or what failed */
} mf_loader;
/* 0, or -1 with the reason in L->error (a range too short for one window, or for columns of 2
   tokens; bad sizes; a failed stream). Call mf_loader_free afterwards in either case. */
MFDEF int mf_loader_init(mf_loader *L, mf_tokens *tokens, const mf_loader_config *cfg);
/* The next batch: x and y [rows][Tb] (y is x shifted by one token), rows <= batch (the last batch
   of a shuffled epoch may have fewer), Tb <= seq_len (the last of a sequential pass may be shorter).
   x, y hold batch * seq_len ids. Returns 1 when this batch starts an epoch / a pass (a memory model
   empties its memories then), 0 otherwise, -1 on error (L->error). */
MFDEF int mf_loader_next(mf_loader *L, int32_t *x, int32_t *y, int *rows, int *Tb);
/* batches per epoch / pass */
MFDEF int64_t mf_loader_batches(const mf_loader *L);
/* continue from a saved state (after mf_loader_init with the same config and stream) */
MFDEF void mf_loader_restore(mf_loader *L, const mf_loader_state *state);
MFDEF void mf_loader_free(mf_loader *L);
#endif /* METAFORMER_NO_DATA */

#ifdef __cplusplus
}
#endif
#endif /* METAFORMER_H */

/* ============================================================================================ */
/*                                      IMPLEMENTATION                                          */
/* ============================================================================================ */
#ifdef METAFORMER_IMPLEMENTATION
#ifndef METAFORMER_IMPLEMENTATION_DONE
#define METAFORMER_IMPLEMENTATION_DONE

/* ==== [mf:platform] ========================================================================= */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <stdarg.h>
#include <math.h>
#include <time.h>
#include <errno.h>

#if defined(MF_MALLOC) && defined(MF_FREE) && defined(MF_REALLOC)
/* the user's allocator */
#elif !defined(MF_MALLOC) && !defined(MF_FREE) && !defined(MF_REALLOC)
#define MF_MALLOC(sz) malloc(sz)
#define MF_REALLOC(p, sz) realloc(p, sz)
#define MF_FREE(p) free(p)
#else
#error "metaformer.h: define all of MF_MALLOC, MF_REALLOC and MF_FREE, or none of them"
#endif

#ifndef MF_ASSERT
#include <assert.h>
#define MF_ASSERT(x) assert(x)
#endif

#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
#include <omp.h>
#define MF__OMP 1
#else
#define MF__OMP 0
#endif

#define MF__PRAGMA(x) _Pragma(#x)
/* The work of one element of a streaming loop (an add, an axpy, a copy: a flop at most, two or
   three floats through memory) in the flops mf__threads_for weighs. Such loops run at a few
   elements per nanosecond, far below a compute loop's flop rate: counted as one flop, a loop of
   200 Ki elements (~50 us) would stay on one thread, where a fork/join (~1 us) pays for itself. */
#define MF__COST_STREAM 4
#if MF__OMP
/* Parallel loop over n independent iterations of `cost` flops each; small loops stay serial. */
#define MF__PARFOR(ctx, n, cost) \
    MF__PRAGMA(omp parallel for schedule(static) num_threads(mf__threads_for(ctx, (double)(n) * (cost))))
/* One parallel region of up to the context's threads (work in flops, as MF__PARFOR); inside it
   MF__TID() / MF__NTH() number the threads. */
#define MF__PARALLEL(ctx, work) MF__PRAGMA(omp parallel num_threads(mf__threads_for(ctx, (double)(work))))
#define MF__TID() omp_get_thread_num()
#define MF__NTH() omp_get_num_threads()
#else
#define MF__PARFOR(ctx, n, cost) (void)(ctx);
#define MF__PARALLEL(ctx, work) (void)(ctx); (void)(work);
#define MF__TID() 0
#define MF__NTH() 1
#endif

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* SIMD vectors of MF__AW floats for the row / elementwise ops (GELU, layernorm, Adam) and the
   attention kernels: masked loads / stores for row tails, exp, horizontal sum, 16-entry table
   lookups; AVX-512, AVX2 + FMA or portable (one float, plain C). */
#if !defined(METAFORMER_NO_SIMD) && defined(__AVX512F__)
#include <immintrin.h>
#define MF__AW 16
#define MF__AV_MAXV 4 /* vectors per register tile row: 4 rows x 4 vectors = 16 of 32 zmm */
#define MF__AV_R8V 2
typedef __m512 mf__av;
typedef __mmask16 mf__am;
#define mf__av_zero() _mm512_setzero_ps()
#define mf__av_set1(x) _mm512_set1_ps(x)
#define mf__av_load(p) _mm512_loadu_ps(p)
#define mf__av_store(p, v) _mm512_storeu_ps(p, v)
#define mf__av_loadm(p, m) _mm512_maskz_loadu_ps(m, p)
#define mf__av_storem(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define mf__av_mask(n) ((__mmask16)((n) >= 16 ? 0xFFFFu : (1u << (n)) - 1u))
#define mf__av_add(a, b) _mm512_add_ps(a, b)
#define mf__av_sub(a, b) _mm512_sub_ps(a, b)
#define mf__av_mul(a, b) _mm512_mul_ps(a, b)
#define mf__av_max(a, b) _mm512_mask_max_ps(a, 0xFFFF, a, b)
#define mf__av_fma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define mf__av_div(a, b) _mm512_div_ps(a, b)
#define mf__av_abs(a) _mm512_abs_ps(a)
#define mf__av_sqrt(a) _mm512_sqrt_ps(a)
/* a where x < y, else b (b where either is NaN) */
#define mf__av_iflt(x, y, a, b) _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_LT_OQ), b, a)
/* b where either is NaN (here and below), like the portable form */
#define mf__av_min(a, b) _mm512_mask_min_ps(a, 0xFFFF, a, b)
/* p 2^n for whole n with 2^n a normal float (mf__av_exp) */
#define mf__av_pow2n(p, n) _mm512_mask_scalef_ps(p, 0xFFFF, p, n)
#define mf__av_round(a) _mm512_mask_roundscale_ps(a, 0xFFFF, a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* t[k] in each lane, k holding whole numbers 0..15: the 16-entry table is one register */
#define mf__av_lut16(t, k) _mm512_permutexvar_ps(_mm512_cvttps_epi32(k), _mm512_loadu_ps(t))
#define mf__av_hsum(a) _mm512_reduce_add_ps(a)
/* x[0], x[ld], ..., x[15 ld] (masked forms here and below: the plain ones trip g++'s
   -Wmaybe-uninitialized inside immintrin.h) */
#define mf__av_gather(x, ld) \
    _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xFFFF, _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, \
                             5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(ld)), x, 4)
#elif !defined(METAFORMER_NO_SIMD) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MF__AW 8
#define MF__AV_MAXV 2 /* 4 rows x 2 vectors = 8 of 16 ymm */
#define MF__AV_R8V 1
typedef __m256 mf__av;
typedef __m256i mf__am;
#define mf__av_zero() _mm256_setzero_ps()
#define mf__av_set1(x) _mm256_set1_ps(x)
#define mf__av_load(p) _mm256_loadu_ps(p)
#define mf__av_store(p, v) _mm256_storeu_ps(p, v)
#define mf__av_loadm(p, m) _mm256_maskload_ps(p, m)
#define mf__av_storem(p, m, v) _mm256_maskstore_ps(p, m, v)
#define mf__av_mask(n) _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define mf__av_add(a, b) _mm256_add_ps(a, b)
#define mf__av_sub(a, b) _mm256_sub_ps(a, b)
#define mf__av_mul(a, b) _mm256_mul_ps(a, b)
#define mf__av_max(a, b) _mm256_max_ps(a, b)
#define mf__av_fma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define mf__av_div(a, b) _mm256_div_ps(a, b)
#define mf__av_abs(a) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a)
#define mf__av_sqrt(a) _mm256_sqrt_ps(a)
#define mf__av_iflt(x, y, a, b) _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, y, _CMP_LT_OQ))
#define mf__av_min(a, b) _mm256_min_ps(a, b)
#define mf__av_round(a) _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* the exponent field of 2^n set directly */
#define mf__av_pow2n(p, n) \
    _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23)))
/* two 8-entry lookups; bit 3 of k, shifted into the sign bit, picks the upper half */
static inline __m256 mf__av_lut16(const float *t, __m256 k) {
    __m256i i = _mm256_cvttps_epi32(k);
    __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(t), i), hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(t + 8), i);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
}
static inline float mf__av_hsum(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#define mf__av_gather(x, ld) \
    _mm256_i32gather_ps(x, _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(ld)), 4)
#else /* portable: "vectors" of one float, the register tile is 4 x 4 scalars */
#define MF__AW 1
#define MF__AV_MAXV 4
#define MF__AV_R8V 0
typedef float mf__av;
typedef int mf__am;
#define mf__av_zero() 0.0f
#define mf__av_set1(x) (x)
#define mf__av_load(p) (*(p))
#define mf__av_store(p, v) (*(p) = (v))
#define mf__av_loadm(p, m) ((void)(m), *(p))
#define mf__av_storem(p, m, v) ((void)(m), *(p) = (v))
#define mf__av_mask(n) (n)
#define mf__av_add(a, b) ((a) + (b))
#define mf__av_sub(a, b) ((a) - (b))
#define mf__av_mul(a, b) ((a) * (b))
#define mf__av_max(a, b) ((a) > (b) ? (a) : (b))
#define mf__av_fma(a, b, c) ((a) * (b) + (c))
#define mf__av_div(a, b) ((a) / (b))
#define mf__av_abs(a) fabsf(a)
#define mf__av_sqrt(a) sqrtf(a)
#define mf__av_iflt(x, y, a, b) ((x) < (y) ? (a) : (b))
#define mf__av_min(a, b) ((a) < (b) ? (a) : (b))
#define mf__av_round(a) nearbyintf(a)
#define mf__av_lut16(t, k) ((t)[(int)(k)])
#define mf__av_hsum(a) (a)
#define mf__av_gather(x, ld) ((void)(ld), *(x))
#define mf__av_exp(x) expf(x)
#endif
/* ask for the cache lines of n floats at p (rows of token-major heads are too far apart for the
   hardware prefetchers to follow) */
#if MF__AW > 1
#define MF__PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#else
#define MF__PREFETCH(p) ((void)(p))
#endif
static void mf__prefetch_row(const float *p, int n) {
    int i;
    for (i = 0; i < n; i += 16) MF__PREFETCH(p + i);
    MF__PREFETCH(p + n - 1);
}
/* a where x < 0, else b */
#define mf__av_ifneg(x, a, b) mf__av_iflt(x, mf__av_zero(), a, b)
#if MF__AW > 1
/* exp (Cephes polynomial, ~2 ulp); 0 below -87 and for -inf. x is clamped to [-87, 88] first, so
   2^n is a normal float. The negated Cephes constants make the FMAs exact twins of fnmadd. */
static mf__av mf__av_exp(mf__av x) {
    mf__av lo = mf__av_set1(-87.0f), c = mf__av_max(mf__av_min(x, mf__av_set1(88.0f)), lo), n, r, p;
    n = mf__av_round(mf__av_mul(c, mf__av_set1(1.44269504088896341f)));
    r = mf__av_fma(n, mf__av_set1(-0.693359375f), c);
    r = mf__av_fma(n, mf__av_set1(2.12194440e-4f), r);
    p = mf__av_fma(mf__av_set1(1.9875691500e-4f), r, mf__av_set1(1.3981999507e-3f));
    p = mf__av_fma(p, r, mf__av_set1(8.3334519073e-3f));
    p = mf__av_fma(p, r, mf__av_set1(4.1665795894e-2f));
    p = mf__av_fma(p, r, mf__av_set1(1.6666665459e-1f));
    p = mf__av_fma(p, r, mf__av_set1(5.0000001201e-1f));
    p = mf__av_fma(p, mf__av_mul(r, r), mf__av_add(r, mf__av_set1(1.0f)));
    return mf__av_iflt(x, lo, mf__av_zero(), mf__av_pow2n(p, n));
}
#endif
/* exp with IEEE's NaN and +inf: mf__av_exp clamps its input first, which turns a NaN into e^88 (a
   row op that must pass a NaN on, like the loss, uses this one) */
static inline mf__av mf__av_exp_ieee(mf__av x) { return mf__av_iflt(x, mf__av_set1(INFINITY), mf__av_exp(x), x); }

/* Dot product and y += a x on rows of n floats (the mixer families' kernels). Both vectorise the
   whole MF__AW-wide blocks with FMA; the last n % MF__AW elements (the tail) are summed in one of
   two orders, and the two give different bits, so the order is the caller's explicit choice:
   MF__TAIL_VEC     the tail through masked vector lanes (one FMA each); a dot product adds it into
                    the vector accumulator, then one horizontal sum ([mf:fastweights])
   MF__TAIL_SCALAR  the horizontal sum of the whole blocks first, then the tail as scalar C
                    (r += a[i] * b[i], y[i] += a * x[i]) ([mf:feedback])
   Each family keeps the order its kernels were validated with (and its CUDA twin mirrors). */
enum { MF__TAIL_VEC, MF__TAIL_SCALAR };
static inline float mf__vdot(int n, const float *a, const float *b, int tail) {
    mf__av acc = mf__av_zero();
    int i = 0;
    float r;
    for (; i + MF__AW <= n; i += MF__AW) acc = mf__av_fma(mf__av_load(a + i), mf__av_load(b + i), acc);
    if (tail == MF__TAIL_VEC) {
        /* the mask spelled out at each use: a variable read only through the portable (void)
           cast trips nvcc's "set but never used" */
        if (i < n) acc = mf__av_fma(mf__av_loadm(a + i, mf__av_mask(n - i)), mf__av_loadm(b + i, mf__av_mask(n - i)), acc);
        return mf__av_hsum(acc);
    }
    r = mf__av_hsum(acc);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}
static inline void mf__vaxpy(int n, float a, const float *x, float *y, int tail) { /* y += a x */
    mf__av va = mf__av_set1(a);
    int i = 0;
    for (; i + MF__AW <= n; i += MF__AW) mf__av_store(y + i, mf__av_fma(va, mf__av_load(x + i), mf__av_load(y + i)));
    if (tail == MF__TAIL_VEC) {
        if (i < n)
            mf__av_storem(y + i, mf__av_mask(n - i),
                          mf__av_fma(va, mf__av_loadm(x + i, mf__av_mask(n - i)), mf__av_loadm(y + i, mf__av_mask(n - i))));
        return;
    }
    for (; i < n; i++) y[i] += a * x[i];
}

#define MF__ALIGN 64
#define MF__ERRLEN 512

/* functions the CUDA kernels share with the CPU (the counter-based RNG) */
#if defined(__CUDACC__)
#define MF__HD __host__ __device__
#else
#define MF__HD
#endif

struct mf__block;
#define MF__PROF_ROWS 64 /* op names of the profiler (mf_set_profile): every op and the non-op entries fit */
typedef struct mf__prof_row { const char *name; int64_t calls; double fwd, fwd_gemm, bwd, bwd_gemm; } mf__prof_row;

/* The device backend of a context (NULL on the CPU): metaformer_cuda.cuh fills one in, so the
   generic code below needs no CUDA types. Every function records its own error in ctx. */
enum { MF__H2D = 1, MF__D2H = 2, MF__D2D = 3 };
typedef struct mf__backend {
    void *(*dalloc)(mf_ctx *ctx, size_t bytes, const char *what); /* persistent device memory (what
                                                                     NULL: a failure is no error) */
    void (*dfree)(mf_ctx *ctx, void *p);
    void *(*arena)(mf_ctx *ctx, size_t bytes);     /* activation data, valid until mf_reset */
    void (*reset)(mf_ctx *ctx);                    /* empty the device arena */
    int (*copy)(mf_ctx *ctx, void *dst, const void *src, size_t bytes, int kind); /* MF__H2D.. */
    int (*zero)(mf_ctx *ctx, void *dst, size_t bytes);
    int (*forward)(mf_ctx *ctx, mf_tensor *out);   /* out->data allocated; fills it (+ saved) */
    int (*backward)(mf_ctx *ctx, mf_tensor *out);
    int (*optimizer_step)(mf_ctx *ctx, const struct mf_optimizer *o); /* after validation */
    /* clipping: the trainable parameters' gradients inside the flat floats [lo, hi) (ZeRO-1 passes
       the rank's shard): their sum of squares (-1 on error), and scaling them by f */
    double (*grad_sumsq)(mf_ctx *ctx, int64_t lo, int64_t hi);
    int (*grad_scale)(mf_ctx *ctx, int64_t lo, int64_t hi, float f);
    void (*destroy)(mf_ctx *ctx);                  /* free the backend state (not the params) */
    int (*bf16_storage)(const mf_ctx *ctx);        /* activations of MF__OP_BF16 ops are stored in bf16 */
    int (*sync)(mf_ctx *ctx);                      /* wait for the work queued on the device */
} mf__backend;

struct mf_ctx {
    uint64_t seed;
    int n_threads;           /* 0 = OpenMP default */
    int training;
    int grad_enabled;
    int recycle_grads;      /* mf_set_keep_activation_grads(ctx, 0) */
    int failed;
    char err[MF__ERRLEN];
    /* activation arena: a chain of blocks, merged into one on reset */
    struct mf__block *blocks;
    size_t act_used, act_peak;
    /* tape of tensors that need a gradient, in creation order */
    mf_tensor **tape;
    int tape_len, tape_cap;
    /* parameters: one flat buffer each for values, gradients and the two optimizer moments */
    mf_tensor **params;
    int n_params, params_cap;
    float *p_data, *p_grad, *p_m, *p_v;
    int64_t p_used, p_cap;  /* floats */
    int64_t opt_t;          /* optimizer steps taken */
    int64_t *p_steps;       /* per parameter: updates it received (Adam's bias-correction t) */
    unsigned char *p_touched; /* per parameter: reached by a backward since the last zero_grad */
    uint64_t rng_calls;     /* dropout calls so far: the RNG stream of the next one */
    uint64_t anon_inits;    /* initialiser calls on unnamed tensors so far: the stream of the next one */
    float *gemm_ws;         /* GEMM packing workspace */
    long gemm_ws_cap;
    mf_precision prec;      /* the CPU's arithmetic (mf_ctx_set_precision; a device keeps its own) */
    mf_bf16_kernel bf16_kernel; /* the CPU's bf16 products run on it (MF_BF16_NONE: the fastest there is) */
    /* device: NULL on the CPU; the CUDA backend and its state (metaformer_cuda.cuh) */
    const mf__backend *be;
    void *be_state;
    /* reliability (mf_set_check_finite, mf_ctx_set_memory_limit) */
    int check_finite;       /* test every op's output (and input gradients) for NaN / Inf */
    size_t mem_limit;       /* bytes; 0 = no cap */
    size_t arena_bytes;     /* capacity of the activation arena blocks (host + device) */
    size_t aux_bytes;       /* device buffers of the backend beside those (bf16: the weight copy, GEMM scratch) */
    const char *cur_op;     /* the op running now (forward or backward): who asked for memory */
    int cur_backward;
    /* called by mf_backward after the backward of tape op i (mf_dist: starts the gradient buckets
       that are final from there on); NULL: none */
    void (*bw_hook)(mf_ctx *ctx, void *user, int i);
    void *bw_hook_user;
    /* ZeRO-1 (mf_dist): the moment buffers hold the floats [mom_lo, mom_lo + mom_n) of the flat
       buffer only; mom_n 0: all of it */
    int64_t mom_lo, mom_n;
    /* the op profiler (mf_set_profile): one row per op name, GEMM seconds so far */
    int profile;
    int prof_n;
    mf__prof_row prof[MF__PROF_ROWS];
    double prof_gemm_s;
};

static void *mf__xmalloc(size_t n) { return n ? MF_MALLOC(n) : NULL; }

/* Record the first error (later ones are usually consequences). Always returns NULL. */
static void *mf__fail(mf_ctx *ctx, const char *fmt, ...) {
    if (ctx && !ctx->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
        va_end(ap);
        ctx->failed = 1;
    }
    return NULL;
}

#if MF__OMP
static int mf__threads_for(const mf_ctx *ctx, double work) {
    int nt = (ctx && ctx->n_threads > 0) ? ctx->n_threads : omp_get_max_threads();
    if (work < 262144.0) return 1; /* below ~0.25 Mflop a fork/join costs more than it saves */
    return nt < 1 ? 1 : nt;
}
#endif

MFDEF double mf_time(void) {
#if MF__OMP
    return omp_get_wtime();
#elif defined(CLOCK_MONOTONIC)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#else
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}

/* Counter-based RNG: a splitmix64-style hash of (seed, stream, index). Any element of any
   stream is computed directly, so CPU and GPU kernels draw identical numbers in any order. */
static MF__HD uint64_t mf__mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static MF__HD uint64_t mf__rand64(uint64_t seed, uint64_t stream, uint64_t index) {
    return mf__mix64(mf__mix64(seed ^ mf__mix64(stream + 0x9e3779b97f4a7c15ULL)) + index);
}
/* uniform in [0, 1) with 24 random bits */
static MF__HD float mf__uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return (float)(mf__rand64(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}
/* dropout's draw: element `index` of the RNG stream `stream` is kept (with probability 1 - p)
   or dropped; the seed is salted so the masks are not the initialisers' draws. mf_dropout and
   the feedback recurrence, on the CPU and in the CUDA kernels, all draw their masks here. */
static MF__HD int mf__drop_keep(uint64_t seed, uint64_t stream, uint64_t index, float p) {
    return mf__uniform(seed ^ 0xd50f0d50f0ULL, stream, index) >= p;
}
/* The same draw split in two, for kernels that draw many elements of one stream: the stream's key
   (the hash of the salted seed and the stream, once per call) and the element's keep from it;
   mf__drop_keep_at(mf__drop_key(seed, stream), i, p) == mf__drop_keep(seed, stream, i, p). */
static MF__HD uint64_t mf__drop_key(uint64_t seed, uint64_t stream) {
    return mf__mix64((seed ^ 0xd50f0d50f0ULL) ^ mf__mix64(stream + 0x9e3779b97f4a7c15ULL));
}
static MF__HD int mf__drop_keep_at(uint64_t key, uint64_t index, float p) {
    return (float)(mf__mix64(key + index) >> 40) * (1.0f / 16777216.0f) >= p;
}
/* standard normal (Box-Muller on two 32-bit halves of one draw) */
static float mf__normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t r = mf__rand64(seed, stream, index);
    double u1 = ((double)(r >> 32) + 1.0) / 4294967297.0; /* (0, 1) */
    double u2 = (double)(r & 0xffffffffULL) / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}
static uint64_t mf__hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    while (*s) { h ^= (unsigned char)*s++; h *= 1099511628211ULL; }
    return h;
}

/* ==== [mf:memory] =========================================================================== */
typedef struct mf__block {
    struct mf__block *next;  /* older block */
    void *raw;               /* what MF_MALLOC returned */
    char *base;              /* MF__ALIGN-aligned start */
    size_t cap, used;
} mf__block;

#define MF__ARENA_MIN (1u << 20)

static mf__block *mf__block_new(size_t cap) {
    mf__block *b = (mf__block *)mf__xmalloc(sizeof(mf__block));
    if (!b) return NULL;
    b->raw = mf__xmalloc(cap + MF__ALIGN);
    if (!b->raw) { MF_FREE(b); return NULL; }
    b->base = (char *)(((uintptr_t)b->raw + MF__ALIGN - 1) & ~(uintptr_t)(MF__ALIGN - 1));
    b->cap = cap; b->used = 0; b->next = NULL;
    return b;
}
static void mf__blocks_free(mf__block *b) {
    while (b) { mf__block *n = b->next; MF_FREE(b->raw); MF_FREE(b); b = n; }
}

/* ---- the memory cap (mf_ctx_set_memory_limit) ----
   It covers what grows with the model and the batch: the activation arena blocks (host, and device
   on CUDA), the flat parameter and gradient buffers, the optimizer moments and, in bf16 on CUDA, the
   bf16 weight copy and the GEMM operands' bf16 scratch (aux_bytes). */
static size_t mf__param_bytes(const mf_ctx *ctx) { return ctx->p_data ? (size_t)ctx->p_cap * 2 * sizeof(float) : 0; }
static size_t mf__moment_bytes(const mf_ctx *ctx) { /* ZeRO-1 ([mf:dist]): the rank's shard only */
    return ctx->p_m ? (size_t)(ctx->mom_n ? ctx->mom_n : ctx->p_cap ? ctx->p_cap : 1) * 2 * sizeof(float) : 0;
}
static size_t mf__mem_used(const mf_ctx *ctx) {
    return ctx->arena_bytes + mf__param_bytes(ctx) + mf__moment_bytes(ctx) + ctx->aux_bytes;
}
/* who asks for activation memory now: the running op, or a tensor made outside the ops */
static const char *mf__mem_who(const mf_ctx *ctx, char *buf, size_t size) {
    if (ctx->cur_op) snprintf(buf, size, "op %s (%s)", ctx->cur_op, ctx->cur_backward ? "backward" : "forward");
    else snprintf(buf, size, "an activation tensor made outside the ops (mf_new, mf_from, a model's state)");
    return buf;
}
/* May the context take `more` bytes on top of what it uses? 0, or -1 with the error naming the
   cap, the use, the request, who asked and the fix. */
static int mf__mem_grant(mf_ctx *ctx, size_t more, const char *who) {
    size_t used;
    if (!ctx->mem_limit) return 0;
    used = mf__mem_used(ctx);
    if (more <= ctx->mem_limit && used <= ctx->mem_limit - more) return 0;
    mf__fail(ctx, "memory limit: %s asks for %zu more bytes, but the context already uses %zu of its %zu-byte cap "
             "(activation arena %zu, parameters and gradients %zu, optimizer moments %zu, bf16 copies %zu); raise "
             "the cap (mf_ctx_set_memory_limit, build/train --memory-limit MB) or make the batch, the sequence or "
             "the model smaller", who, more, used, ctx->mem_limit, ctx->arena_bytes, mf__param_bytes(ctx),
             mf__moment_bytes(ctx), ctx->aux_bytes);
    return -1;
}
/* The size of a new arena block that must hold `bytes`: `want` (the doubling), cut down to the room
   left under the cap when that still holds `bytes`, so a cap never changes what fits. 0 when the cap
   refuses (error in ctx). The caller adds the block to ctx->arena_bytes. */
static size_t mf__arena_block_cap(mf_ctx *ctx, size_t want, size_t bytes) {
    char who[96];
    if (want < bytes) want = bytes;
    if (ctx->mem_limit) {
        size_t used = mf__mem_used(ctx), room = used < ctx->mem_limit ? ctx->mem_limit - used : 0;
        if (want > room && bytes <= room) want = room;
    }
    return mf__mem_grant(ctx, want, mf__mem_who(ctx, who, sizeof who)) < 0 ? 0 : want;
}

/* Aligned scratch from the activation arena; valid until mf_reset. Not zeroed. */
static void *mf__alloc(mf_ctx *ctx, size_t bytes) {
    mf__block *b;
    bytes = (bytes + MF__ALIGN - 1) & ~(size_t)(MF__ALIGN - 1);
    if (bytes == 0) bytes = MF__ALIGN;
    b = ctx->blocks;
    if (!b || b->used + bytes > b->cap) {
        size_t cap = mf__arena_block_cap(ctx, b ? 2 * b->cap : MF__ARENA_MIN, bytes);
        mf__block *nb;
        if (!cap) return NULL;
        nb = mf__block_new(cap);
        if (!nb) return mf__fail(ctx, "out of memory: the activation arena needs %zu more bytes "
                                 "(reduce batch or sequence length)", bytes);
        nb->next = b; ctx->blocks = nb; b = nb;
        ctx->arena_bytes += cap;
    }
    {
        void *p = b->base + b->used;
        b->used += bytes;
        ctx->act_used += bytes;
        if (ctx->act_used > ctx->act_peak) ctx->act_peak = ctx->act_used;
        return p;
    }
}
static void *mf__calloc(mf_ctx *ctx, size_t bytes) {
    void *p = mf__alloc(ctx, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}
/* Tensor data (values, gradients): the activation arena on the CPU, the device arena on CUDA. */
static void *mf__alloc_data(mf_ctx *ctx, size_t bytes) {
    return ctx->be ? ctx->be->arena(ctx, bytes) : mf__alloc(ctx, bytes);
}
/* memset 0 / memcpy of tensor data on the context's device; return 0 or -1 (error in ctx) */
static int mf__dzero(mf_ctx *ctx, void *dst, size_t bytes) {
    if (ctx->be) return ctx->be->zero(ctx, dst, bytes);
    if (bytes) memset(dst, 0, bytes);
    return 0;
}
static int mf__dcopy(mf_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (ctx->be) return ctx->be->copy(ctx, dst, src, bytes, MF__D2D);
    if (bytes) memcpy(dst, src, bytes);
    return 0;
}
/* host -> tensor data and tensor data -> host */
static int mf__dupload(mf_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (ctx->be) return ctx->be->copy(ctx, dst, src, bytes, MF__H2D);
    if (bytes) memcpy(dst, src, bytes);
    return 0;
}
static int mf__ddownload(mf_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (ctx->be) return ctx->be->copy(ctx, dst, src, bytes, MF__D2H);
    if (bytes) memcpy(dst, src, bytes);
    return 0;
}
/* persistent buffers that hold tensor data (parameters, moments, model constants, caches) */
static void *mf__dmalloc(mf_ctx *ctx, size_t bytes, const char *what) {
    void *p;
    if (ctx->be) return ctx->be->dalloc(ctx, bytes, what);
    if (!(p = mf__xmalloc(bytes)) && bytes) mf__fail(ctx, "out of memory: %s (%zu bytes)", what, bytes);
    return p;
}
static void mf__dfree(mf_ctx *ctx, void *p) {
    if (ctx->be) ctx->be->dfree(ctx, p); else MF_FREE(p);
}

MFDEF mf_ctx *mf_ctx_new(uint64_t seed) {
    mf_ctx *ctx = (mf_ctx *)mf__xmalloc(sizeof(mf_ctx));
    if (!ctx) return NULL;
    memset(ctx, 0, sizeof *ctx);
    ctx->seed = seed;
    ctx->training = 1;
    ctx->grad_enabled = 1;
    return ctx;
}

MFDEF void mf_ctx_free(mf_ctx *ctx) {
    int i;
    if (!ctx) return;
    for (i = 0; i < ctx->n_params; i++) {
        MF_FREE((void *)ctx->params[i]->name);
        MF_FREE(ctx->params[i]);
    }
    MF_FREE(ctx->params); MF_FREE(ctx->p_steps); MF_FREE(ctx->p_touched);
    mf__dfree(ctx, ctx->p_data); mf__dfree(ctx, ctx->p_grad); mf__dfree(ctx, ctx->p_m); mf__dfree(ctx, ctx->p_v);
    if (ctx->be) ctx->be->destroy(ctx);
    MF_FREE(ctx->tape);
    MF_FREE(ctx->gemm_ws);
    mf__blocks_free(ctx->blocks);
    MF_FREE(ctx);
}

MFDEF int mf_ok(const mf_ctx *ctx) { return ctx && !ctx->failed; }
MFDEF const char *mf_error(const mf_ctx *ctx) {
    if (!ctx) return "the context is NULL (mf_ctx_new failed: out of memory?)";
    return ctx->failed ? ctx->err : "";
}
MFDEF void mf_clear_error(mf_ctx *ctx) { if (ctx) { ctx->failed = 0; ctx->err[0] = 0; } }
MFDEF void mf_set_threads(mf_ctx *ctx, int n_threads) {
    if (ctx) ctx->n_threads = n_threads < 0 ? 0 : n_threads;
}
MFDEF int mf_set_training(mf_ctx *ctx, int training) {
    int old;
    if (!ctx) return 0;
    old = ctx->training; ctx->training = training != 0;
    return old;
}
MFDEF int mf_ctx_set_memory_limit(mf_ctx *ctx, size_t bytes) {
    if (!mf_ok(ctx)) return -1;
    ctx->mem_limit = bytes;
    if (bytes && mf__mem_used(ctx) > bytes)
        return (mf__fail(ctx, "mf_ctx_set_memory_limit: the cap of %zu bytes is below the %zu bytes the context "
                         "uses already (activation arena %zu, parameters and gradients %zu, optimizer moments %zu); "
                         "set a larger cap, or set it before the model is made", bytes, mf__mem_used(ctx),
                         ctx->arena_bytes, mf__param_bytes(ctx), mf__moment_bytes(ctx)), -1);
    return 0;
}
MFDEF size_t mf_ctx_memory_limit(const mf_ctx *ctx) { return ctx ? ctx->mem_limit : 0; }
MFDEF size_t mf_ctx_memory_bytes(const mf_ctx *ctx) { return ctx ? mf__mem_used(ctx) : 0; }
MFDEF size_t mf_activation_bytes(const mf_ctx *ctx) { return ctx ? ctx->act_used : 0; }
MFDEF size_t mf_activation_peak_bytes(const mf_ctx *ctx) { return ctx ? ctx->act_peak : 0; }
MFDEF int64_t mf_param_count(const mf_ctx *ctx) { return ctx ? ctx->p_used : 0; }
MFDEF int64_t mf_param_values(const mf_ctx *ctx, int trainable_only) {
    int64_t n = 0;
    int i;
    for (i = 0; ctx && i < ctx->n_params; i++)
        if (!trainable_only || ctx->params[i]->requires_grad) n += ctx->params[i]->ne;
    return n;
}

static void mf__param_fit(mf_ctx *ctx, int64_t n);
MFDEF void mf_reset(mf_ctx *ctx) {
    size_t total = 0;
    mf__block *b;
    if (!ctx) return;
    ctx->tape_len = 0;
    ctx->act_used = 0;
    ctx->cur_op = NULL;
    if (ctx->be) {
        ctx->be->reset(ctx);
        if (!ctx->mom_n) mf__param_fit(ctx, ctx->p_used);
    }
    if (!ctx->blocks) return;
    if (!ctx->blocks->next) { ctx->blocks->used = 0; return; }
    /* several blocks: replace them by one block that holds what this step needed */
    for (b = ctx->blocks; b; b = b->next) total += b->cap;
    mf__blocks_free(ctx->blocks);
    ctx->blocks = mf__block_new(total); /* the same bytes as the blocks: ctx->arena_bytes holds */
    if (!ctx->blocks) {
        ctx->arena_bytes -= total;
        mf__fail(ctx, "out of memory: cannot allocate a %zu-byte activation arena", total);
    }
}

MFDEF char *mf_shape_str(const mf_tensor *t, char *buf, size_t size) {
    size_t n = 0;
    int i;
    if (!buf || size == 0) return buf;
    buf[0] = 0;
    if (!t) { snprintf(buf, size, "NULL"); return buf; }
    n += (size_t)snprintf(buf + n, size - n, "[");
    for (i = 0; i < t->ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, i ? ", %d" : "%d", t->shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

/* Validate a user-given shape; returns the element count or -1 (with the error set). */
static int64_t mf__check_shape(mf_ctx *ctx, const char *who, int ndim, const int *shape) {
    int64_t ne = 1;
    int i;
    if (ndim < 1 || ndim > MF_MAX_DIMS)
        return (mf__fail(ctx, "%s: ndim is %d; tensors have 1 to %d dimensions", who, ndim, MF_MAX_DIMS), -1);
    if (!shape) return (mf__fail(ctx, "%s: shape is NULL; pass an array of %d sizes", who, ndim), -1);
    for (i = 0; i < ndim; i++) {
        if (shape[i] <= 0)
            return (mf__fail(ctx, "%s: size %d of dimension %d is not positive", who, shape[i], i), -1);
        if (ne > (((int64_t)1 << 40) / shape[i]))
            return (mf__fail(ctx, "%s: shape has more than 2^40 elements", who), -1);
        ne *= shape[i];
    }
    return ne;
}

/* A tensor header in the arena with shape set; data is not allocated. */
static mf_tensor *mf__header(mf_ctx *ctx, int ndim, const int *shape) {
    mf_tensor *t = (mf_tensor *)mf__calloc(ctx, sizeof(mf_tensor));
    int i;
    if (!t) return NULL;
    t->ndim = ndim;
    t->ne = 1;
    for (i = 0; i < ndim; i++) { t->shape[i] = shape[i]; t->ne *= shape[i]; }
    return t;
}

MFDEF mf_tensor *mf_new(mf_ctx *ctx, int ndim, const int *shape) {
    mf_tensor *t;
    if (!mf_ok(ctx)) return NULL;
    if (mf__check_shape(ctx, "mf_new", ndim, shape) < 0) return NULL;
    t = mf__header(ctx, ndim, shape);
    if (!t) return NULL;
    if (ctx->be) { /* device memory */
        t->data = (float *)mf__alloc_data(ctx, (size_t)t->ne * sizeof(float));
        return t->data && mf__dzero(ctx, t->data, (size_t)t->ne * sizeof(float)) == 0 ? t : NULL;
    }
    t->data = (float *)mf__calloc(ctx, (size_t)t->ne * sizeof(float));
    return t->data ? t : NULL;
}

MFDEF mf_tensor *mf_from(mf_ctx *ctx, int ndim, const int *shape, const float *values) {
    mf_tensor *t;
    if (!mf_ok(ctx)) return NULL;
    if (!values) return (mf_tensor *)mf__fail(ctx, "mf_from: values is NULL; pass the data to copy");
    if (mf__check_shape(ctx, "mf_from", ndim, shape) < 0) return NULL;
    if (ctx->be) { /* device memory: no need to zero it first */
        if (!(t = mf__header(ctx, ndim, shape))) return NULL;
        t->data = (float *)mf__alloc_data(ctx, (size_t)t->ne * sizeof(float));
        return t->data && mf__dupload(ctx, t->data, values, (size_t)t->ne * sizeof(float)) == 0 ? t : NULL;
    }
    t = mf_new(ctx, ndim, shape);
    if (t) memcpy(t->data, values, (size_t)t->ne * sizeof(float));
    return t;
}

MFDEF mf_device mf_ctx_device(const mf_ctx *ctx) { return ctx && ctx->be ? MF_DEVICE_CUDA : MF_DEVICE_CPU; }

static int mf__to_host(mf_ctx *ctx, const mf_tensor *t, float *dst, int grad) {
    const float *src;
    if (!mf_ok(ctx)) return -1;
    if (!t || !dst) return (mf__fail(ctx, "%s: the tensor or the destination is NULL", grad ? "mf_grad_to_host" : "mf_to_host"), -1);
    src = grad ? t->grad : t->data;
    if (!src) return (mf__fail(ctx, "mf_grad_to_host: the tensor has no gradient (call mf_backward first; "
                               "only tensors that need one get it)"), -1);
    if (!grad && t->bf16) { /* the bf16 values into dst's first half, then widened from the last one down */
        const uint16_t *h = (const uint16_t *)dst;
        int64_t i;
        if (mf__ddownload(ctx, dst, src, (size_t)t->ne * 2) < 0) return -1;
        for (i = t->ne - 1; i >= 0; i--) {
            uint32_t u = (uint32_t)h[i] << 16;
            memcpy(dst + i, &u, sizeof u);
        }
        return 0;
    }
    return mf__ddownload(ctx, dst, src, (size_t)t->ne * sizeof(float));
}
MFDEF int mf_to_host(mf_ctx *ctx, const mf_tensor *t, float *dst) { return mf__to_host(ctx, t, dst, 0); }
MFDEF int mf_set_data(mf_ctx *ctx, mf_tensor *t, const float *values) {
    if (!mf_ok(ctx)) return -1;
    if (!t || !values || !t->data) return (mf__fail(ctx, "mf_set_data: the tensor or the values are NULL"), -1);
    if (t->bf16)
        return (mf__fail(ctx, "mf_set_data: this activation is stored in bf16 (a CUDA context in MF_PREC_BF16); "
                         "set the values of a tensor made by mf_new or mf_from instead"), -1);
    return mf__dupload(ctx, t->data, values, (size_t)t->ne * sizeof(float));
}
MFDEF int mf_grad_to_host(mf_ctx *ctx, const mf_tensor *t, float *dst) { return mf__to_host(ctx, t, dst, 1); }
MFDEF float mf_item(mf_ctx *ctx, const mf_tensor *t) {
    float v;
    if (!mf_ok(ctx) || !t || !t->data) return NAN;
    if (!ctx->be) return t->data[0];
    if (t->bf16) {
        uint16_t h;
        uint32_t u;
        if (mf__ddownload(ctx, &h, t->data, sizeof h) < 0) return NAN;
        u = (uint32_t)h << 16;
        memcpy(&v, &u, sizeof v);
        return v;
    }
    return mf__ddownload(ctx, &v, t->data, sizeof v) == 0 ? v : NAN;
}

/* ---- parameter arena ---- */
/* every parameter's data and grad pointed into the flat buffers again, after they moved */
static void mf__param_repoint(mf_ctx *ctx) {
    int k;
    for (k = 0; k < ctx->n_params; k++) {
        mf_tensor *p = ctx->params[k];
        p->data = ctx->p_data + p->offset;
        p->grad = ctx->p_grad + p->offset;
    }
}
/* room for `floats` floats in the parameter buffers: doubling (a model adding its parameters one by
   one), or exactly that many (exact: the padded end of ZeRO-1's shards) */
static int mf__param_reserve(mf_ctx *ctx, int64_t floats, int exact) {
    int64_t cap = ctx->p_cap ? ctx->p_cap : 4096;
    int i;
    float **bufs[4];
    if (floats <= ctx->p_cap) return 0;
    if (ctx->mom_n) return (mf__fail(ctx, "mf_param: no parameter can be added once the moments are sharded (ZeRO-1, mf_dist_attach)"), -1);
    if (exact) cap = floats;
    else while (cap < floats) cap *= 2;
    if (mf__mem_grant(ctx, (size_t)(cap - ctx->p_cap) * sizeof(float) * (ctx->p_m ? 4 : 2),
                      ctx->p_m ? "parameters (values, gradients and optimizer moments)" : "parameters (values and gradients)") < 0)
        return -1;
    bufs[0] = &ctx->p_data; bufs[1] = &ctx->p_grad; bufs[2] = &ctx->p_m; bufs[3] = &ctx->p_v;
    for (i = 0; i < 4; i++) {
        float *nb;
        if (i >= 2 && !*bufs[i]) continue; /* moments appear with the first optimizer step */
        if (ctx->be) { /* device: no realloc; allocate, copy, free */
            nb = (float *)ctx->be->dalloc(ctx, (size_t)cap * sizeof(float), "the parameter buffers");
            if (!nb) break;
            if ((ctx->p_cap && ctx->be->copy(ctx, nb, *bufs[i], (size_t)ctx->p_cap * sizeof(float), MF__D2D) < 0) ||
                ctx->be->zero(ctx, nb + ctx->p_cap, (size_t)(cap - ctx->p_cap) * sizeof(float)) < 0) {
                ctx->be->dfree(ctx, nb);
                break;
            }
            ctx->be->dfree(ctx, *bufs[i]);
            *bufs[i] = nb;
            continue;
        }
        /* host: the tail past p_used stays untouched (not resident: the capacity doubles, and a
           model of 12.4 M floats would hold 4 x 17 MB of zeros); mf__param_zero_new zeroes each
           parameter's floats as it is added */
        nb = (float *)MF_REALLOC(*bufs[i], (size_t)cap * sizeof(float));
        if (!nb) break;
        *bufs[i] = nb;
    }
    mf__param_repoint(ctx); /* the buffers may have moved, even after a failure */
    if (i < 4) {
        mf__fail(ctx, "out of memory: cannot grow the parameter buffers to %lld floats", (long long)cap);
        return -1;
    }
    ctx->p_cap = cap;
    return 0;
}

/* device: the parameter buffers (and the moments, once they exist) cut to n >= p_used floats. A
   device has no realloc, so they grow by doubling while a model adds its parameters, which can leave
   almost half of each of the four unused (the host's unused tail is never touched, so never resident).
   mf_reset cuts them to the floats in use (between steps: no collective of [mf:dist] still reads the
   gradients; not once ZeRO-1 shards the moments), mf_dist_attach to ZeRO-1's padded shards; a
   parameter added later grows them again. The new buffers are allocated before the old ones are
   freed, so where the device has no room for them nothing changes. */
static void mf__param_fit(mf_ctx *ctx, int64_t n) {
    float **bufs[4], *nb[4] = {NULL, NULL, NULL, NULL};
    size_t bytes = (size_t)n * sizeof(float);
    int i, k;
    if (!ctx->be || !ctx->p_data || n < ctx->p_used || n <= 0 || n >= ctx->p_cap || !mf_ok(ctx)) return;
    bufs[0] = &ctx->p_data; bufs[1] = &ctx->p_grad; bufs[2] = &ctx->p_m; bufs[3] = &ctx->p_v;
    for (i = 0; i < 4; i++) /* what = NULL: an allocation that fails returns NULL and fails nothing */
        if (*bufs[i] && (!(nb[i] = (float *)ctx->be->dalloc(ctx, bytes, NULL)) ||
                         ctx->be->copy(ctx, nb[i], *bufs[i], bytes, MF__D2D) < 0))
            break;
    for (k = 0; k < 4; k++) {
        if (i < 4) ctx->be->dfree(ctx, nb[k]);
        else if (nb[k]) { ctx->be->dfree(ctx, *bufs[k]); *bufs[k] = nb[k]; }
    }
    if (i < 4) return;
    ctx->p_cap = n;
    mf__param_repoint(ctx);
}

/* host: zero floats [lo, hi) of the parameter buffers (values, gradients and the moments once they
   exist), the floats a new parameter takes (its alignment gap included); the device zeroes the
   whole capacity when it grows */
static void mf__param_zero_new(mf_ctx *ctx, int64_t lo, int64_t hi) {
    float *bufs[4];
    int i;
    if (ctx->be || hi <= lo) return;
    bufs[0] = ctx->p_data; bufs[1] = ctx->p_grad; bufs[2] = ctx->p_m; bufs[3] = ctx->p_v;
    for (i = 0; i < 4; i++)
        if (bufs[i]) memset(bufs[i] + lo, 0, (size_t)(hi - lo) * sizeof(float));
}

/* The optimizer moments appear with the first optimizer step (or checkpoint save/load), zeroed
   (on the host: the floats in use; a later parameter zeroes its own, mf__param_zero_new). */
static int mf__alloc_moments(mf_ctx *ctx) {
    size_t bytes = (size_t)(ctx->p_cap ? ctx->p_cap : 1) * sizeof(float);
    if (ctx->p_m) return 0;
    if (mf__mem_grant(ctx, 2 * bytes, "optimizer moments") < 0) return -1;
    if (ctx->be) {
        ctx->p_m = (float *)ctx->be->dalloc(ctx, bytes, "optimizer moments");
        ctx->p_v = ctx->p_m ? (float *)ctx->be->dalloc(ctx, bytes, "optimizer moments") : NULL;
        if (!ctx->p_v || ctx->be->zero(ctx, ctx->p_m, bytes) < 0 || ctx->be->zero(ctx, ctx->p_v, bytes) < 0) {
            ctx->be->dfree(ctx, ctx->p_m); ctx->be->dfree(ctx, ctx->p_v); ctx->p_m = ctx->p_v = NULL;
            return -1;
        }
        return 0;
    }
    ctx->p_m = (float *)mf__xmalloc(bytes);
    ctx->p_v = (float *)mf__xmalloc(bytes);
    if (!ctx->p_m || !ctx->p_v) {
        MF_FREE(ctx->p_m); MF_FREE(ctx->p_v); ctx->p_m = ctx->p_v = NULL;
        mf__fail(ctx, "out of memory: optimizer moments for %lld floats", (long long)ctx->p_cap);
        return -1;
    }
    memset(ctx->p_m, 0, (size_t)ctx->p_used * sizeof(float)); memset(ctx->p_v, 0, (size_t)ctx->p_used * sizeof(float));
    return 0;
}

MFDEF mf_tensor *mf_param_find(const mf_ctx *ctx, const char *name) {
    int i;
    if (!ctx || !name) return NULL;
    for (i = 0; i < ctx->n_params; i++)
        if (strcmp(ctx->params[i]->name, name) == 0) return ctx->params[i];
    return NULL;
}

MFDEF mf_tensor *mf_param(mf_ctx *ctx, const char *name, int ndim, const int *shape) {
    mf_tensor *t;
    int64_t ne, off;
    char *nm;
    int i;
    if (!mf_ok(ctx)) return NULL;
    if (!name || !name[0]) return (mf_tensor *)mf__fail(ctx, "mf_param: the name is NULL or empty; every parameter needs a unique name");
    if (mf_param_find(ctx, name))
        return (mf_tensor *)mf__fail(ctx, "mf_param: a parameter named \"%s\" exists already; names must be unique", name);
    if ((ne = mf__check_shape(ctx, "mf_param", ndim, shape)) < 0) return NULL;
    off = (ctx->p_used + 15) & ~(int64_t)15; /* 64-byte aligned within the buffer */
    if (mf__param_reserve(ctx, off + ne, 0) < 0) return NULL;
    mf__param_zero_new(ctx, ctx->p_used, off + ne);
    if (ctx->n_params == ctx->params_cap) {
        int cap = ctx->params_cap ? 2 * ctx->params_cap : 64;
        mf_tensor **np = (mf_tensor **)MF_REALLOC(ctx->params, (size_t)cap * sizeof(mf_tensor *));
        int64_t *ns;
        unsigned char *nt;
        if (np) ctx->params = np;
        ns = np ? (int64_t *)MF_REALLOC(ctx->p_steps, (size_t)cap * sizeof(int64_t)) : NULL;
        if (ns) ctx->p_steps = ns;
        nt = ns ? (unsigned char *)MF_REALLOC(ctx->p_touched, (size_t)cap) : NULL;
        if (!nt) return (mf_tensor *)mf__fail(ctx, "out of memory: parameter list");
        ctx->p_touched = nt; ctx->params_cap = cap;
    }
    t = (mf_tensor *)mf__xmalloc(sizeof(mf_tensor));
    nm = (char *)mf__xmalloc(strlen(name) + 1);
    if (!t || !nm) { MF_FREE(t); MF_FREE(nm); return (mf_tensor *)mf__fail(ctx, "out of memory: parameter \"%s\"", name); }
    memset(t, 0, sizeof *t);
    strcpy(nm, name);
    t->name = nm;
    t->ndim = ndim;
    for (i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->ne = ne;
    t->offset = off;
    t->data = ctx->p_data + off;
    t->grad = ctx->p_grad + off;
    t->is_param = 1;
    t->requires_grad = 1;
    ctx->p_used = off + ne;
    ctx->p_steps[ctx->n_params] = 0;
    ctx->p_touched[ctx->n_params] = 0;
    ctx->params[ctx->n_params++] = t;
    return t;
}

/* index of a parameter in creation order (offsets grow with it): binary search */
static int mf__param_index(const mf_ctx *ctx, const mf_tensor *p) {
    int lo = 0, hi = ctx->n_params - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (ctx->params[mid]->offset < p->offset) lo = mid + 1; else hi = mid;
    }
    return lo;
}

MFDEF mf_tensor *mf_param_at(const mf_ctx *ctx, int i) {
    return (ctx && i >= 0 && i < ctx->n_params) ? ctx->params[i] : NULL;
}
MFDEF int mf_param_tensors(const mf_ctx *ctx) { return ctx ? ctx->n_params : 0; }
MFDEF void mf_param_set_trainable(mf_tensor *param, int trainable) {
    if (param && param->is_param) param->requires_grad = trainable != 0;
}
MFDEF float *mf_param_data(mf_ctx *ctx) { return ctx ? ctx->p_data : NULL; }
MFDEF float *mf_param_grads(mf_ctx *ctx) { return ctx ? ctx->p_grad : NULL; }

/* ==== [mf:init] ============================================================================= */
static int mf__init_target(mf_ctx *ctx, mf_tensor *t, const char *who) {
    if (!mf_ok(ctx)) return -1;
    if (!t) return (mf__fail(ctx, "%s: the tensor is NULL", who), -1);
    return 0;
}
/* The RNG stream of a tensor. A named tensor's values depend on the seed and its name (stable
   across runs and creation order); an unnamed one's on the seed and how
   many unnamed tensors this context initialised before it (not on its address, which changes
   from run to run): the stream of the name "\x01anon <n>", a name no parameter has. */
static uint64_t mf__stream_of(mf_ctx *ctx, const mf_tensor *t) {
    char anon[32];
    if (t->name) return mf__hash_str(t->name);
    snprintf(anon, sizeof anon, "\x01anon %llu", (unsigned long long)ctx->anon_inits++);
    return mf__hash_str(anon);
}
/* The values are made on the host: in t->data on the CPU, in a host buffer copied to the device
   on CUDA (the same numbers on both). */
static float *mf__init_begin(mf_ctx *ctx, mf_tensor *t) {
    float *h;
    if (!ctx->be) return t->data;
    if (!(h = (float *)mf__xmalloc((size_t)t->ne * sizeof(float))))
        mf__fail(ctx, "out of memory: initialising a tensor of %lld values", (long long)t->ne);
    return h;
}
static int mf__init_end(mf_ctx *ctx, mf_tensor *t, float *h) {
    int r = 0;
    if (!ctx->be) return 0;
    r = mf__dupload(ctx, t->data, h, (size_t)t->ne * sizeof(float));
    MF_FREE(h);
    return r;
}
MFDEF int mf_init_const(mf_ctx *ctx, mf_tensor *t, float value) {
    int64_t i;
    float *d;
    if (mf__init_target(ctx, t, "mf_init_const") < 0) return -1;
    if (!(d = mf__init_begin(ctx, t))) return -1;
    for (i = 0; i < t->ne; i++) d[i] = value;
    return mf__init_end(ctx, t, d);
}
MFDEF int mf_init_uniform(mf_ctx *ctx, mf_tensor *t, float lo, float hi) {
    int64_t i;
    uint64_t st;
    float *d;
    if (mf__init_target(ctx, t, "mf_init_uniform") < 0) return -1;
    if (!(d = mf__init_begin(ctx, t))) return -1;
    st = mf__stream_of(ctx, t);
    for (i = 0; i < t->ne; i++) d[i] = lo + (hi - lo) * mf__uniform(ctx->seed, st, (uint64_t)i);
    return mf__init_end(ctx, t, d);
}
MFDEF int mf_init_normal(mf_ctx *ctx, mf_tensor *t, float mean, float std) {
    int64_t i;
    uint64_t st;
    float *d;
    if (mf__init_target(ctx, t, "mf_init_normal") < 0) return -1;
    if (!(std >= 0)) return (mf__fail(ctx, "mf_init_normal: std %g is negative or NaN", (double)std), -1);
    if (!(d = mf__init_begin(ctx, t))) return -1;
    st = mf__stream_of(ctx, t);
    for (i = 0; i < t->ne; i++) d[i] = mean + std * mf__normal(ctx->seed, st, (uint64_t)i);
    return mf__init_end(ctx, t, d);
}
MFDEF int mf_init_kaiming_uniform(mf_ctx *ctx, mf_tensor *t) {
    float b;
    if (mf__init_target(ctx, t, "mf_init_kaiming_uniform") < 0) return -1;
    /* gain sqrt(2 / (1 + a^2)) with a = sqrt(5), bound = gain * sqrt(3 / fan_in) = 1/sqrt(fan_in) */
    b = 1.0f / sqrtf((float)(t->ne / t->shape[0]));
    return mf_init_uniform(ctx, t, -b, b);
}
MFDEF int mf_init_bias(mf_ctx *ctx, mf_tensor *t, int fan_in) {
    float b;
    if (mf__init_target(ctx, t, "mf_init_bias") < 0) return -1;
    if (fan_in <= 0) return (mf__fail(ctx, "mf_init_bias: fan_in %d must be positive", fan_in), -1);
    b = 1.0f / sqrtf((float)fan_in);
    return mf_init_uniform(ctx, t, -b, b);
}

/* ==== [mf:autograd] ========================================================================= */
/* An op is one of these, defined in one place in [mf:ops] (or a family's section) and listed in
   mf__ops. shape() validates the inputs and arguments of `out` and sets out->ndim/shape (calling
   mf__fail on bad input); forward() fills out->data; backward() ADDS the contribution of out->grad
   to the gradients of the inputs (or stores it, see assigns_grads). The properties after backward
   tell the autograd what it may do around the op; tests/test_ops.c checks each against what the op
   does. */
struct mf__op {
    const char *name;
    int n_required;          /* src[0 .. n_required-1] must not be NULL; later ones are optional */
    int (*shape)(mf_ctx *ctx, mf_tensor *out);
    void (*forward)(mf_ctx *ctx, mf_tensor *out);
    void (*backward)(mf_ctx *ctx, mf_tensor *out);
    int is_view;             /* the output shares src[0]'s data (reshape) */
    int is_unary;            /* elementwise on its one input: the backward may turn dy's buffer into dx in
                                place (recycled gradients, mf__grad_shared_src) */
    int assigns_grads;       /* the backward takes every input gradient with mf__g_claim / mf__g_add, so
                                mf_backward leaves the pending ones unzeroed (see below) */
    int grad_passes;         /* the first grad_passes inputs' gradient is out's, element for element (add:
                                both, sub: the first, reshape): such an input may take out's gradient
                                buffer (mf__grad_shared_src) */
    int bf16_out;            /* its output is an activation that may be stored in bf16 (1: a product,
                                a normalised or activated value, what bf16 autocast keeps in bf16; 2:
                                when its input is, as dropout), on a backend that stores activations
                                in bf16 (mf__store_bf16) */
};
/* An op's properties in its definition: the last initialisers of a mf__op, e.g.
   MF__OP_PROPS(MF__OP_ASSIGNS | MF__OP_PASS_FIRST), or MF__OP_PROPS(0) for none (positional: the
   header is C99 and C++, no designated initialisers). */
enum { MF__OP_VIEW = 1, MF__OP_UNARY = 2, MF__OP_ASSIGNS = 4, MF__OP_PASS_FIRST = 8, MF__OP_PASS_BOTH = 16,
       MF__OP_BF16 = 32, MF__OP_BF16_AS_INPUT = 64 };
#define MF__OP_PROPS(f) ((f) & MF__OP_VIEW) != 0, ((f) & MF__OP_UNARY) != 0, ((f) & MF__OP_ASSIGNS) != 0, \
                        ((f) & MF__OP_PASS_BOTH) ? 2 : ((f) & MF__OP_PASS_FIRST) ? 1 : 0, \
                        ((f) & MF__OP_BF16) ? 1 : ((f) & MF__OP_BF16_AS_INPUT) ? 2 : 0

/* the gradient buffer of an input, or NULL when it takes none */
static float *mf__g(const mf_tensor *t) { return (t && t->requires_grad) ? t->grad : NULL; }

/* CPU backward: an activation gradient is "pending" until its first writer (the latest consumer on
   the tape) runs, its buffer not zeroed yet. mf_backward zeroes the pending input gradients of an op
   before its backward, except for the ops with assigns_grads: their backward takes each input
   gradient with one of these two, so the first writer stores (=) instead of zero + add (one pass
   over the buffer less, and a GEMM that does not read C). */
/* The gradient of input s for a backward that writes every element: *assign = 1 when the backward
   must store (=) rather than add, as the buffer's first writer. */
static float *mf__g_claim(mf_tensor *s, int *assign) {
    float *g = mf__g(s);
    *assign = g && s->grad_pending;
    if (g) s->grad_pending = 0;
    return g;
}
/* The gradient of input s, zeroed if still pending, for a backward that adds (+=) into it. */
static void mf__zero_floats(mf_ctx *ctx, float *x, int64_t n);
static float *mf__g_add(mf_ctx *ctx, mf_tensor *s) {
    int assign;
    float *g = mf__g_claim(s, &assign);
    if (assign) mf__zero_floats(ctx, g, s->ne);
    return g;
}

static void mf__set_shape(mf_tensor *t, int ndim, const int *shape) {
    int i;
    t->ndim = ndim;
    t->ne = 1;
    for (i = 0; i < ndim; i++) { t->shape[i] = shape[i]; t->ne *= shape[i]; }
}
static int mf__last(const mf_tensor *t) { return t->shape[t->ndim - 1]; }
static int64_t mf__rows(const mf_tensor *t) { return t->ne / mf__last(t); }

/* Start a node of `op` with up to four inputs. */
static mf_tensor *mf__begin(mf_ctx *ctx, const mf__op *op, mf_tensor *a, mf_tensor *b,
                            mf_tensor *c, mf_tensor *d) {
    mf_tensor *t;
    if (!mf_ok(ctx)) return NULL;
    /* from here to mf__finish the op is who asks for memory (mf_ctx_set_memory_limit) */
    ctx->cur_op = op->name; ctx->cur_backward = 0;
    t = (mf_tensor *)mf__calloc(ctx, sizeof(mf_tensor));
    if (!t) return NULL;
    t->op = op;
    t->src[0] = a; t->src[1] = b; t->src[2] = c; t->src[3] = d;
    return t;
}

static int mf__tape_push(mf_ctx *ctx, mf_tensor *t) {
    if (ctx->tape_len == ctx->tape_cap) {
        int cap = ctx->tape_cap ? 2 * ctx->tape_cap : 256;
        mf_tensor **nt = (mf_tensor **)MF_REALLOC(ctx->tape, (size_t)cap * sizeof(mf_tensor *));
        if (!nt) { mf__fail(ctx, "out of memory: autograd tape"); return -1; }
        ctx->tape = nt; ctx->tape_cap = cap;
    }
    ctx->tape[ctx->tape_len++] = t;
    return 0;
}

/* ---- check mode (mf_set_check_finite): find the first op that makes a NaN or an Inf ---- */
MFDEF int mf_set_check_finite(mf_ctx *ctx, int on) {
    int old;
    if (!ctx) return 0;
    old = ctx->check_finite; ctx->check_finite = on != 0;
    return old;
}

/* ---- the op profiler (mf_set_profile) ---- */
MFDEF int mf_set_profile(mf_ctx *ctx, int on) {
    int old;
    if (!ctx) return 0;
    old = ctx->profile; ctx->profile = on != 0;
    if (on) { ctx->prof_n = 0; memset(ctx->prof, 0, sizeof ctx->prof); ctx->prof_gemm_s = 0; }
    return old;
}
/* the profiler's clock: on a device it first waits for the queued kernels, so that a timed region
   holds its own kernels and nothing queued before it */
static double mf__prof_now(mf_ctx *ctx) {
    if (ctx->be) ctx->be->sync(ctx);
    return mf_time();
}
/* the kind of an op (or non-op entry) name: how a report groups them (mf_profile_entry) */
static const char *mf__prof_kind(const char *name) {
    static const char *const kinds[][2] = {
        {"matmul", "matmul"}, {"head_matmul", "matmul"}, {"linear", "matmul"}, {"conv1d", "matmul"},
        {"attention", "mixer"}, {"rel_attention", "mixer"}, {"fast_weights", "mixer"}, {"linear_attention", "mixer"},
        {"feedback_attention", "mixer"}, {"feedback", "mixer"}, {"dpfp", "mixer"}, {"avg_pool", "mixer"},
        {"avg_pool_sub", "mixer"}, {"layernorm", "layernorm"}, {"embedding", "embedding"},
        {"cross_entropy", "loss"}, {"mse", "loss"}, {"sum", "loss"}, {"mean", "loss"}, {"sum_axis", "loss"},
        {"reshape", "copy"}, {"permute", "copy"}, {"concat", "copy"}, {"slice", "copy"}, {"roll", "copy"},
        {"optimizer_step", "optimizer"}, {"clip_grad_norm", "optimizer"}, {"zero_grad", "optimizer"},
        {"train_update", "optimizer"},
        {"zero_activation_grads", "memset"}};
    size_t i;
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) if (!strcmp(kinds[i][0], name)) return kinds[i][1];
    return "elementwise"; /* add, mul, gelu, softmax, dropout, ... */
}
/* the profile row of a name (names are string constants: compared by address first) */
static mf__prof_row *mf__prof_row_of(mf_ctx *ctx, const char *name) {
    int i;
    for (i = 0; i < ctx->prof_n; i++) if (ctx->prof[i].name == name || !strcmp(ctx->prof[i].name, name)) return &ctx->prof[i];
    if (ctx->prof_n == MF__PROF_ROWS) return &ctx->prof[MF__PROF_ROWS - 1]; /* more names than ops: none yet */
    ctx->prof[ctx->prof_n].name = name;
    return &ctx->prof[ctx->prof_n++];
}
/* a timed region: its start and the GEMM seconds before it */
typedef struct { double t, gemm; } mf__prof_mark;
static mf__prof_mark mf__prof_begin(mf_ctx *ctx) {
    mf__prof_mark m;
    m.t = mf__prof_now(ctx); m.gemm = ctx->prof_gemm_s;
    return m;
}
enum { MF__PROF_FWD, MF__PROF_BWD, MF__PROF_OTHER }; /* an op's forward, its backward, a non-op entry */
static void mf__prof_end(mf_ctx *ctx, const char *name, int where, mf__prof_mark m) {
    double dt = mf__prof_now(ctx) - m.t, dg = ctx->prof_gemm_s - m.gemm;
    mf__prof_row *r = mf__prof_row_of(ctx, name);
    if (where == MF__PROF_FWD) r->fwd += dt, r->fwd_gemm += dg;
    else r->bwd += dt, r->bwd_gemm += dg;
    if (where != MF__PROF_BWD) r->calls++;
}
/* GEMM driver (or cuBLAS) calls from the ops: their time, while profiling */
static double mf__gemm_t0(mf_ctx *ctx) { return ctx->profile ? mf__prof_now(ctx) : 0.0; }
static void mf__gemm_t1(mf_ctx *ctx, double t0) { if (ctx->profile) ctx->prof_gemm_s += mf__prof_now(ctx) - t0; }
/* an op's forward (on either device) or its backward on a device, timed while profiling (the CPU's
   backward is mf__backward_op, which also times the zeroing of the gradients) */
static void mf__run_op(mf_ctx *ctx, mf_tensor *t, int where) {
    mf__prof_mark m = {0, 0};
    if (ctx->profile) m = mf__prof_begin(ctx);
    if (where == MF__PROF_BWD) ctx->be->backward(ctx, t);
    else if (ctx->be) ctx->be->forward(ctx, t);
    else t->op->forward(ctx, t);
    if (ctx->profile) mf__prof_end(ctx, t->op->name, where, m);
}

static int mf__prof_cmp(const void *a, const void *b) {
    const mf_profile_entry *x = (const mf_profile_entry *)a, *y = (const mf_profile_entry *)b;
    double u = x->fwd_s + x->bwd_s, v = y->fwd_s + y->bwd_s;
    return u < v ? 1 : u > v ? -1 : strcmp(x->name, y->name);
}
MFDEF int mf_profile_entries(const mf_ctx *ctx, mf_profile_entry *out, int max) {
    mf_profile_entry all[MF__PROF_ROWS];
    int i;
    if (!ctx) return -1;
    for (i = 0; i < ctx->prof_n; i++) {
        const mf__prof_row *r = &ctx->prof[i];
        all[i].name = r->name; all[i].kind = mf__prof_kind(r->name); all[i].calls = r->calls;
        all[i].fwd_s = r->fwd; all[i].fwd_gemm_s = r->fwd_gemm; all[i].bwd_s = r->bwd; all[i].bwd_gemm_s = r->bwd_gemm;
    }
    qsort(all, (size_t)ctx->prof_n, sizeof all[0], mf__prof_cmp);
    for (i = 0; out && i < ctx->prof_n && i < max; i++) out[i] = all[i];
    return ctx->prof_n;
}
/* printf into buf at *len (nothing past size; *len counts the whole text, as snprintf) */
static void mf__prof_printf(char *buf, size_t size, size_t *len, const char *fmt, ...) {
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(buf && *len < size ? buf + *len : NULL, buf && *len < size ? size - *len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) *len += (size_t)n;
}
MFDEF int mf_profile_report(const mf_ctx *ctx, int n_steps, char *buf, size_t size) {
    static const char *const kinds[] = {"matmul", "mixer", "layernorm", "elementwise", "loss", "embedding", "copy",
                                        "optimizer", "memset"};
    mf_profile_entry e[MF__PROF_ROWS];
    double f[10] = {0}, b[10] = {0}, total = 0, ms;
    int n, i, k;
    size_t len = 0;
    if (!ctx || n_steps < 1) return -1;
    if (buf && size) buf[0] = 0;
    n = mf_profile_entries(ctx, e, MF__PROF_ROWS);
    ms = 1e3 / n_steps;
    for (i = 0; i < n; i++) total += e[i].fwd_s + e[i].bwd_s;
    if (total <= 0) total = 1e-30;
    mf__prof_printf(buf, size, &len, "%-22s %-11s %8s %9s %9s %9s %9s %9s %6s\n", "op", "kind", "calls", "fwd ms",
                    "(GEMM)", "bwd ms", "(GEMM)", "total ms", "%");
    for (i = 0; i < n; i++) {
        mf__prof_printf(buf, size, &len, "%-22s %-11s %8.1f %9.3f %9.3f %9.3f %9.3f %9.3f %5.1f%%\n", e[i].name, e[i].kind,
                        (double)e[i].calls / n_steps, e[i].fwd_s * ms, e[i].fwd_gemm_s * ms, e[i].bwd_s * ms,
                        e[i].bwd_gemm_s * ms, (e[i].fwd_s + e[i].bwd_s) * ms, 100 * (e[i].fwd_s + e[i].bwd_s) / total);
        for (k = 0; k < 9 && strcmp(kinds[k], e[i].kind); k++) {}
        f[k] += e[i].fwd_s - e[i].fwd_gemm_s; b[k] += e[i].bwd_s - e[i].bwd_gemm_s;
        f[9] += e[i].fwd_gemm_s; b[9] += e[i].bwd_gemm_s;
    }
    mf__prof_printf(buf, size, &len, "by kind, GEMM apart (ms%s): %-10s fwd %9.3f bwd %9.3f total %9.3f %5.1f%%\n",
                    n_steps > 1 ? " per step" : "", "GEMM", f[9] * ms, b[9] * ms, (f[9] + b[9]) * ms, 100 * (f[9] + b[9]) / total);
    for (k = 0; k < 9; k++)
        if (f[k] + b[k] > 0)
            mf__prof_printf(buf, size, &len, "%*s %-10s fwd %9.3f bwd %9.3f total %9.3f %5.1f%%\n",
                            n_steps > 1 ? 37 : 28, "", k == 0 ? "matmul-rest" : kinds[k], f[k] * ms, b[k] * ms,
                            (f[k] + b[k]) * ms, 100 * (f[k] + b[k]) / total);
    return len > (size_t)2147483647 ? 2147483647 : (int)len;
}
/* The index of the first NaN / Inf among n floats of tensor data on the context's device (its
   value in *v), -1 when all are finite, -2 when a device copy failed (error in ctx). */
static int64_t mf__first_nonfinite(mf_ctx *ctx, const float *p, int64_t n, float *v) {
    const int64_t CHUNK = 16384;
    float *buf;
    int64_t lo, i;
    if (!p) return -1;
    if (!ctx->be) {
        for (i = 0; i < n; i++) if (!isfinite(p[i])) { *v = p[i]; return i; }
        return -1;
    }
    if (!(buf = (float *)mf__xmalloc((size_t)CHUNK * sizeof(float)))) return (mf__fail(ctx, "out of memory: check mode's copy buffer"), -2);
    for (lo = 0; lo < n; lo += CHUNK) { /* the device's values, a chunk at a time through the host */
        int64_t len = n - lo < CHUNK ? n - lo : CHUNK;
        if (mf__ddownload(ctx, buf, p + lo, (size_t)len * sizeof(float)) < 0) { MF_FREE(buf); return -2; }
        for (i = 0; i < len; i++) if (!isfinite(buf[i])) { *v = buf[i]; MF_FREE(buf); return lo + i; }
    }
    MF_FREE(buf);
    return -1;
}
/* "input 2 [4, 8] (parameter "fc.weight")" */
static void mf__describe_input(const mf_tensor *s, int k, char *buf, size_t size) {
    char sh[64];
    if (s->is_param) snprintf(buf, size, "input %d %s (parameter \"%s\")", k + 1, mf_shape_str(s, sh, sizeof sh), s->name);
    else snprintf(buf, size, "input %d %s%s", k + 1, mf_shape_str(s, sh, sizeof sh), s->op ? "" : " (not made by an op)");
}
/* after t's forward: its output finite, or the error naming t, the element and its inputs */
static int mf__check_forward(mf_ctx *ctx, mf_tensor *t) {
    char msg[MF__ERRLEN], sh[64], in[160];
    size_t n = 0;
    int k, outside = 0;
    float v = 0;
    int64_t at;
    if (t->op->is_view || (at = mf__first_nonfinite(ctx, t->data, t->ne, &v)) == -1) return 0; /* a view: its input was checked */
    if (at < -1) return -1;
    n += (size_t)snprintf(msg, sizeof msg, "op %s made %g at element %lld of its output %s;", t->op->name, (double)v,
                          (long long)at, mf_shape_str(t, sh, sizeof sh));
    for (k = 0; k < MF_MAX_SRC && n < sizeof msg; k++) {
        const mf_tensor *s = t->src[k];
        int64_t j;
        float w = 0;
        if (!s) continue;
        if ((j = mf__first_nonfinite(ctx, s->data, s->ne, &w)) < -1) return -1;
        mf__describe_input(s, k, in, sizeof in);
        if (j >= 0) { outside = 1; n += (size_t)snprintf(msg + n, sizeof msg - n, " %s holds %g at element %lld;", in, (double)w, (long long)j); }
        else n += (size_t)snprintf(msg + n, sizeof msg - n, " %s finite;", in);
    }
    mf__fail(ctx, "non-finite value (check mode): %s %s", msg,
             outside ? "a non-finite input came from outside the ops (a parameter, mf_from data or a loaded checkpoint)"
                     : "its inputs are finite: this op is where the value starts");
    return -1;
}
/* after t's backward: the input gradients it wrote finite, or the error naming t and the input */
static int mf__check_backward(mf_ctx *ctx, mf_tensor *t) {
    char sh[64], in[160];
    int k;
    for (k = 0; k < MF_MAX_SRC; k++) {
        mf_tensor *s = t->src[k];
        int64_t at, j;
        float v = 0, w = 0;
        if (!s || !mf__g(s) || (!ctx->be && s->grad_pending)) continue; /* pending: not written yet */
        if ((at = mf__first_nonfinite(ctx, s->grad, s->ne, &v)) == -1) continue;
        if (at < -1 || (j = mf__first_nonfinite(ctx, t->grad, t->ne, &w)) < -1) return -1;
        mf__describe_input(s, k, in, sizeof in);
        mf__fail(ctx, "non-finite value (check mode): the backward of op %s made %g at element %lld of the gradient "
                 "of its %s, from %s output gradient %s%s", t->op->name, (double)v, (long long)at, in,
                 j >= 0 ? "a non-finite" : "a finite", mf_shape_str(t, sh, sizeof sh),
                 j >= 0 ? "" : ": this op's backward is where the value starts");
        return -1;
    }
    return 0;
}

/* Store t's values in bf16: an activation kept for the backward (t takes a gradient) of an op that
   allows it (always, or as its input is stored), on a backend storing activations in bf16 (a CUDA
   context in MF_PREC_BF16). Not in check mode, which reads outputs as floats. */
static int mf__store_bf16(const mf_ctx *ctx, const mf_tensor *t) {
    int op_allows = t->op->bf16_out == 1 || (t->op->bf16_out == 2 && t->src[0]->bf16);
    return op_allows && t->requires_grad && !ctx->check_finite && ctx->be && ctx->be->bf16_storage &&
           ctx->be->bf16_storage(ctx);
}
/* Check, shape, allocate, compute and record a node made by mf__begin (mf__finish below). */
static mf_tensor *mf__finish_op(mf_ctx *ctx, mf_tensor *t) {
    int i;
    if (!t || !mf_ok(ctx)) return NULL;
    for (i = 0; i < t->op->n_required; i++)
        if (!t->src[i])
            return (mf_tensor *)mf__fail(ctx, "%s: input %d is NULL; pass a tensor made by this context", t->op->name, i + 1);
    if (t->op->shape(ctx, t) < 0 || !mf_ok(ctx)) return NULL;
    if (ctx->grad_enabled)
        for (i = 0; i < MF_MAX_SRC; i++)
            if (t->src[i] && t->src[i]->requires_grad) {
                t->requires_grad = 1;
                if (t->src[i]->is_param) ctx->p_touched[mf__param_index(ctx, t->src[i])] = 1;
            }
    if (t->op->is_view) {
        t->data = t->src[0]->data;
        t->bf16 = t->src[0]->bf16;
    } else {
        t->bf16 = mf__store_bf16(ctx, t);
        if (!(t->data = (float *)mf__alloc_data(ctx, (size_t)t->ne * (t->bf16 ? 2 : sizeof(float))))) return NULL;
    }
    mf__run_op(ctx, t, MF__PROF_FWD);
    if (!mf_ok(ctx)) return NULL;
    if (t->requires_grad && mf__tape_push(ctx, t) < 0) return NULL;
    return t;
}
/* mf__finish_op, the op named as the one asking for memory (mf_ctx_set_memory_limit) since
   mf__begin, and its output tested in check mode */
static mf_tensor *mf__finish(mf_ctx *ctx, mf_tensor *t) {
    if (!t || !mf_ok(ctx)) return NULL;
    ctx->cur_op = t->op->name; ctx->cur_backward = 0;
    t = mf__finish_op(ctx, t);
    ctx->cur_op = NULL;
    if (t && ctx->check_finite && mf__check_forward(ctx, t) < 0) return NULL;
    return t;
}

MFDEF int mf_set_keep_activation_grads(mf_ctx *ctx, int keep) {
    int old;
    if (!ctx) return 1;
    old = !ctx->recycle_grads; ctx->recycle_grads = keep == 0;
    return old;
}
MFDEF int mf_set_grad(mf_ctx *ctx, int enabled) {
    int old;
    if (!ctx) return 0;
    old = ctx->grad_enabled; ctx->grad_enabled = enabled != 0;
    return old;
}

MFDEF mf_tensor *mf_detach(mf_ctx *ctx, mf_tensor *x) {
    mf_tensor *t;
    if (!mf_ok(ctx)) return NULL;
    if (!x) return (mf_tensor *)mf__fail(ctx, "mf_detach: input is NULL");
    t = mf__header(ctx, x->ndim, x->shape);
    if (t) t->data = x->data, t->bf16 = x->bf16;
    return t;
}

/* x[0..n) = 0, in parallel for large n (host memory) */
static void mf__zero_floats(mf_ctx *ctx, float *x, int64_t n) {
    int64_t nb = (n + 65535) / 65536, b;
    MF__PARFOR(ctx, nb, 65536.0 * 4)
    for (b = 0; b < nb; b++) {
        int64_t lo = b * 65536, len = n - lo < 65536 ? n - lo : 65536;
        memset(x + lo, 0, (size_t)len * sizeof(float));
    }
}

static void mf__zero_grad(mf_ctx *ctx) {
    if (ctx && ctx->p_grad) { /* the CPU's threads share the memset (megabytes for a model) */
        if (ctx->be) mf__dzero(ctx, ctx->p_grad, (size_t)ctx->p_used * sizeof(float));
        else mf__zero_floats(ctx, ctx->p_grad, (int64_t)ctx->p_used);
    }
    if (ctx && ctx->n_params) memset(ctx->p_touched, 0, (size_t)ctx->n_params);
}
MFDEF void mf_zero_grad(mf_ctx *ctx) {
    mf__prof_mark m = {0, 0};
    if (!ctx || !ctx->profile) { mf__zero_grad(ctx); return; }
    m = mf__prof_begin(ctx);
    mf__zero_grad(ctx);
    mf__prof_end(ctx, "zero_grad", MF__PROF_OTHER, m);
}

/* CPU: the input of t whose gradient buffer t's gradient shares (mf__grad_shared_src, [mf:ops]), or -1 */
static int mf__grad_shared_src(const mf_ctx *ctx, const mf_tensor *t);
static int mf__grad_sharing(const mf_tensor *t) {
    int k;
    for (k = 0; k < MF_MAX_SRC; k++)
        if (t->src[k] && t->src[k]->grad == t->grad) return k;
    return -1;
}
/* CPU: the backward of one tape op. A gradient is zeroed just before the first backward that adds
   into it (the latest consumer on the tape), while it is about to be used and still in cache,
   unless that op stores into it (assigns_grads); one that no op wrote is zeroed before its own
   backward reads it. */
static void mf__backward_op(mf_ctx *ctx, mf_tensor *t) {
    int k, prof = ctx->profile;
    mf__prof_mark m = {0, 0};
    if (prof) m = mf__prof_begin(ctx);
    if (t->grad_pending) mf__zero_floats(ctx, t->grad, t->ne), t->grad_pending = 0;
    if ((k = mf__grad_sharing(t)) >= 0) { /* that input's gradient is complete; the op leaves it alone */
        t->src[k]->grad_pending = 0;
        if (t->op->is_view) return;
    }
    for (k = 0; k < MF_MAX_SRC && !t->op->assigns_grads; k++) {
        mf_tensor *s = t->src[k];
        if (s && !s->is_param && s->requires_grad && s->grad_pending) mf__zero_floats(ctx, s->grad, s->ne), s->grad_pending = 0;
    }
    if (!prof) { t->op->backward(ctx, t); return; }
    mf__prof_end(ctx, "zero_activation_grads", MF__PROF_OTHER, m);
    m = mf__prof_begin(ctx);
    t->op->backward(ctx, t);
    mf__prof_end(ctx, t->op->name, MF__PROF_BWD, m);
}
/* The backward of one tape op on either device, the op named as the one asking for memory, its
   input gradients tested in check mode. Returns 0 or -1. */
static int mf__backward_one(mf_ctx *ctx, mf_tensor *t) {
    const char *prev = ctx->cur_op;
    int prev_bw = ctx->cur_backward;
    ctx->cur_op = t->op->name; ctx->cur_backward = 1;
    if (ctx->be) mf__run_op(ctx, t, MF__PROF_BWD);
    else mf__backward_op(ctx, t);
    ctx->cur_op = prev; ctx->cur_backward = prev_bw;
    if (!mf_ok(ctx)) return -1;
    return ctx->check_finite ? mf__check_backward(ctx, t) : 0;
}
/* After the backward of tape op i (and of the ops after it): the hook of a distributed run. */
static void mf__backward_done(mf_ctx *ctx, int i) {
    if (ctx->bw_hook) ctx->bw_hook(ctx, ctx->bw_hook_user, i);
}
/* Recycled activation gradients (mf_set_keep_activation_grads(ctx, 0)). Walking the tape
   backwards, an op's inputs get their gradient buffers just before its backward (the buffer an
   input shares, mf__grad_shared_src, or a free one, mf__gradbuf_take), and once the op is done its
   own gradient buffer goes back to the free ones, unless an input carries it on. A tensor no
   gradient reaches is skipped. On a device the kernels add into every input gradient, so a buffer
   is zeroed when taken (on the stream, after the op that freed it), except a shared one: the
   kernels skip an input whose buffer is the op's own gradient (add, sub, reshape) or turn it into
   dx in place (the unary ops). */
typedef struct { float *p; int64_t cap; int64_t freed; } mf__gradbuf; /* freed: 0 in use, else when */
typedef struct { mf__gradbuf *b; int n; int64_t clock; } mf__gradbufs;
/* A gradient buffer of ne floats: the smallest free one that holds them without doubling them (a
   transformer layer's q/k/v gradient then takes the FFN's wider one, freed just before), among
   equals the one freed last (the warmest); else a new one from the arena. */
static float *mf__gradbuf_take(mf_ctx *ctx, mf__gradbufs *g, int64_t ne) {
    int i, best = -1;
    for (i = 0; i < g->n; i++) {
        const mf__gradbuf *b = &g->b[i];
        if (!b->freed || b->cap < ne || b->cap / 2 > ne) continue;
        if (best < 0 || b->cap < g->b[best].cap || (b->cap == g->b[best].cap && b->freed > g->b[best].freed)) best = i;
    }
    if (best < 0) {
        float *p = (float *)mf__alloc_data(ctx, (size_t)ne * sizeof(float));
        if (!p) return NULL;
        best = g->n++;
        g->b[best].p = p; g->b[best].cap = ne;
    }
    g->b[best].freed = 0;
    return g->b[best].p;
}
static void mf__gradbuf_give(mf__gradbufs *g, const float *p) {
    int i;
    for (i = 0; i < g->n; i++)
        if (g->b[i].p == p) { g->b[i].freed = ++g->clock; return; }
}
/* a device's activation gradient zeroed (the CPU zeroes them lazily, in mf__backward_op), timed
   while profiling */
static int mf__dzero_grad(mf_ctx *ctx, mf_tensor *t) {
    mf__prof_mark m = {0, 0};
    int r;
    if (ctx->profile) m = mf__prof_begin(ctx);
    r = mf__dzero(ctx, t->grad, (size_t)t->ne * sizeof(float));
    if (ctx->profile) mf__prof_end(ctx, "zero_activation_grads", MF__PROF_OTHER, m);
    return r;
}
/* d loss / d loss = 1, on the loss's device */
static int mf__set_loss_grad(mf_ctx *ctx, mf_tensor *loss) {
    static const float one = 1.0f;
    loss->grad_pending = 0;
    if (ctx->be) return ctx->be->copy(ctx, loss->grad, &one, sizeof one, MF__H2D);
    loss->grad[0] = one;
    return 0;
}
static int mf__backward_recycling(mf_ctx *ctx, mf_tensor *loss, int end) {
    mf__gradbufs g;
    int i;
    g.n = 0; g.clock = 0;
    if (!(g.b = (mf__gradbuf *)mf__alloc(ctx, (size_t)(end + 2) * sizeof(mf__gradbuf)))) return -1;
    for (i = 0; i <= end; i++) ctx->tape[i]->grad = NULL;
    if (!(loss->grad = mf__gradbuf_take(ctx, &g, 1)) || mf__set_loss_grad(ctx, loss) < 0) return -1;
    for (i = end; i >= 0 && mf_ok(ctx); i--) {
        mf_tensor *t = ctx->tape[i];
        int k, share;
        if (!t->grad) { mf__backward_done(ctx, i); continue; }
        share = mf__grad_shared_src(ctx, t);
        for (k = 0; k < MF_MAX_SRC; k++) {
            mf_tensor *s = t->src[k];
            if (!s || !s->op || s->is_param || !s->requires_grad || s->grad) continue;
            if (k == share) s->grad = t->grad;
            else if (!(s->grad = mf__gradbuf_take(ctx, &g, s->ne))) return -1;
            else if (!ctx->be) s->grad_pending = 1;
            else if (mf__dzero_grad(ctx, s) < 0) return -1;
        }
        if (mf__backward_one(ctx, t) < 0) return -1;
        if (mf__grad_sharing(t) < 0) mf__gradbuf_give(&g, t->grad);
        t->grad = NULL;
        mf__backward_done(ctx, i);
    }
    return mf_ok(ctx) ? 0 : -1;
}
MFDEF int mf_backward(mf_ctx *ctx, mf_tensor *loss) {
    int i, end = -1;
    char s[64];
    if (!mf_ok(ctx)) return -1;
    if (!loss) return (mf__fail(ctx, "mf_backward: the loss is NULL"), -1);
    /* find the loss by address first: a tensor from before mf_reset must not be read */
    for (i = ctx->tape_len - 1; i >= 0; i--) if (ctx->tape[i] == loss) { end = i; break; }
    if (end < 0) {
        for (i = 0; i < ctx->n_params; i++)
            if (ctx->params[i] == loss)
                return (mf__fail(ctx, "mf_backward: the loss is the parameter \"%s\"; backward starts "
                                 "from a value computed by ops", loss->name), -1);
        return (mf__fail(ctx, "mf_backward: the loss is not on this context's tape: it depends on no "
                         "trainable parameter (made under mf_set_grad(ctx, 0) or from detached inputs), "
                         "or it was made before the last mf_reset or by another context"), -1);
    }
    if (loss->ne != 1)
        return (mf__fail(ctx, "mf_backward: the loss has shape %s; backward starts from one value "
                         "(reduce it with mf_sum or mf_mean)", mf_shape_str(loss, s, sizeof s)), -1);
    for (i = 0; i <= end; i++) ctx->tape[i]->n_uses = 0;
    for (i = 0; i <= end; i++) {
        int k;
        for (k = 0; k < MF_MAX_SRC; k++) if (ctx->tape[i]->src[k]) ctx->tape[i]->src[k]->n_uses++;
    }
    if (ctx->recycle_grads) return mf__backward_recycling(ctx, loss, end);
    for (i = 0; i <= end; i++) { /* fresh activation gradients */
        mf_tensor *t = ctx->tape[i];
        int k = ctx->be ? -1 : mf__grad_shared_src(ctx, t);
        if (k >= 0) t->grad = t->src[k]->grad; /* (allocated before: the input is earlier on the tape) */
        else if ((!t->grad || mf__grad_sharing(t) >= 0) && /* own buffer (also after a backward that shared) */
                 !(t->grad = (float *)mf__alloc_data(ctx, (size_t)t->ne * sizeof(float))))
            return -1;
        if (!ctx->be) t->grad_pending = 1; /* CPU: zeroed lazily below */
        else if (mf__dzero_grad(ctx, t) < 0) return -1;
    }
    if (mf__set_loss_grad(ctx, loss) < 0) return -1;
    for (i = end; i >= 0 && mf__backward_one(ctx, ctx->tape[i]) == 0; i--) mf__backward_done(ctx, i);
    return mf_ok(ctx) ? 0 : -1;
}

/* ==== [mf:gemm] ============================================================================= */
/* ======================================================================================
 * SGEMM engine (mf_sgemm, mf_sgemm_batched)
 *
 * Row-major C[M][N] = alpha * op(A)[M][K] @ op(B)[K][N] + beta * C  (+ bias[N] on every row:
 * internal, the linear layer's forward; added in the last K block's store, so C gets
 * (sum of the K blocks) + bias, rounded as a separate bias pass would).
 *
 * Design (BLIS / GotoBLAS):
 *   for jc over N in steps of NC            B block  (KC x NC) packed once per (jc, pc)
 *     for pc over K in steps of KC
 *       pack op(B)[pc:+KC][jc:+NC] -> NR-wide micro-panels  Bp[jr][p][0..NR)
 *       for ic over M in steps of MC        A block  (MC x KC) lives in L2
 *         pack op(A)[ic:+MC][pc:+KC] -> MR-tall micro-panels Ap[ir][p][0..MR)
 *         for jr over NC in steps of NR     B micro-panel (KC x NR) lives in L1
 *           for ir over MC in steps of MR
 *             microkernel: C[MR][NR] (+)= Ap[ir] @ Bp[jr]   (register tile)
 * Micro-panels are zero padded to MR / NR, so the kernel always runs a full tile and only
 * the store is masked (edge tiles).  The register tile is MR x NR accumulators:
 *   AVX-512 : 12 x 32 = 24 zmm accumulators + 2 B vectors + broadcasts (of 32 registers).
 *             14 x 32 left gcc one spare register, so it re-loaded B from memory for every
 *             FMA (load-port bound, ~76% of peak); 12 x 32 reaches ~97% of peak in L1, and
 *             measured as well as 8 x 48 / 6 x 64 while wasting less on N = 32 (attention).
 *             Ragged last row panels of <= 6 rows use a 6 x 32 variant.
 *   AVX2+FMA:  6 x 16 = 12 ymm accumulators + 2 B vectors + 1 broadcast (of 16)
 *   portable:  4 x 16 plain C, written so the compiler can vectorise the 16-wide rows.
 * Small products (M*N*K <= 256^3, AVX-512 only) take a direct path: A is read in place
 * (no transposing pack), B is packed unless it is row-major and tiny (then read in place).
 * Threads: a single large product is cut into a grid of C blocks (one per thread, each with
 * private packing buffers); batched products of small matrices give whole matrices to threads.
 * ====================================================================================== */

#if !defined(METAFORMER_NO_SIMD) && defined(__AVX512F__)
#define MF__GEMM_AVX512 1
#elif !defined(METAFORMER_NO_SIMD) && defined(__AVX2__) && defined(__FMA__)
#define MF__GEMM_AVX2 1
#endif
#if defined(MF__GEMM_AVX512) || defined(MF__GEMM_AVX2)
#include <immintrin.h>
#endif

/* Register tile (MR x NR) and cache blocks, tuned on a Xeon (Emerald Rapids) with L1d 48 KiB,
 * L2 2 MiB per core:
 *   KC = 512: the C tile is loaded and stored once per KC block; against 256, 2048^3 runs
 *             ~3% faster and the weight gradients (K = batch x tokens) ~2%, the benchmark's
 *             training step ~0.5% (interleaved runs). The B micro-panel KC x NR (64 KiB)
 *             then streams from L2 rather than sitting in L1; the L1 prefetchers keep up.
 *   MC = 168 (14 panels of 12): the packed A block MC x KC (336 KiB) stays in L2.
 *   NC = 1024: the packed B block KC x NC (2 MiB) lives in L2/L3; bounds the buffer.
 * (KC 192..384, MC 96..384, NC 1024/4096 measured within noise of each other alone.)
 * On an AMD EPYC (Zen 5: L1d 48 KiB, L2 1 MiB per core) KC 256 and 384 measured within noise of
 * 512 on the training step's shapes too, so one set of sizes serves both.  Threads keep private
 * packing buffers: one B block packed by both threads and shared (a barrier per block) measured
 * 0.89-0.98x on 2 threads there (each core then reads half the block from the other's cache),
 * and far slower when other processes take CPUs (a descheduled thread stalls its partner). */
#if defined(MF__GEMM_AVX512)
#define MF__GEMM_MR 12
#define MF__GEMM_NR 32
#ifndef MF__GEMM_KC
#define MF__GEMM_KC 512
#endif
#ifndef MF__GEMM_MC
#define MF__GEMM_MC 168
#endif
#ifndef MF__GEMM_NC
#define MF__GEMM_NC 1024
#endif
#ifndef MF__GEMM_DIRECT_MAX
#define MF__GEMM_DIRECT_MAX (256.0 * 256 * 256)
#endif
#elif defined(MF__GEMM_AVX2)
#define MF__GEMM_MR 6
#define MF__GEMM_NR 16
#define MF__GEMM_KC 256
#define MF__GEMM_MC 144
#define MF__GEMM_NC 2048
#else
#define MF__GEMM_MR 4
#define MF__GEMM_NR 16
#define MF__GEMM_KC 256
#define MF__GEMM_MC 128
#define MF__GEMM_NC 2048
#endif

/* ---------------------------------------------------------------- microkernels --- */

/* Kernels are kept out of line: inlined into the blocking loops, gcc runs out of vector
   registers (it hoists alpha/beta broadcasts) and spills the B vectors inside the k loop. */
#if defined(__GNUC__)
#define MF__GEMM_NOINLINE __attribute__((noinline))
#elif defined(_MSC_VER)
#define MF__GEMM_NOINLINE __declspec(noinline)
#else
#define MF__GEMM_NOINLINE
#endif

#if defined(MF__GEMM_AVX512)

/* c[0..16) (masked by m) = alpha * v + beta * c (+ bias[0..16)) */
static void mf__gemm_st16(float *c, __m512 v, float alpha, float beta, __mmask16 m, const float *bias)
{
    v = _mm512_mul_ps(v, _mm512_set1_ps(alpha));
    if (beta != 0.0f)
        v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, c), _mm512_set1_ps(beta), v);
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias));
    _mm512_mask_storeu_ps(c, m, v);
}

/* column masks of an nr-wide tile: lanes [0, 16) and [16, 32) */
static __mmask16 mf__gemm_mask(int nr, int lo)
{
    return (__mmask16)(nr >= lo + 16 ? 0xFFFFu : nr > lo ? (1u << (nr - lo)) - 1u : 0u);
}

#define MF__K_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define MF__K_DECL(i) __m512 c##i##_0 = _mm512_setzero_ps(), c##i##_1 = _mm512_setzero_ps();
#define MF__K_FMA(i, x) { __m512 ai = _mm512_set1_ps(x); \
    c##i##_0 = _mm512_fmadd_ps(ai, b0, c##i##_0); c##i##_1 = _mm512_fmadd_ps(ai, b1, c##i##_1); }
#define MF__K_FMA_PACKED(i) MF__K_FMA(i, a[i])
/* both cache lines of each C row of the tile: a product's output is usually memory the step
   last touched long ago, and its read-for-ownership misses would otherwise stall the stores
   (cold 2048 x 1024 outputs ran ~20% slower with only the first line prefetched) */
#define MF__K_PF(i) if (i < mr) { _mm_prefetch((const char *)(c + (long)i * ldc), _MM_HINT_T0); \
    _mm_prefetch((const char *)(c + (long)i * ldc + 16), _MM_HINT_T0); }
#define MF__K_ST(i) if (i < mr) { mf__gemm_st16(c + (long)i * ldc, c##i##_0, alpha, beta, m0, bias); \
    if (m1) mf__gemm_st16(c + (long)i * ldc + 16, c##i##_1, alpha, beta, m1, bias ? bias + 16 : NULL); }

/* Ragged row panels of at most 6 rows: a 6 x 32 tile halves the wasted work of the last
   panel (64 = 5 x 12 + 4).  Strided like the direct kernel below: A(i, p) = a[i*rsa + p*csa],
   B(p, j) = b[p*rsb + j] (nr columns, masked loads); packed panels use (1, 12, 32). */
#define MF__K_ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define MF__K_FMA_DIRECT(i) MF__K_FMA(i, a##i)
static MF__GEMM_NOINLINE void mf__gemm_kernel6(int kc, const float *a, long rsa, long csa,
                                               const float *b, long rsb, float *c, long ldc,
                                               float alpha, float beta, int mr, int nr, const float *bias)
{
    __mmask16 m0 = mf__gemm_mask(nr, 0), m1 = mf__gemm_mask(nr, 16);
    /* rows past mr repeat row mr-1: never read past the end of an unpacked A */
    long o1 = (mr > 1 ? 1 : 0) * rsa, o2 = (mr > 2 ? 2 : mr - 1) * rsa, o3 = (mr > 3 ? 3 : mr - 1) * rsa;
    long o4 = (mr > 4 ? 4 : mr - 1) * rsa, o5 = (mr > 5 ? 5 : mr - 1) * rsa;
    int p;
    MF__K_ROWS6(MF__K_DECL)
    MF__K_ROWS6(MF__K_PF)
    for (p = 0; p < kc; ++p) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
        float a0 = a[0], a1 = a[o1], a2 = a[o2], a3 = a[o3], a4 = a[o4], a5 = a[o5];
        MF__K_ROWS6(MF__K_FMA_DIRECT)
        a += csa;
        b += rsb;
    }
    MF__K_ROWS6(MF__K_ST)
}
#undef MF__K_ROWS6

/* C[mr][nr] = alpha * Ap[12][kc] @ Bp[kc][32] + beta * C (+ bias[nr] when not NULL)  (mr <= 12, nr <= 32)
   a: packed A micro-panel, a[p*12 + i];  b: packed B micro-panel, b[p*32 + j]. */
static MF__GEMM_NOINLINE void mf__gemm_kernel(int kc, const float *a, const float *b, float *c, long ldc,
                            float alpha, float beta, int mr, int nr, const float *bias)
{
    __mmask16 m0, m1;
    int p;
    if (mr <= 6) { mf__gemm_kernel6(kc, a, 1, 12, b, 32, c, ldc, alpha, beta, mr, nr, bias); return; }
    m0 = mf__gemm_mask(nr, 0);
    m1 = mf__gemm_mask(nr, 16);
    MF__K_ROWS(MF__K_DECL)
    MF__K_ROWS(MF__K_PF)
    for (p = 0; p < kc; ++p) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        MF__K_ROWS(MF__K_FMA_PACKED)
        a += 12;
        b += 32;
    }
    MF__K_ROWS(MF__K_ST)
}

/* Unpacked variant for small products: all 12 rows of A and nr columns of B read in place.
   A(i, p) = a[i*rsa + p*csa] (rows are taken as 4 groups of 3 so the addresses are
   base + {0,1,2}*rsa);  B(p, j) = b[p*rsb + j], the nr <= 32 columns loaded with masks.
   Only the first mr rows of C are stored (the caller packs a ragged last panel of A). */
static MF__GEMM_NOINLINE void mf__gemm_kernel_direct(int kc, const float *a, long rsa, long csa, const float *b, long rsb,
                                   float *c, long ldc, float alpha, float beta, int mr, int nr,
                                   const float *bias)
{
    __mmask16 m0 = mf__gemm_mask(nr, 0), m1 = mf__gemm_mask(nr, 16);
    const float *g0 = a, *g1 = a + 3 * rsa, *g2 = a + 6 * rsa, *g3 = a + 9 * rsa;
    int p;
    MF__K_ROWS(MF__K_DECL)
    MF__K_ROWS(MF__K_PF)
    for (p = 0; p < kc; ++p) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
        float a0 = g0[0], a1 = g0[rsa], a2 = g0[2 * rsa], a3 = g1[0], a4 = g1[rsa], a5 = g1[2 * rsa];
        float a6 = g2[0], a7 = g2[rsa], a8 = g2[2 * rsa], a9 = g3[0], a10 = g3[rsa], a11 = g3[2 * rsa];
        MF__K_ROWS(MF__K_FMA_DIRECT)
        g0 += csa; g1 += csa; g2 += csa; g3 += csa;
        b += rsb;
    }
    MF__K_ROWS(MF__K_ST)
}
#define MF__GEMM_HAVE_DIRECT 1
#undef MF__K_ROWS
#undef MF__K_DECL
#undef MF__K_FMA
#undef MF__K_FMA_PACKED
#undef MF__K_FMA_DIRECT
#undef MF__K_PF
#undef MF__K_ST

#elif defined(MF__GEMM_AVX2)

static void mf__gemm_st8(float *c, __m256 v, float alpha, float beta, int n, const float *bias)
{
    v = _mm256_mul_ps(v, _mm256_set1_ps(alpha));
    if (n >= 8) {
        if (beta != 0.0f) v = _mm256_fmadd_ps(_mm256_loadu_ps(c), _mm256_set1_ps(beta), v);
        if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias));
        _mm256_storeu_ps(c, v);
    } else {
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        if (beta != 0.0f) v = _mm256_fmadd_ps(_mm256_maskload_ps(c, m), _mm256_set1_ps(beta), v);
        if (bias) v = _mm256_add_ps(v, _mm256_maskload_ps(bias, m));
        _mm256_maskstore_ps(c, m, v);
    }
}

#define MF__K_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define MF__K_DECL(i) __m256 c##i##_0 = _mm256_setzero_ps(), c##i##_1 = _mm256_setzero_ps();
#define MF__K_FMA(i) { __m256 ai = _mm256_broadcast_ss(a + i); \
    c##i##_0 = _mm256_fmadd_ps(ai, b0, c##i##_0); c##i##_1 = _mm256_fmadd_ps(ai, b1, c##i##_1); }
#define MF__K_ST(i) if (i < mr) { mf__gemm_st8(c + (long)i * ldc, c##i##_0, alpha, beta, nr, bias); \
    if (nr > 8) mf__gemm_st8(c + (long)i * ldc + 8, c##i##_1, alpha, beta, nr - 8, bias ? bias + 8 : NULL); }

/* C[mr][nr] = alpha * Ap[6][kc] @ Bp[kc][16] + beta * C (+ bias[nr])  (mr <= 6, nr <= 16) */
static MF__GEMM_NOINLINE void mf__gemm_kernel(int kc, const float *a, const float *b, float *c, long ldc,
                            float alpha, float beta, int mr, int nr, const float *bias)
{
    int p;
    MF__K_ROWS(MF__K_DECL)
    for (p = 0; p < kc; ++p) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        MF__K_ROWS(MF__K_FMA)
        a += 6;
        b += 16;
    }
    MF__K_ROWS(MF__K_ST)
}
#undef MF__K_ROWS
#undef MF__K_DECL
#undef MF__K_FMA
#undef MF__K_ST

#else

/* portable: C[mr][nr] = alpha * Ap[4][kc] @ Bp[kc][16] + beta * C (+ bias[nr])  (mr <= 4, nr <= 16) */
static MF__GEMM_NOINLINE void mf__gemm_kernel(int kc, const float *a, const float *b, float *c, long ldc,
                            float alpha, float beta, int mr, int nr, const float *bias)
{
    float acc[4][16];
    int i, j, p;
    for (i = 0; i < 4; ++i)
        for (j = 0; j < 16; ++j) acc[i][j] = 0.0f;
    for (p = 0; p < kc; ++p, a += 4, b += 16)
        for (i = 0; i < 4; ++i) {
            float ai = a[i];
            for (j = 0; j < 16; ++j) acc[i][j] += ai * b[j];
        }
    for (i = 0; i < mr; ++i) {
        float *ci = c + (long)i * ldc;
        if (beta == 0.0f)
            for (j = 0; j < nr; ++j) ci[j] = alpha * acc[i][j];
        else
            for (j = 0; j < nr; ++j) ci[j] = alpha * acc[i][j] + beta * ci[j];
        if (bias)
            for (j = 0; j < nr; ++j) ci[j] += bias[j];
    }
}

#endif

/* ------------------------------------------------------------------- packing --- */

/* dst[p][0..R) = src[i*rs + p*cs] for i < r, zero for r <= i < R;  p < kc.
   Case rs == 1: rows of dst are contiguous in src (a copy).  Otherwise cs == 1 (transpose). */
static void mf__gemm_pack_copy(const float *src, long cs, int r, int R, int kc, float *dst)
{
    int p, i;
    for (p = 0; p < kc; ++p, src += cs, dst += R) {
        if (r == R) {
            memcpy(dst, src, (size_t)R * sizeof(float));
        } else {
            for (i = 0; i < r; ++i) dst[i] = src[i];
            for (; i < R; ++i) dst[i] = 0.0f;
        }
    }
}

#if defined(MF__GEMM_AVX512)
/* In-register transpose of a 16 x 16 block.  (The all-ones maskz forms avoid g++'s bogus
   -Wuninitialized on _mm512_undefined_ps inside the unmasked intrinsics.) */
#define MF__ALL16 ((__mmask16)0xFFFF)
static void mf__gemm_tr16(__m512 *r)
{
    __m512 t[16];
    int i;
    for (i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_maskz_unpacklo_ps(MF__ALL16, r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_maskz_unpackhi_ps(MF__ALL16, r[2 * i], r[2 * i + 1]);
    }
    for (i = 0; i < 4; ++i) {
        r[4 * i + 0] = _mm512_maskz_shuffle_ps(MF__ALL16, t[4 * i + 0], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_maskz_shuffle_ps(MF__ALL16, t[4 * i + 0], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_maskz_shuffle_ps(MF__ALL16, t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_maskz_shuffle_ps(MF__ALL16, t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (i = 0; i < 4; ++i) {
        t[i + 0] = _mm512_maskz_shuffle_f32x4(MF__ALL16, r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_maskz_shuffle_f32x4(MF__ALL16, r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_maskz_shuffle_f32x4(MF__ALL16, r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_maskz_shuffle_f32x4(MF__ALL16, r[i + 8], r[i + 12], 0xDD);
    }
    for (i = 0; i < 8; ++i) {
        r[i] = _mm512_maskz_shuffle_f32x4(MF__ALL16, t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_maskz_shuffle_f32x4(MF__ALL16, t[i], t[i + 8], 0xDD);
    }
}
#endif

/* dst[p][0..R) = src[i*rs + p] (i < r, zero padded to R), p < kc: a transposing pack. */
static void mf__gemm_pack_tr(const float *src, long rs, int r, int R, int kc, float *dst)
{
    int p = 0, i;
#if defined(MF__GEMM_AVX512)
    for (; p + 16 <= kc; p += 16) {
        int g;
        for (g = 0; g < R; g += 16) {
            __m512 v[16];
            int w = R - g < 16 ? R - g : 16;
            __mmask16 m = (__mmask16)((1u << w) - 1u);
            for (i = 0; i < 16; ++i)
                v[i] = g + i < r ? _mm512_loadu_ps(src + (long)(g + i) * rs + p) : _mm512_setzero_ps();
            mf__gemm_tr16(v);
            for (i = 0; i < 16; ++i) _mm512_mask_storeu_ps(dst + (long)(p + i) * R + g, m, v[i]);
        }
    }
#endif
    for (; p < kc; ++p) {
        float *d = dst + (long)p * R;
        for (i = 0; i < r; ++i) d[i] = src[(long)i * rs + p];
        for (; i < R; ++i) d[i] = 0.0f;
    }
}

/* Pack an mc x kc block of a matrix X whose element (i, p) is X[i*rs + p*cs] into
   ceil(mc/R) micro-panels of R x kc (panel q at dst + q*R*kc, layout [p][R]). */
static void mf__gemm_pack(const float *X, long rs, long cs, int mc, int kc, int R, float *dst)
{
    int i;
    for (i = 0; i < mc; i += R) {
        int r = mc - i < R ? mc - i : R;
        if (rs == 1)
            mf__gemm_pack_copy(X + i, cs, r, R, kc, dst);
        else
            mf__gemm_pack_tr(X + (long)i * rs, rs, r, R, kc, dst);
        dst += (long)R * kc;
    }
}

/* ------------------------------------------------------------ single thread --- */

static long mf__gemm_min(long a, long b) { return a < b ? a : b; }

/* floats needed by the packing buffers of one thread for an M x N x K product */
static long mf__gemm_bufA_len(int M, int K)
{
    long mc = mf__gemm_min(MF__GEMM_MC, M);
    mc = (mc + MF__GEMM_MR - 1) / MF__GEMM_MR * MF__GEMM_MR;
    return mc * mf__gemm_min(MF__GEMM_KC, K);
}
static long mf__gemm_bufB_len(int N, int K)
{
    long nc = mf__gemm_min(MF__GEMM_NC, N);
    nc = (nc + MF__GEMM_NR - 1) / MF__GEMM_NR * MF__GEMM_NR;
    return nc * mf__gemm_min(MF__GEMM_KC, K);
}

/* C = beta * C (+ bias on every row) for an M x N block (beta == 0 writes zeros without reading C) */
static void mf__gemm_scale(int M, int N, float beta, float *C, int ldc, const float *bias)
{
    int i, j;
    for (i = 0; i < M; ++i) {
        float *c = C + (long)i * ldc;
        if (beta == 0.0f)
            for (j = 0; j < N; ++j) c[j] = 0.0f;
        else if (beta != 1.0f)
            for (j = 0; j < N; ++j) c[j] *= beta;
        if (bias)
            for (j = 0; j < N; ++j) c[j] += bias[j];
    }
}

#if defined(MF__GEMM_HAVE_DIRECT)
/* Product for small sizes (see mf__gemm_use_direct): op(B) is packed per KC block (cheap,
   and it keeps the B strip free of cache-set conflicts), A is read in place by the direct
   kernel, so the transposing A pack (~20% of a 64^3 product) is skipped; only a ragged last
   row panel of A is packed.  Loop order jr -> ir keeps the kc x NR strip of B in L1. */
static void mf__gemm_direct(int transA, int transB, int M, int N, int K, float alpha,
                            const float *A, int lda, const float *B, int ldb,
                            float beta, float *C, int ldc, const float *bias, float *bufA, float *bufB)
{
    long ars = transA ? 1 : lda, acs = transA ? lda : 1;
    long brs = transB ? 1 : ldb, bcs = transB ? ldb : 1;
    int pc, jr, ir, m_full = M / MF__GEMM_MR * MF__GEMM_MR;
    /* a tiny row-major B (<= 32 KiB) stays in L1 as it is: read it in place as well */
    int b_in_place = !transB && (long)K * N <= 8192;
    for (pc = 0; pc < K; pc += MF__GEMM_KC) {
        int kc = (int)mf__gemm_min(MF__GEMM_KC, K - pc);
        float beta_eff = pc == 0 ? beta : 1.0f;
        const float *Ap = A + pc * acs, *bias_eff = pc + kc >= K ? bias : NULL; /* the last K block */
        if (!b_in_place) mf__gemm_pack(B + pc * brs, bcs, brs, N, kc, MF__GEMM_NR, bufB);
        if (M - m_full > 6) mf__gemm_pack(Ap + m_full * ars, ars, acs, M - m_full, kc, MF__GEMM_MR, bufA);
        for (jr = 0; jr < N; jr += MF__GEMM_NR) {
            int nr = (int)mf__gemm_min(MF__GEMM_NR, N - jr);
            const float *bp = b_in_place ? B + (long)pc * ldb + jr : bufB + (long)jr * kc;
            long rsb = b_in_place ? ldb : MF__GEMM_NR;
            float *cp = C + jr;
            const float *bj = bias_eff ? bias_eff + jr : NULL;
            for (ir = 0; ir < m_full; ir += MF__GEMM_MR)
                mf__gemm_kernel_direct(kc, Ap + ir * ars, ars, acs, bp, rsb, cp + (long)ir * ldc, ldc,
                                       alpha, beta_eff, MF__GEMM_MR, nr, bj);
            if (M - m_full > 6)
                mf__gemm_kernel_direct(kc, bufA, 1, MF__GEMM_MR, bp, rsb, cp + (long)m_full * ldc, ldc,
                                       alpha, beta_eff, M - m_full, nr, bj);
            else if (m_full < M)  /* 6 rows or fewer: read them in place */
                mf__gemm_kernel6(kc, Ap + m_full * ars, ars, acs, bp, rsb, cp + (long)m_full * ldc, ldc,
                                 alpha, beta_eff, M - m_full, nr, bj);
        }
    }
}
#endif

/* Small products skip the A packing: everything fits in L1/L2 and packing would cost a
   sizeable fraction of the arithmetic.  (bufA needs MR x KC, bufB KC x N.) */
#if defined(MF__GEMM_HAVE_DIRECT)
static int mf__gemm_use_direct(int M, int N, int K)
{
    return N <= MF__GEMM_NC && (double)M * N * K <= MF__GEMM_DIRECT_MAX;
}
#endif

/* sums[i] += the row sums of the packed panel rows [0, r) (layout [p][R], p < kc), each sum in
   order of p: rows continued over the K blocks add up exactly as one pass over the row would */
static void mf__gemm_panel_rowsum(const float *panel, int r, int kc, float *sums)
{
    float acc[MF__GEMM_MR];
    int p, i;
    for (i = 0; i < MF__GEMM_MR; ++i) acc[i] = i < r ? sums[i] : 0.0f;
    for (p = 0; p < kc; ++p, panel += MF__GEMM_MR)
        for (i = 0; i < MF__GEMM_MR; ++i) acc[i] += panel[i];
    for (i = 0; i < r; ++i) sums[i] = acc[i];
}
/* sums[i] += sum over p of op(A)(i, p), in order of p: for the paths that do not pack A */
static void mf__gemm_rowsum(long ars, long acs, int M, int K, const float *A, float *sums)
{
    int i, p;
    if (ars == 1) { /* rows are columns of A: walk A's rows, every sum still in order of p */
        for (p = 0; p < K; ++p)
            for (i = 0; i < M; ++i) sums[i] += A[(long)p * acs + i];
    } else {
        for (i = 0; i < M; ++i)
            for (p = 0; p < K; ++p) sums[i] += A[(long)i * ars + p];
    }
}

static uint16_t mf__bf16_round(float f);
static float mf__bf16_float(uint16_t h);
/* x[0..n) rounded to bf16 (mf__bf16_round, 16 or 8 at a time with the engine's SIMD) into the upper
   halves of yf (floats holding bf16 values: the packed panels of a bf16 product on the fp32 kernels,
   MF_BF16_FMA) or into yh (bf16 values: [mf:bf16]'s packing); yf may be x */
static void mf__bf16_round_n(const float *x, float *yf, uint16_t *yh, long n)
{
    long i = 0;
#if defined(MF__GEMM_AVX512)
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), hi = _mm512_set1_epi32((int)0xffff0000u);
    const __m512i quiet = _mm512_set1_epi32(0x400000);
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_loadu_si512((const void *)(x + i));
        __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs), inf);
        /* (the maskz forms: the plain ones start from an undefined register, which g++ -O1 warns of) */
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(_mm512_maskz_srli_epi32(0xffff, u, 16), one)));
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, quiet));
        if (yf) _mm512_storeu_si512((void *)(yf + i), _mm512_and_si512(r, hi));
        else _mm256_storeu_si256((__m256i *)(void *)(yh + i), _mm512_maskz_cvtepi32_epi16(0xffff, _mm512_maskz_srli_epi32(0xffff, r, 16)));
    }
#elif defined(MF__GEMM_AVX2)
    const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), hi = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i quiet = _mm256_set1_epi32(0x400000);
    for (; yf && i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(x + i));
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
        r = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan);
        _mm256_storeu_si256((__m256i *)(void *)(yf + i), _mm256_and_si256(r, hi));
    }
#endif
    for (; i < n; i++) {
        uint16_t b = mf__bf16_round(x[i]);
        if (yf) yf[i] = mf__bf16_float(b);
        else yh[i] = b;
    }
}

/* One thread, blocked product (+ bias[N] on every row when not NULL); bufA / bufB hold
   mf__gemm_bufA_len / _bufB_len floats. When rowsA is not NULL, also rowsA[i] += sum over p of
   op(A)(i, p), summed in order of p, for M rows: the packing of A has every element in L1 once
   (the bias gradient of a linear layer, dW = dy^T x, without another pass over dy). bf16: the
   packed panels are rounded to bf16 (mf__bf16_round_n; the row sums come from A as it is), and the
   direct path, which reads A in place, is not taken. */
static void mf__gemm_st(int transA, int transB, int M, int N, int K, float alpha,
                        const float *A, int lda, const float *B, int ldb,
                        float beta, float *C, int ldc, const float *bias, float *bufA, float *bufB,
                        float *rowsA, int bf16)
{
    /* element (i, p) of op(A) is A[i*ars + p*acs]; element (p, j) of op(B) is B[p*brs + j*bcs] */
    long ars = transA ? 1 : lda, acs = transA ? lda : 1;
    long brs = transB ? 1 : ldb, bcs = transB ? ldb : 1;
    int jc, pc, ic, jr, ir;
    if (M <= 0 || N <= 0) return;
    if (rowsA && (K <= 0 || alpha == 0.0f
#if defined(MF__GEMM_HAVE_DIRECT)
                  || (!bf16 && mf__gemm_use_direct(M, N, K))
#endif
                  )) {
        mf__gemm_rowsum(ars, acs, M, K, A, rowsA);
        rowsA = NULL;
    }
    if (K <= 0 || alpha == 0.0f) { mf__gemm_scale(M, N, beta, C, ldc, bias); return; }
#if defined(MF__GEMM_HAVE_DIRECT)
    if (!bf16 && mf__gemm_use_direct(M, N, K)) {
        mf__gemm_direct(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, bufA, bufB);
        return;
    }
#endif
    for (jc = 0; jc < N; jc += MF__GEMM_NC) {
        int nc = (int)mf__gemm_min(MF__GEMM_NC, N - jc);
        for (pc = 0; pc < K; pc += MF__GEMM_KC) {
            int kc = (int)mf__gemm_min(MF__GEMM_KC, K - pc);
            float beta_eff = pc == 0 ? beta : 1.0f;
            const float *bias_eff = pc + kc >= K ? bias : NULL; /* the last K block */
            /* op(B) block rows pc.., cols jc..: as panels of NR columns, i.e. a matrix whose
               row j is column j of op(B): element (j, p) = B[p*brs + j*bcs] */
            mf__gemm_pack(B + pc * brs + jc * bcs, bcs, brs, nc, kc, MF__GEMM_NR, bufB);
            if (bf16) mf__bf16_round_n(bufB, bufB, NULL, (nc + MF__GEMM_NR - 1) / MF__GEMM_NR * MF__GEMM_NR * (long)kc);
            for (ic = 0; ic < M; ic += MF__GEMM_MC) {
                int mc = (int)mf__gemm_min(MF__GEMM_MC, M - ic);
                mf__gemm_pack(A + ic * ars + pc * acs, ars, acs, mc, kc, MF__GEMM_MR, bufA);
                if (rowsA && jc == 0)
                    for (ir = 0; ir < mc; ir += MF__GEMM_MR)
                        mf__gemm_panel_rowsum(bufA + (long)ir * kc, (int)mf__gemm_min(MF__GEMM_MR, mc - ir), kc,
                                              rowsA + ic + ir);
                if (bf16) mf__bf16_round_n(bufA, bufA, NULL, (mc + MF__GEMM_MR - 1) / MF__GEMM_MR * MF__GEMM_MR * (long)kc);
                for (jr = 0; jr < nc; jr += MF__GEMM_NR) {
                    int nr = (int)mf__gemm_min(MF__GEMM_NR, nc - jr);
                    const float *bp = bufB + (long)jr * kc;
                    for (ir = 0; ir < mc; ir += MF__GEMM_MR) {
                        int mr = (int)mf__gemm_min(MF__GEMM_MR, mc - ir);
                        mf__gemm_kernel(kc, bufA + (long)ir * kc, bp, C + (long)(ic + ir) * ldc + jc + jr, ldc,
                                        alpha, beta_eff, mr, nr, bias_eff ? bias_eff + jc + jr : NULL);
                    }
                }
            }
        }
    }
}

/* ---------------------------------------------------------------- public API --- */

static int mf__gemm_threads(int n_threads)
{
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
    if (n_threads <= 0) n_threads = omp_get_max_threads();
#else
    n_threads = 1;
#endif
    return n_threads < 1 ? 1 : n_threads;
}

/* 64-byte aligned view of a MF_MALLOC block (allocate 16 extra floats) */
static float *mf__gemm_align(void *p)
{
    return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
/* Split an M x N product over nt threads as a tm x tn grid of C blocks: give threads to
   the dimension with more register tiles, so each block stays as square as possible. */
static void mf__gemm_grid(int M, int N, int nt, int *tm, int *tn)
{
    int best_m = 1, d;
    double best = -1.0;
    for (d = 1; d <= nt; ++d) {
        double bm, bn, score;
        if (nt % d) continue;
        bm = (double)M / d;
        bn = (double)N / (nt / d);
        score = bm < bn ? bm / bn : bn / bm;  /* 1 = square blocks */
        if (score > best) { best = score; best_m = d; }
    }
    *tm = best_m;
    *tn = nt / best_m;
}

/* rows [*lo, *hi) of part t of n: parts are multiples of `unit` */
static void mf__gemm_part(int n, int parts, int t, int unit, int *lo, int *hi)
{
    int units = (n + unit - 1) / unit;
    int u0 = (int)((long)units * t / parts), u1 = (int)((long)units * (t + 1) / parts);
    *lo = (int)mf__gemm_min((long)u0 * unit, n);
    *hi = (int)mf__gemm_min((long)u1 * unit, n);
}
#endif

/* Floats of scratch one call needs for n_threads: per-thread packing buffers + alignment.
   The ops pass a workspace kept by the context, so a training step does not allocate. */
static long mf__gemm_ws_floats(int M, int N, int K, int n_threads)
{
    return (mf__gemm_bufA_len(M, K) + mf__gemm_bufB_len(N, K) + 31) / 16 * 16 * mf__gemm_threads(n_threads) + 16;
}

/* mf_sgemm (+ bias[N] on every row when not NULL) with an optional workspace of
   mf__gemm_ws_floats() floats (NULL: allocate one); rowsA, bf16: see mf__gemm_st (NULL, 0: none) */
static void mf__sgemm_bias_ws(int transA, int transB, int M, int N, int K, float alpha,
                              const float *A, int lda, const float *B, int ldb,
                              float beta, float *C, int ldc, const float *bias, int n_threads, float *ws,
                              float *rowsA, int bf16)
{
    int nt = mf__gemm_threads(n_threads);
    double flops = 2.0 * M * N * K;
    long la, lb, per;
    void *mem = NULL;
    float *buf;
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        if (rowsA) mf__gemm_rowsum(transA ? 1 : lda, transA ? lda : 1, M, K, A, rowsA);
        mf__gemm_scale(M, N, beta, C, ldc, bias);
        return;
    }
    /* below ~2 MFLOP per thread the fork/join costs more than it saves */
    if (nt > 1 && flops < 2.0e6 * nt) nt = (int)(flops / 2.0e6) < 1 ? 1 : (int)(flops / 2.0e6);
    if (nt > 1 && (M + MF__GEMM_MR - 1) / MF__GEMM_MR * ((N + MF__GEMM_NR - 1) / MF__GEMM_NR) < nt) nt = 1;
    la = mf__gemm_bufA_len(M, K);
    lb = mf__gemm_bufB_len(N, K);
    per = (la + lb + 31) / 16 * 16;
    if (!ws && !(mem = MF_MALLOC((size_t)(per * nt + 16) * sizeof(float)))) return;
    buf = mf__gemm_align(ws ? (void *)ws : mem);
    if (nt == 1) {
        mf__gemm_st(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, buf, buf + la, rowsA, bf16);
    } else {
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
        int tm, tn;
        mf__gemm_grid(M, N, nt, &tm, &tn);
#pragma omp parallel num_threads(nt)
        {
            int t = omp_get_thread_num(), m0, m1, n0, n1;
            float *bA = buf + per * t, *bB = bA + la;
            mf__gemm_part(M, tm, t / tn, MF__GEMM_MR, &m0, &m1);
            mf__gemm_part(N, tn, t % tn, MF__GEMM_NR, &n0, &n1);
            if (omp_get_num_threads() < nt) { /* a nested region got fewer threads: the whole grid */
                m0 = n0 = 0;
                m1 = t == 0 ? M : 0;
                n1 = N;
            }
            if (m1 > m0 && n1 > n0) /* the row sums of A: by the first block of each block row */
                mf__gemm_st(transA, transB, m1 - m0, n1 - n0, K, alpha,
                            transA ? A + m0 : A + (long)m0 * lda, lda,
                            transB ? B + (long)n0 * ldb : B + n0, ldb,
                            beta, C + (long)m0 * ldc + n0, ldc, bias ? bias + n0 : NULL, bA, bB,
                            rowsA && t % tn == 0 ? rowsA + m0 : NULL, bf16);
        }
#endif
    }
    MF_FREE(mem);
}
static void mf__sgemm_ws(int transA, int transB, int M, int N, int K, float alpha,
                         const float *A, int lda, const float *B, int ldb,
                         float beta, float *C, int ldc, int n_threads, float *ws, int bf16)
{
    mf__sgemm_bias_ws(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, n_threads, ws, NULL, bf16);
}

static void mf__sgemm_batched_ws(int transA, int transB, int M, int N, int K, float alpha,
                    const float *A, int lda, long long strideA, const float *B, int ldb, long long strideB,
                    float beta, float *C, int ldc, long long strideC, int batch, int n_threads, float *ws, int bf16)
{
    int nt = mf__gemm_threads(n_threads), b;
    double flops = 2.0 * M * N * K;
    if (batch <= 0 || M <= 0 || N <= 0) return;
    /* Whole matrices per thread when there are enough of them and each is small enough
       that splitting it would waste the fork/join and the duplicated packing. */
    if (nt > 1 && batch > 1 && (batch >= 4 * nt || batch % nt == 0 || flops < 2.0e7)) {
        long la = mf__gemm_bufA_len(M, K), lb = mf__gemm_bufB_len(N, K);
        long per = (la + lb + 31) / 16 * 16;
        void *mem = NULL;
        float *buf;
        if (nt > batch) nt = batch;
        if (!ws && !(mem = MF_MALLOC((size_t)(per * nt + 16) * sizeof(float)))) return;
        buf = mf__gemm_align(ws ? (void *)ws : mem);
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
        for (b = 0; b < batch; ++b) {
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
            float *bA = buf + per * omp_get_thread_num();
#else
            float *bA = buf;
#endif
            mf__gemm_st(transA, transB, M, N, K, alpha, A + strideA * b, lda, B + strideB * b, ldb,
                        beta, C + strideC * b, ldc, NULL, bA, bA + la, NULL, bf16);
        }
        MF_FREE(mem);
        return;
    }
    for (b = 0; b < batch; ++b)
        mf__sgemm_ws(transA, transB, M, N, K, alpha, A + strideA * b, lda, B + strideB * b, ldb,
                     beta, C + strideC * b, ldc, nt, ws, bf16);
}

MFDEF void mf_sgemm(int transA, int transB, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc, int n_threads)
{
    mf__sgemm_ws(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, n_threads, NULL, 0);
}

MFDEF void mf_sgemm_batched(int transA, int transB, int M, int N, int K, float alpha,
                    const float *A, int lda, long long strideA, const float *B, int ldb, long long strideB,
                    float beta, float *C, int ldc, long long strideC, int batch, int n_threads)
{
    mf__sgemm_batched_ws(transA, transB, M, N, K, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                         strideC, batch, n_threads, NULL, 0);
}
/* ==== [mf:gemm-end] ========================================================================= */

/* ==== [mf:bf16] ============================================================================= */
/* bf16 products on the CPU (docs/math.md §22.5): C = alpha op(A) op(B) + beta C with A and B rounded
   to bf16 (round to nearest even) while they are packed, every product and sum in fp32. One blocked
   driver (the fp32 engine's loops: NC columns of B, KC of K, MC rows of A, per-thread packing
   buffers, a grid of C blocks over the threads) and three kernels for its inner 12 x 32 or 32 x 32
   blocks of C:
     MF_BF16_AMX       Intel AMX: tdpbf16ps on 16 x 16 fp32 tiles; a 32 x 32 block of C in four
                       tiles, A and B in two tiles each, K 32 at a time. Linux grants a process the
                       tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM, mf__bf16_detect).
     MF_BF16_AVX512    AVX512-BF16 (Intel Cooper Lake and later, AMD Zen 4 and later): vdpbf16ps, a
                       12 x 32 block in 24 zmm accumulators, K two at a time.
     MF_BF16_FMA       not a kernel of this section: the fp32 engine ([mf:gemm]) with its packed panels
                       rounded to bf16 (mf__bf16_round_n). The product of two bf16 values is exact in
                       fp32, so each FMA adds it with one rounding, as tdpbf16ps does, in the same
                       order (K ascending): bit for bit the emulated AMX kernel's results where the
                       two block K alike. At fp32's speed on any CPU, which on a CPU whose vdpbf16ps
                       issues at half the FMA rate is twice MF_BF16_AVX512's.
     MF_BF16_PORTABLE  plain C on any CPU: vdpbf16ps's arithmetic one lane at a time (the odd pair's
                       product added first, then the even one's, each sum rounded; denormal inputs
                       and results flushed to zero); several times slower than the fp32 engine.
     MF_BF16_AMX_EMU   the AMX kernel's own code on a plain-C emulation of the tile unit (tile
                       configuration checked, strided loads and stores, tdpbf16ps's pairing): its
                       logic runs and is tested on a CPU without AMX. Slow.
   Both x86 kernels are compiled with target attributes whatever -march says and chosen at run time
   (cpuid), so one binary runs on every x86-64. Packing: B as panels of 32 columns, K in pairs
   ([k/2][32][2], what vdpbf16ps and tdpbf16ps's B tile both read); A as panels of 12 rows in pairs
   ([k/2][12][2], each pair broadcast as one 32-bit lane) for AVX512-BF16, or of 32 rows in K
   blocks of 32 ([k/32][32][32], two A tiles) for AMX. K is padded with zeros to the kernel's step. */
#define MF__BG_NR 32
#define MF__BG_KC 512   /* a multiple of 32 (AMX's K step) */
#define MF__BG_MC 192   /* a multiple of both row panels, 12 and 32 */
#define MF__BG_NC 1024
/* (not under nvcc, whose front end does not take these target attributes: a CUDA build's CPU
   contexts have only the portable kernels) */
#if !defined(METAFORMER_NO_SIMD) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__CUDACC__)
#define MF__BG_X86 1
#endif

/* round to nearest even; NaN stays NaN (quieted), infinities and overflow to infinity as fp32 does */
static uint16_t mf__bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float mf__bf16_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
MFDEF uint16_t mf_bf16_from_float(float x) { return mf__bf16_round(x); }
MFDEF float mf_bf16_to_float(uint16_t h) { return mf__bf16_float(h); }

static int mf__bg_mr(mf_bf16_kernel k) { return k == MF_BF16_AMX || k == MF_BF16_AMX_EMU ? 32 : 12; }
static int mf__bg_kstep(mf_bf16_kernel k) { return k == MF_BF16_AMX || k == MF_BF16_AMX_EMU ? 32 : 2; }

static void mf__bg_cvt(const float *x, long stride, uint16_t *y, int n, int len);
/* The packing reads runs of the source that are contiguous where the product's layout allows (a
   run of K, or of rows / columns for one K), rounds them with the engine's SIMD (mf__bg_cvt) and lays the
   values out as the kernels read them. */

/* B block rows [0, kc) (op(B)(p, j) = B[p*rs + j*cs]), columns [0, nc): panels of 32 columns,
   [kp/2][32][2] each, zero beyond kc and nc */
static void mf__bg_pack_b(const float *B, long rs, long cs, int kc, int kp, int nc, uint16_t *dst) {
    uint16_t run[MF__BG_KC], r0[MF__BG_NR], r1[MF__BG_NR];
    int jr, p, j, q;
    for (jr = 0; jr < nc; jr += MF__BG_NR, dst += (long)kp * MF__BG_NR) {
        int w = nc - jr < MF__BG_NR ? nc - jr : MF__BG_NR;
        if (rs == 1) { /* each column's K is a run: its pairs go in as 32-bit words */
            for (j = 0; j < MF__BG_NR; j++) {
                mf__bg_cvt(j < w ? B + (long)(jr + j) * cs : NULL, 1, run, j < w ? kc : 0, kp);
                for (q = 0; q < kp; q += 2) memcpy(dst + (long)q * MF__BG_NR + 2 * j, run + q, 4);
            }
        } else { /* each K's columns are a run: two of them interleaved */
            for (p = 0; p < kp; p += 2) {
                mf__bg_cvt(p < kc ? B + (long)p * rs + (long)jr * cs : NULL, cs, r0, p < kc ? w : 0, MF__BG_NR);
                mf__bg_cvt(p + 1 < kc ? B + (long)(p + 1) * rs + (long)jr * cs : NULL, cs, r1, p + 1 < kc ? w : 0,
                           MF__BG_NR);
                for (j = 0; j < MF__BG_NR; j++) {
                    dst[(long)p * MF__BG_NR + 2 * j] = r0[j];
                    dst[(long)p * MF__BG_NR + 2 * j + 1] = r1[j];
                }
            }
        }
    }
}
/* one A panel of mr rows (op(A)(i, p) = A[i*rs + p*cs]; rows beyond `rows` and K beyond kc are
   zero): pairs [kp/2][mr][2] for AVX512-BF16 and the portable kernel, K blocks [kp/32][32][32] for
   AMX (a tile row is 32 consecutive K of one row of A) */
static void mf__bg_pack_a(mf_bf16_kernel k, const float *A, long rs, long cs, int rows, int kc, int kp,
                          uint16_t *dst) {
    uint16_t run[MF__BG_KC], r0[32], r1[32];
    int mr = mf__bg_mr(k), i, p, q;
    if (k == MF_BF16_AMX || k == MF_BF16_AMX_EMU) {
        if (cs == 1) { /* a row's K is a run: 32 of it is one tile row */
            for (i = 0; i < 32; i++)
                for (p = 0; p < kp; p += 32) {
                    int n = i < rows && p < kc ? (kc - p < 32 ? kc - p : 32) : 0;
                    mf__bg_cvt(n ? A + (long)i * rs + p : NULL, 1, dst + (long)p * 32 + i * 32, n, 32);
                }
        } else { /* each K's rows are a run */
            for (p = 0; p < kp; p++) {
                mf__bg_cvt(p < kc ? A + (long)p * cs : NULL, rs, r0, p < kc ? rows : 0, 32);
                for (i = 0; i < 32; i++) dst[(long)(p / 32) * 1024 + i * 32 + p % 32] = r0[i];
            }
        }
        return;
    }
    if (cs == 1) { /* a row's K is a run: its pairs go in as 32-bit words */
        for (i = 0; i < mr; i++) {
            mf__bg_cvt(i < rows ? A + (long)i * rs : NULL, 1, run, i < rows ? kc : 0, kp);
            for (q = 0; q < kp; q += 2) memcpy(dst + (long)q * mr + 2 * i, run + q, 4);
        }
    } else { /* each K's rows are a run: two of them interleaved */
        for (p = 0; p < kp; p += 2) {
            mf__bg_cvt(p < kc ? A + (long)p * cs : NULL, rs, r0, p < kc ? rows : 0, mr);
            mf__bg_cvt(p + 1 < kc ? A + (long)(p + 1) * cs : NULL, rs, r1, p + 1 < kc ? rows : 0, mr);
            for (i = 0; i < mr; i++) {
                dst[(long)p * mr + 2 * i] = r0[i];
                dst[(long)p * mr + 2 * i + 1] = r1[i];
            }
        }
    }
}

/* c[i][j] = alpha * tile[i][j] + beta * c[i][j] (+ bias[j]) for rows < mr, columns < nr (tile rows 32
   floats apart); beta 0 does not read c */
static void mf__bg_store(const float *tile, float *c, long ldc, float alpha, float beta, int mr, int nr,
                         const float *bias) {
    int i, j;
    for (i = 0; i < mr; i++) {
        float *ci = c + (long)i * ldc;
        const float *ti = tile + i * MF__BG_NR;
        if (beta == 0.0f) for (j = 0; j < nr; j++) ci[j] = alpha * ti[j];
        else for (j = 0; j < nr; j++) ci[j] = alpha * ti[j] + beta * ci[j];
        if (bias) for (j = 0; j < nr; j++) ci[j] += bias[j];
    }
}

/* vdpbf16ps's arithmetic: inputs denormal in bf16 read as zero, each sum rounded (the product of two
   bf16 values is exact in fp32) and flushed to zero when denormal */
static float mf__bg_daz(uint16_t h) { return (h & 0x7f80u) ? mf__bf16_float(h) : 0.0f; }
static float mf__bg_ftz(float x) { return fabsf(x) < 1.17549435e-38f ? 0.0f : x; } /* FLT_MIN */

/* tile[12][32] = the portable kernel over kp/2 pairs of K */
static void mf__bk_portable(int kp, const uint16_t *a, const uint16_t *b, float *tile) {
    int p, i, j;
    for (i = 0; i < 12 * MF__BG_NR; i++) tile[i] = 0.0f;
    for (p = 0; p < kp; p += 2, a += 24, b += 2 * MF__BG_NR)
        for (i = 0; i < 12; i++) {
            float a0 = mf__bg_daz(a[2 * i]), a1 = mf__bg_daz(a[2 * i + 1]);
            float *t = tile + i * MF__BG_NR;
            for (j = 0; j < MF__BG_NR; j++) {
                t[j] = mf__bg_ftz(t[j] + a1 * mf__bg_daz(b[2 * j + 1]));
                t[j] = mf__bg_ftz(t[j] + a0 * mf__bg_daz(b[2 * j]));
            }
        }
}

/* ---- the AMX kernel, written once against MF__AMX_* (instructions or emulation) ----
   Tiles 0..3: the 32 x 32 block of C (tile 2r+c: rows 16r.., columns 16c..), 4 and 5: A's two
   16-row halves (16 x 32 bf16), 6 and 7: B's two 16-column halves (16 pairs of K x 16 columns x 2). */
typedef struct mf__amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} mf__amx_cfg;
static void mf__amx_config(mf__amx_cfg *cfg) {
    int t;
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
    for (t = 0; t < 8; t++) { cfg->rows[t] = 16; cfg->colsb[t] = 64; }
}
/* The tiles are configured once per thread and product (mf__bg_st: CONFIG before the first block,
   RELEASE after the last); u is the emulated unit (unused by the instructions). */
#define MF__AMX_KERNEL(NAME, ZERO, LOAD, DP, STORE)                                                      \
    static void NAME(void *u, int kp, const uint16_t *a, const uint16_t *b, float *tile) {              \
        int p;                                                                                           \
        (void)u;                                                                                         \
        ZERO(0); ZERO(1); ZERO(2); ZERO(3);                                                              \
        for (p = 0; p < kp; p += 32, a += 32 * 32, b += 32 * MF__BG_NR) {                                \
            LOAD(4, a, 64); LOAD(5, a + 16 * 32, 64);                                                    \
            LOAD(6, b, 128); LOAD(7, b + 32, 128);                                                       \
            DP(0, 4, 6); DP(1, 4, 7); DP(2, 5, 6); DP(3, 5, 7);                                          \
        }                                                                                                \
        STORE(0, tile, 128); STORE(1, tile + 16, 128);                                                   \
        STORE(2, tile + 16 * MF__BG_NR, 128); STORE(3, tile + 16 * MF__BG_NR + 16, 128);                 \
    }

/* The emulated tile unit: 8 tiles of 16 rows x 64 bytes. Every instruction checks its tiles'
   configuration as the hardware would fault on it (here: counted in mf__amx_emu_faults, which the
   tests read). */
typedef struct mf__amx_emu {
    mf__amx_cfg cfg;
    int configured;
    unsigned char t[8][16][64];
} mf__amx_emu;
static int mf__amx_emu_faults; /* instructions that the hardware would have faulted on (tests read it) */
static void mf__amx_emu_config(mf__amx_emu *u, const mf__amx_cfg *c) {
    int i, bad = c->palette != 1;
    for (i = 0; i < 8; i++) bad |= c->rows[i] > 16 || c->colsb[i] > 64 || (c->colsb[i] & 3);
    memcpy(&u->cfg, c, sizeof *c);
    memset(u->t, 0, sizeof u->t);
    u->configured = !bad;
    if (bad) mf__amx_emu_faults++;
}
static int mf__amx_emu_ok(mf__amx_emu *u, int t) {
    if (!u->configured || t < 0 || t > 7 || !u->cfg.rows[t]) { mf__amx_emu_faults++; return 0; }
    return 1;
}
static void mf__amx_emu_zero(mf__amx_emu *u, int t) { if (mf__amx_emu_ok(u, t)) memset(u->t[t], 0, sizeof u->t[t]); }
/* tileloadd: rows of colsb bytes, `stride` bytes apart; the bytes past colsb read as zero */
static void mf__amx_emu_load(mf__amx_emu *u, int t, const void *base, long stride) {
    int r;
    if (!mf__amx_emu_ok(u, t)) return;
    memset(u->t[t], 0, sizeof u->t[t]);
    for (r = 0; r < u->cfg.rows[t]; r++) memcpy(u->t[t][r], (const char *)base + r * stride, u->cfg.colsb[t]);
}
static void mf__amx_emu_store(mf__amx_emu *u, int t, void *base, long stride) {
    int r;
    if (!mf__amx_emu_ok(u, t)) return;
    for (r = 0; r < u->cfg.rows[t]; r++) memcpy((char *)base + r * stride, u->t[t][r], u->cfg.colsb[t]);
}
/* tdpbf16ps c, a, b: c[m][n] += a[m][2k] b[k][2n] + a[m][2k+1] b[k][2n+1] over k < a.colsb / 4, fp32
   products of bf16 (exact), each sum rounded, denormals flushed (the order the hardware's manual
   gives: the even element's product first). Shapes as the hardware requires them: a.rows = c.rows,
   b.rows = a.colsb / 4, c.colsb = b.colsb. */
static void mf__amx_emu_dp(mf__amx_emu *u, int c, int a, int b) {
    int m, n, k;
    if (!mf__amx_emu_ok(u, c) || !mf__amx_emu_ok(u, a) || !mf__amx_emu_ok(u, b)) return;
    if (u->cfg.rows[a] != u->cfg.rows[c] || u->cfg.rows[b] != u->cfg.colsb[a] / 4 ||
        u->cfg.colsb[b] != u->cfg.colsb[c]) { mf__amx_emu_faults++; return; }
    for (m = 0; m < u->cfg.rows[c]; m++)
        for (n = 0; n < u->cfg.colsb[c] / 4; n++) {
            float acc;
            memcpy(&acc, &u->t[c][m][4 * n], 4);
            for (k = 0; k < u->cfg.colsb[a] / 4; k++) {
                uint16_t a0, a1, b0, b1;
                memcpy(&a0, &u->t[a][m][4 * k], 2); memcpy(&a1, &u->t[a][m][4 * k + 2], 2);
                memcpy(&b0, &u->t[b][k][4 * n], 2); memcpy(&b1, &u->t[b][k][4 * n + 2], 2);
                acc = mf__bg_ftz(acc + mf__bg_daz(a0) * mf__bg_daz(b0));
                acc = mf__bg_ftz(acc + mf__bg_daz(a1) * mf__bg_daz(b1));
            }
            memcpy(&u->t[c][m][4 * n], &acc, 4);
        }
}
#define MF__AMXE_ZERO(t) mf__amx_emu_zero((mf__amx_emu *)u, t)
#define MF__AMXE_LOAD(t, p, s) mf__amx_emu_load((mf__amx_emu *)u, t, p, s)
#define MF__AMXE_DP(c, a, b) mf__amx_emu_dp((mf__amx_emu *)u, c, a, b)
#define MF__AMXE_STORE(t, p, s) mf__amx_emu_store((mf__amx_emu *)u, t, p, s)
MF__AMX_KERNEL(mf__bk_amx_emu, MF__AMXE_ZERO, MF__AMXE_LOAD, MF__AMXE_DP, MF__AMXE_STORE)

#if defined(MF__BG_X86)
#include <cpuid.h>
#include <immintrin.h>
/* The instructions themselves (AT&T order: sources first), as inline assembly: the intrinsics'
   headers differ between compiler versions, the encodings do not (binutils 2.34 or later). */
#define MF__AMXH_CONFIG(c) __asm__ __volatile__("ldtilecfg %0" ::"m"(*(const mf__amx_cfg *)(c)))
#define MF__AMXH_ZERO(t) __asm__ __volatile__("tilezero %%tmm" #t ::)
#define MF__AMXH_LOAD(t, p, s) __asm__ __volatile__("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"((long)(s)) : "memory")
#define MF__AMXH_DP(c, a, b) __asm__ __volatile__("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define MF__AMXH_STORE(t, p, s) __asm__ __volatile__("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(p), "r"((long)(s)) : "memory")
#define MF__AMXH_RELEASE() __asm__ __volatile__("tilerelease" ::)
MF__AMX_KERNEL(mf__bk_amx, MF__AMXH_ZERO, MF__AMXH_LOAD, MF__AMXH_DP, MF__AMXH_STORE)

/* c[0..16) (lanes in m) = alpha v + beta c (+ bias), rounded as mf__bg_store rounds it */
#define MF__BG_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
MF__BG_AVX512 static inline void mf__bk_st16(float *c, __m512 v, float alpha, float beta, __mmask16 m, const float *bias) {
    v = _mm512_mul_ps(v, _mm512_set1_ps(alpha));
    if (beta != 0.0f) v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, c), _mm512_set1_ps(beta)));
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias));
    _mm512_mask_storeu_ps(c, m, v);
}
/* C[mr][nr] = alpha A B + beta C (+ bias) by vdpbf16ps: each A pair broadcast as one 32-bit lane
   against 16 columns' pairs, 12 x 32 accumulators, stored straight into C */
#define MF__BK_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define MF__BK_DECL(i) __m512 c##i##_0 = _mm512_setzero_ps(), c##i##_1 = _mm512_setzero_ps();
#define MF__BK_DP(i) { uint32_t ap; memcpy(&ap, a + 2 * i, 4); /* broadcast straight from the panel */ \
    __m512bh ai = (__m512bh)_mm512_set1_epi32((int)ap); \
    c##i##_0 = _mm512_dpbf16_ps(c##i##_0, b0, ai); c##i##_1 = _mm512_dpbf16_ps(c##i##_1, b1, ai); }
#define MF__BK_ST(i) if (i < mr) { mf__bk_st16(c + (long)i * ldc, c##i##_0, alpha, beta, m0, bias); \
    if (m1) mf__bk_st16(c + (long)i * ldc + 16, c##i##_1, alpha, beta, m1, bias ? bias + 16 : NULL); }
MF__BG_AVX512 static void mf__bk_avx512(int kp, const uint16_t *a, const uint16_t *b, float *c, long ldc, float alpha,
                                        float beta, int mr, int nr, const float *bias) {
    __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xffffu : (1u << nr) - 1u);
    __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xffffu : nr > 16 ? (1u << (nr - 16)) - 1u : 0u);
    int p;
    MF__BK_ROWS(MF__BK_DECL)
    for (p = 0; p < kp; p += 2, a += 24, b += 2 * MF__BG_NR) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)b);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void *)(b + MF__BG_NR));
        MF__BK_ROWS(MF__BK_DP)
    }
    MF__BK_ROWS(MF__BK_ST)
}
/* What this CPU and OS offer (once per process): cpuid's feature bits, the OS's saved state (XCR0)
   and, for AMX on Linux, the kernel's permission to use the tile data. */
static int mf__bf16_caps = -1; /* bit 0: AVX512-BF16 usable, bit 1: AMX-BF16 usable */
static char mf__cpu_feat[160];
static unsigned long long mf__xgetbv0(void) {
    unsigned lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
static void mf__bf16_detect(void) {
    unsigned a, b, c, d, a1 = 0, b1 = 0, c1 = 0, d1 = 0, max = __get_cpuid_max(0, NULL);
    int caps = 0, avx512 = 0, osxsave = 0, amx = 0, granted = 0;
    unsigned long long xcr0 = 0;
    if (max >= 1 && __get_cpuid(1, &a, &b, &c, &d)) osxsave = (c >> 27) & 1;
    if (osxsave) xcr0 = mf__xgetbv0();
    if (max >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        __cpuid_count(7, 1, a1, b1, c1, d1);
        avx512 = ((b >> 16) & 1) && ((b >> 30) & 1) && (xcr0 & 0xe6) == 0xe6; /* avx512f, avx512bw, zmm state */
        amx = ((d >> 22) & 1) && ((d >> 24) & 1);                              /* amx-bf16, amx-tile */
    }
    if (avx512 && ((a1 >> 5) & 1)) caps |= 1;
#if defined(__linux__)
    if (amx) { /* arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): syscall 158, 0x1023, 18 */
        long r;
        __asm__ __volatile__("syscall" : "=a"(r) : "0"(158L), "D"(0x1023L), "S"(18L) : "rcx", "r11", "memory");
        granted = r == 0;
    }
#endif
    if (amx && granted && (caps & 1)) caps |= 2;
    snprintf(mf__cpu_feat, sizeof mf__cpu_feat, "avx512f %s, avx512_bf16 %s, amx_bf16 %s%s",
             avx512 ? "yes" : "no", (a1 >> 5) & 1 ? "yes" : "no", amx ? "yes" : "no",
             amx ? (granted ? " (tile state granted)" : " (the OS refused the tile state)") : "");
    mf__bf16_caps = caps;
}
#endif /* MF__BG_X86 */

MFDEF const char *mf_cpu_features(void) {
#if defined(MF__BG_X86)
    if (mf__bf16_caps < 0) mf__bf16_detect();
    return mf__cpu_feat;
#else
    return "not an x86-64 CPU (or built with METAFORMER_NO_SIMD): no bf16 matrix instructions";
#endif
}
static int mf__bf16_kernel_usable(mf_bf16_kernel k) {
#if defined(MF__BG_X86)
    if (mf__bf16_caps < 0) mf__bf16_detect(); /* here, before any threads read the caps */
#endif
    if (k == MF_BF16_PORTABLE || k == MF_BF16_AMX_EMU || k == MF_BF16_FMA) return 1;
#if defined(MF__BG_X86)
    if (k == MF_BF16_AVX512) return mf__bf16_caps & 1;
    if (k == MF_BF16_AMX) return (mf__bf16_caps >> 1) & 1;
#endif
    return 0;
}
MFDEF mf_bf16_kernel mf_cpu_bf16_kernel(void) {
    return mf__bf16_kernel_usable(MF_BF16_AMX) ? MF_BF16_AMX : MF_BF16_FMA;
}

/* y[i] = x[i * stride] rounded to bf16 for i < n (x may be NULL when n is 0), zeros up to len */
static void mf__bg_cvt(const float *x, long stride, uint16_t *y, int n, int len) {
    int i = 0;
    if (stride == 1) mf__bf16_round_n(x, NULL, y, i = n);
    for (; i < n; i++) y[i] = mf__bf16_round(x[(long)i * stride]);
    for (; i < len; i++) y[i] = 0;
}
/* C[mr][nr] = alpha A B + beta C (+ bias) from packed panels on kernel k (tile: 32 x 32 floats of scratch) */
static void mf__bg_block(mf_bf16_kernel k, void *u, int kp, const uint16_t *a, const uint16_t *b, float *tile,
                         float *c, long ldc, float alpha, float beta, int mr, int nr, const float *bias) {
#if defined(MF__BG_X86)
    if (k == MF_BF16_AVX512) { mf__bk_avx512(kp, a, b, c, ldc, alpha, beta, mr, nr, bias); return; }
    if (k == MF_BF16_AMX) mf__bk_amx(u, kp, a, b, tile);
    else
#endif
    if (k == MF_BF16_AMX_EMU) mf__bk_amx_emu(u, kp, a, b, tile);
    else mf__bk_portable(kp, a, b, tile);
    mf__bg_store(tile, c, ldc, alpha, beta, mr, nr, bias);
}

/* packing buffer of one thread, in uint16 */
static long mf__bg_buf_len(void) { return (long)(MF__BG_MC + MF__BG_NC) * MF__BG_KC + 64; }
/* floats of workspace a bf16 product on n_threads needs (mf__gemm_workspace) */
static long mf__bg_ws_floats(int n_threads) { return (mf__bg_buf_len() / 2 + 32) * mf__gemm_threads(n_threads) + 16; }

/* one thread's blocked product (+ bias[N] on every row) on kernel k; buf: mf__bg_buf_len uint16 */
static void mf__bg_st(mf_bf16_kernel k, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc, const float *bias, uint16_t *buf) {
    long ars = ta ? 1 : lda, acs = ta ? lda : 1, brs = tb ? 1 : ldb, bcs = tb ? ldb : 1;
    int mr = mf__bg_mr(k), ks = mf__bg_kstep(k), jc, pc, ic, jr, ir;
    uint16_t *bufA = buf, *bufB = buf + (long)MF__BG_MC * MF__BG_KC;
    float tile[32 * MF__BG_NR];
    mf__amx_emu emu; /* the emulated tile unit (MF_BF16_AMX_EMU) */
    mf__amx_cfg cfg;
    mf__amx_config(&cfg);
    if (k == MF_BF16_AMX_EMU) mf__amx_emu_config(&emu, &cfg);
#if defined(MF__BG_X86)
    if (k == MF_BF16_AMX) MF__AMXH_CONFIG(&cfg);
#endif
    for (jc = 0; jc < N; jc += MF__BG_NC) {
        int nc = N - jc < MF__BG_NC ? N - jc : MF__BG_NC;
        for (pc = 0; pc < K; pc += MF__BG_KC) {
            int kc = K - pc < MF__BG_KC ? K - pc : MF__BG_KC, kp = (kc + ks - 1) / ks * ks;
            float beta_eff = pc == 0 ? beta : 1.0f;
            const float *bias_eff = pc + kc >= K ? bias : NULL;
            mf__bg_pack_b(B + pc * brs + jc * bcs, brs, bcs, kc, kp, nc, bufB);
            for (ic = 0; ic < M; ic += MF__BG_MC) {
                int mc = M - ic < MF__BG_MC ? M - ic : MF__BG_MC;
                for (ir = 0; ir < mc; ir += mr)
                    mf__bg_pack_a(k, A + (ic + ir) * ars + pc * acs, ars, acs, mc - ir < mr ? mc - ir : mr, kc, kp,
                                  bufA + (long)ir * kp);
                for (jr = 0; jr < nc; jr += MF__BG_NR)
                    for (ir = 0; ir < mc; ir += mr)
                        mf__bg_block(k, &emu, kp, bufA + (long)ir * kp, bufB + (long)jr * kp, tile,
                                     C + (long)(ic + ir) * ldc + jc + jr, ldc, alpha, beta_eff,
                                     mc - ir < mr ? mc - ir : mr, nc - jr < MF__BG_NR ? nc - jr : MF__BG_NR,
                                     bias_eff ? bias_eff + jc + jr : NULL);
            }
        }
    }
#if defined(MF__BG_X86)
    if (k == MF_BF16_AMX) MF__AMXH_RELEASE();
#endif
}

/* C = alpha op(A) op(B) + beta C (+ bias[N] on every row) in bf16 on kernel k (usable: see
   mf__bf16_kernel_usable); ws: mf__bg_ws_floats(n_threads) floats, or NULL to allocate. Returns -1
   when it cannot allocate. */
static int mf__bgemm_ws(mf_bf16_kernel k, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc, const float *bias, int n_threads,
                        float *ws) {
    int nt = mf__gemm_threads(n_threads), mr = mf__bg_mr(k);
    double flops = 2.0 * M * N * K;
    void *mem = NULL;
    uint16_t *buf;
    if (M <= 0 || N <= 0) return 0;
    if (K <= 0 || alpha == 0.0f) { mf__gemm_scale(M, N, beta, C, ldc, bias); return 0; }
    if (nt > 1 && flops < 2.0e6 * nt) nt = (int)(flops / 2.0e6) < 1 ? 1 : (int)(flops / 2.0e6);
    if (nt > 1 && (M + mr - 1) / mr * ((N + MF__BG_NR - 1) / MF__BG_NR) < nt) nt = 1;
    if (!ws && !(mem = MF_MALLOC((size_t)mf__bg_ws_floats(nt) * sizeof(float)))) return -1;
    buf = (uint16_t *)mf__gemm_align(ws ? (void *)ws : mem);
    if (nt == 1) {
        mf__bg_st(k, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, buf);
    } else {
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
        int tm, tn;
        long per = mf__bg_buf_len() + 64;
        mf__gemm_grid(M, N, nt, &tm, &tn);
#pragma omp parallel num_threads(nt)
        {
            int t = omp_get_thread_num(), m0, m1, n0, n1;
            mf__gemm_part(M, tm, t / tn, mr, &m0, &m1);
            mf__gemm_part(N, tn, t % tn, MF__BG_NR, &n0, &n1);
            if (omp_get_num_threads() < nt) { m0 = n0 = 0; m1 = t == 0 ? M : 0; n1 = N; }
            if (m1 > m0 && n1 > n0)
                mf__bg_st(k, ta, tb, m1 - m0, n1 - n0, K, alpha, ta ? A + m0 : A + (long)m0 * lda, lda,
                          tb ? B + (long)n0 * ldb : B + n0, ldb, beta, C + (long)m0 * ldc + n0, ldc,
                          bias ? bias + n0 : NULL, buf + per * t);
        }
#endif
    }
    MF_FREE(mem);
    return 0;
}
/* batch products (strides as mf_sgemm_batched; sC 0 with batch > 1: not allowed here, the caller adds
   them one after another): whole products per thread when there are several, else each threaded */
static int mf__bgemm_batched_ws(mf_bf16_kernel k, int ta, int tb, int M, int N, int K, const float *A, int lda,
                                int64_t sA, const float *B, int ldb, int64_t sB, float beta, float *C, int ldc,
                                int64_t sC, int batch, int n_threads, float *ws) {
    int nt = mf__gemm_threads(n_threads), b, bad = 0;
    if (nt > 1 && batch > 1 && (batch >= 4 * nt || batch % nt == 0 || 2.0 * M * N * K < 2.0e7)) {
        uint16_t *buf = (uint16_t *)mf__gemm_align(ws);
        if (nt > batch) nt = batch;
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
        for (b = 0; b < batch; ++b) {
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
            uint16_t *bt = buf + (mf__bg_buf_len() + 64) * omp_get_thread_num();
#else
            uint16_t *bt = buf;
#endif
            mf__bg_st(k, ta, tb, M, N, K, 1.0f, A + sA * b, lda, B + sB * b, ldb, beta, C + sC * b, ldc, NULL, bt);
        }
        return 0;
    }
    for (b = 0; b < batch; ++b)
        bad |= mf__bgemm_ws(k, ta, tb, M, N, K, 1.0f, A + sA * b, lda, B + sB * b, ldb, beta, C + sC * b, ldc, NULL,
                            nt, ws);
    return bad ? -1 : 0;
}

MFDEF int mf_bgemm(mf_bf16_kernel kernel, int transA, int transB, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc, int n_threads) {
    if (kernel <= MF_BF16_NONE || kernel > MF_BF16_FMA || !mf__bf16_kernel_usable(kernel)) return -1;
    if (kernel == MF_BF16_FMA) {
        mf__sgemm_bias_ws(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, n_threads, NULL, NULL, 1);
        return 0;
    }
    return mf__bgemm_ws(kernel, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, n_threads, NULL);
}
/* ==== [mf:bf16-end] ========================================================================= */

/* ==== [mf:ops] ============================================================================== */
/* Each op: its argument slots (MF__ARG_* index out->iarg, MF__FARG_* out->farg), shape, forward and
   backward, its descriptor with its properties (MF__OP_PROPS), its constructor. A new op also goes
   into mf__ops (after the families' sections), with an example in tests/op_examples.h and a row in
   metaformer_cuda.cuh's mf__cu_ops. */
#define MF__SHAPE_FAIL(...) (mf__fail(ctx, __VA_ARGS__), -1)

/* The GEMM packing workspace, kept by the context and grown on demand (only the first steps
   allocate). GEMMs run one at a time from the ops, so one workspace serves them all. */
static mf_bf16_kernel mf__ctx_bf16(const mf_ctx *ctx);
static mf_bf16_kernel mf__ctx_bg(const mf_ctx *ctx);
static float *mf__gemm_workspace(mf_ctx *ctx, int M, int N, int K) {
    long need = mf__ctx_bg(ctx) ? mf__bg_ws_floats(ctx->n_threads) : mf__gemm_ws_floats(M, N, K, ctx->n_threads);
    if (need > ctx->gemm_ws_cap) {
        float *w = (float *)MF_REALLOC(ctx->gemm_ws, (size_t)need * sizeof(float));
        if (!w) return (float *)mf__fail(ctx, "out of memory: GEMM workspace of %ld floats", need);
        ctx->gemm_ws = w; ctx->gemm_ws_cap = need;
    }
    return ctx->gemm_ws;
}

/* The kernel a CPU context's products run on in bf16, or MF_BF16_NONE (fp32, or a device) */
static mf_bf16_kernel mf__ctx_bf16(const mf_ctx *ctx) {
    return !ctx->be && ctx->prec == MF_PREC_BF16 ? ctx->bf16_kernel : MF_BF16_NONE;
}
/* That kernel when it is one of [mf:bf16]'s own, or MF_BF16_NONE when the products run on the fp32
   engine (fp32, or MF_BF16_FMA: its panels rounded, mf__gemm_st's bf16) */
static mf_bf16_kernel mf__ctx_bg(const mf_ctx *ctx) {
    mf_bf16_kernel k = mf__ctx_bf16(ctx);
    return k == MF_BF16_FMA ? MF_BF16_NONE : k;
}
/* C = op(A) op(B) + beta * C (+ bias[N] on every row) in the context's precision, on ws
   (mf__gemm_workspace); rowsA: as mf__gemm_st (the sums of op(A)'s rows, always in fp32) */
static void mf__ctx_gemm(mf_ctx *ctx, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                         int ldb, float beta, float *C, int ldc, const float *bias, float *ws, float *rowsA) {
    mf_bf16_kernel k = mf__ctx_bg(ctx);
    if (!k) {
        mf__sgemm_bias_ws(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc, bias, ctx->n_threads, ws, rowsA,
                          mf__ctx_bf16(ctx) != MF_BF16_NONE);
        return;
    }
    if (rowsA) mf__gemm_rowsum(ta ? 1 : lda, ta ? lda : 1, M, K, A, rowsA);
    mf__bgemm_ws(k, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc, bias, ctx->n_threads, ws);
}
/* C_i = op(A_i) op(B_i) + beta * C_i for i < batch, the rows of A, B, C lda, ldb, ldc floats apart
   (strided views, e.g. one head of token-major rows). sC == 0 with batch > 1 means every product
   adds into the same C (a shared operand's gradient): those run one after another. */
static void mf__gemm_ld(mf_ctx *ctx, int ta, int tb, int M, int N, int K, const float *A, int lda, int64_t sA,
                        const float *B, int ldb, int64_t sB, float beta, float *C, int ldc, int64_t sC, int batch) {
    float *ws = mf__gemm_workspace(ctx, M, N, K);
    double t0 = mf__gemm_t0(ctx);
    int i;
    if (!ws) return;
    if (batch > 1 && sC == 0) {
        for (i = 0; i < batch; i++)
            mf__ctx_gemm(ctx, ta, tb, M, N, K, A + i * sA, lda, B + i * sB, ldb, i ? 1.0f : beta, C, ldc, NULL, ws,
                         NULL);
    } else if (mf__ctx_bg(ctx)) {
        mf__bgemm_batched_ws(mf__ctx_bg(ctx), ta, tb, M, N, K, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch,
                             ctx->n_threads, ws);
    } else {
        mf__sgemm_batched_ws(ta, tb, M, N, K, 1.0f, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch,
                             ctx->n_threads, ws, mf__ctx_bf16(ctx) != MF_BF16_NONE);
    }
    mf__gemm_t1(ctx, t0);
}
/* mf__gemm_ld on dense matrices (rows as long as the matrix is wide) */
static void mf__gemm(mf_ctx *ctx, int ta, int tb, int M, int N, int K, const float *A,
                     int64_t sA, const float *B, int64_t sB, float beta, float *C, int64_t sC,
                     int batch) {
    mf__gemm_ld(ctx, ta, tb, M, N, K, A, ta ? M : K, sA, B, tb ? K : N, sB, beta, C, N, sC, batch);
}

/* ---- matmul: a [..., M, K] @ b [..., K, N] -> [..., M, N] ------------------------------------ */
/* iarg: the caller's transposes, then what the shape sets: the product's sizes, the number of
   products and how the operands batch (mode 0 both batched, 1 b shared, 2 a shared) */
enum { MF__ARG_MM_TRANS_A, MF__ARG_MM_TRANS_B, MF__ARG_MM_M, MF__ARG_MM_N, MF__ARG_MM_K, MF__ARG_MM_BATCH,
       MF__ARG_MM_MODE };
static int mf__matmul_shape(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *a = out->src[0], *b = out->src[1];
    int ta = out->iarg[MF__ARG_MM_TRANS_A], tb = out->iarg[MF__ARG_MM_TRANS_B], M, K, K2, N, i, shape[MF_MAX_DIMS];
    char sa[64], sb[64];
    if (a->ndim < 2 || b->ndim < 2)
        return MF__SHAPE_FAIL("matmul: operands need at least 2 dims, got %s and %s",
                              mf_shape_str(a, sa, 64), mf_shape_str(b, sb, 64));
    M = a->shape[a->ndim - (ta ? 1 : 2)]; K = a->shape[a->ndim - (ta ? 2 : 1)];
    K2 = b->shape[b->ndim - (tb ? 1 : 2)]; N = b->shape[b->ndim - (tb ? 2 : 1)];
    if (K != K2)
        return MF__SHAPE_FAIL("matmul: inner sizes differ: a %s%s has K = %d, b %s%s has K = %d",
                              mf_shape_str(a, sa, 64), ta ? " (transposed)" : "", K,
                              mf_shape_str(b, sb, 64), tb ? " (transposed)" : "", K2);
    if (a->ndim > 2 && b->ndim > 2) {
        if (a->ndim != b->ndim) i = -1;
        else for (i = 0; i < a->ndim - 2 && a->shape[i] == b->shape[i]; i++) {}
        if (i != a->ndim - 2)
            return MF__SHAPE_FAIL("matmul: batch dims of %s and %s differ; they must be equal, or one "
                                  "operand must be 2-D", mf_shape_str(a, sa, 64), mf_shape_str(b, sb, 64));
        out->iarg[MF__ARG_MM_MODE] = 0;
    } else out->iarg[MF__ARG_MM_MODE] = (b->ndim == 2) ? 1 : 2;
    {
        const mf_tensor *big = out->iarg[MF__ARG_MM_MODE] == 2 ? b : a;
        for (i = 0; i < big->ndim - 2; i++) shape[i] = big->shape[i];
        shape[big->ndim - 2] = M; shape[big->ndim - 1] = N;
        mf__set_shape(out, big->ndim, shape);
    }
    out->iarg[MF__ARG_MM_M] = M; out->iarg[MF__ARG_MM_N] = N; out->iarg[MF__ARG_MM_K] = K;
    out->iarg[MF__ARG_MM_BATCH] = (int)(out->ne / ((int64_t)M * N));
    return 0;
}
static void mf__matmul_forward(mf_ctx *ctx, mf_tensor *out) {
    int ta = out->iarg[MF__ARG_MM_TRANS_A], tb = out->iarg[MF__ARG_MM_TRANS_B];
    int M = out->iarg[MF__ARG_MM_M], N = out->iarg[MF__ARG_MM_N], K = out->iarg[MF__ARG_MM_K];
    int batch = out->iarg[MF__ARG_MM_BATCH], mode = out->iarg[MF__ARG_MM_MODE];
    int64_t sA = mode == 2 ? 0 : (int64_t)M * K, sB = mode == 1 ? 0 : (int64_t)K * N;
    if (mode == 1 && !ta) /* shared b: one tall product */
        mf__gemm(ctx, 0, tb, M * batch, N, K, out->src[0]->data, 0, out->src[1]->data, 0, 0.0f, out->data, 0, 1);
    else
        mf__gemm(ctx, ta, tb, M, N, K, out->src[0]->data, sA, out->src[1]->data, sB, 0.0f, out->data,
                 (int64_t)M * N, batch);
}
static void mf__matmul_backward(mf_ctx *ctx, mf_tensor *out) {
    int ta = out->iarg[MF__ARG_MM_TRANS_A], tb = out->iarg[MF__ARG_MM_TRANS_B];
    int M = out->iarg[MF__ARG_MM_M], N = out->iarg[MF__ARG_MM_N], K = out->iarg[MF__ARG_MM_K];
    int batch = out->iarg[MF__ARG_MM_BATCH], mode = out->iarg[MF__ARG_MM_MODE];
    const float *A = out->src[0]->data, *B = out->src[1]->data, *dC = out->grad;
    float *dA = mf__g(out->src[0]), *dB = mf__g(out->src[1]);
    int64_t sA = mode == 2 ? 0 : (int64_t)M * K, sB = mode == 1 ? 0 : (int64_t)K * N, sC = (int64_t)M * N;
    if (dA) {
        if (mode == 1 && !ta)       /* dA = dC @ op(B)^T, all rows at once */
            mf__gemm(ctx, 0, !tb, M * batch, K, N, dC, 0, B, 0, 1.0f, dA, 0, 1);
        else if (!ta)               /* dA_i += dC_i @ op(B_i)^T */
            mf__gemm(ctx, 0, !tb, M, K, N, dC, sC, B, sB, 1.0f, dA, sA, batch);
        else                        /* dA_i (K x M) += op(B_i) @ dC_i^T */
            mf__gemm(ctx, tb, 1, K, M, N, B, sB, dC, sC, 1.0f, dA, sA, batch);
    }
    if (dB) {
        if (mode == 1 && !ta && !tb)      /* dB = A^T dC over all rows */
            mf__gemm(ctx, 1, 0, K, N, M * batch, A, 0, dC, 0, 1.0f, dB, 0, 1);
        else if (mode == 1 && !ta && tb)  /* dB = dC^T A over all rows */
            mf__gemm(ctx, 1, 0, N, K, M * batch, dC, 0, A, 0, 1.0f, dB, 0, 1);
        else if (!tb)                     /* dB_i (K x N) += op(A_i)^T dC_i */
            mf__gemm(ctx, !ta, 0, K, N, M, A, sA, dC, sC, 1.0f, dB, sB, batch);
        else                              /* dB_i (N x K) += dC_i^T op(A_i) */
            mf__gemm(ctx, 1, ta, N, K, M, dC, sC, A, sA, 1.0f, dB, sB, batch);
    }
}
static const mf__op mf__op_matmul = { "matmul", 2, mf__matmul_shape, mf__matmul_forward, mf__matmul_backward,
                                      MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_matmul(mf_ctx *ctx, mf_tensor *a, mf_tensor *b, int trans_a, int trans_b) {
    mf_tensor *t = mf__begin(ctx, &mf__op_matmul, a, b, NULL, NULL);
    if (t) { t->iarg[MF__ARG_MM_TRANS_A] = trans_a != 0; t->iarg[MF__ARG_MM_TRANS_B] = trans_b != 0; }
    return mf__finish(ctx, t);
}

/* ---- small products without packing ------------------------------------------------------------ */
/* Register tile of mf__tile_mm: R (1, 4 or 8) rows of C x NV (1..MF__AV_MAXV) vectors; the last
   vector is masked by mk. R and NV are constants at every use, so the dead parts fold away.
   8 rows only with NV <= MF__AV_R8V (AVX-512: 8 x 2 = 16 accumulators, AVX2: 8 x 1). */
#define MF__TM_FMA(r, R, NV) \
    if (R > r) { mf__av x = mf__av_set1(a[r * ars]); \
        c##r##0 = mf__av_fma(x, b0, c##r##0); \
        if (NV > 1) c##r##1 = mf__av_fma(x, b1, c##r##1); \
        if (NV > 2) c##r##2 = mf__av_fma(x, b2, c##r##2); \
        if (NV > 3) c##r##3 = mf__av_fma(x, b3, c##r##3); }
#define MF__TM_ST1(r, u, NV) \
    if (NV > u) { float *cp = c + (int64_t)r * ldc + u * MF__AW; mf__av t = c##r##u; \
        if (u == NV - 1) { if (add) t = mf__av_add(t, mf__av_loadm(cp, mk)); mf__av_storem(cp, mk, t); } \
        else { if (add) t = mf__av_add(t, mf__av_load(cp)); mf__av_store(cp, t); } }
#define MF__TM_ST(r, R, NV) \
    if (R > r) { MF__TM_ST1(r, 0, NV) MF__TM_ST1(r, 1, NV) MF__TM_ST1(r, 2, NV) MF__TM_ST1(r, 3, NV) }
#define MF__TM_LD(u, NV) \
    (NV > u ? (u == NV - 1 ? mf__av_loadm(b + u * MF__AW, mk) : mf__av_load(b + u * MF__AW)) : mf__av_zero())
#define MF__TM_ROWS(X, R, NV) X(0, R, NV) X(1, R, NV) X(2, R, NV) X(3, R, NV) X(4, R, NV) X(5, R, NV) \
    X(6, R, NV) X(7, R, NV)
#define MF__TM_DECL(r, R, NV) mf__av c##r##0 = z, c##r##1 = z, c##r##2 = z, c##r##3 = z;
#define MF__TM_TILE(R, NV) { \
    const mf__av z = mf__av_zero(); \
    MF__TM_ROWS(MF__TM_DECL, R, NV) \
    const float *a = a0, *b = b0p; \
    int p; \
    for (p = 0; p < k; p++, a += acs, b += ldb) { \
        mf__av b0 = MF__TM_LD(0, NV), b1 = MF__TM_LD(1, NV), b2 = MF__TM_LD(2, NV), b3 = MF__TM_LD(3, NV); \
        MF__TM_ROWS(MF__TM_FMA, R, NV) \
    } \
    MF__TM_ROWS(MF__TM_ST, R, NV) }

#if defined(__NVCC__) && MF__AW == 1
#pragma nv_diag_suppress 550 /* the portable kernel never reads the mask variable */
#endif
/* C[m][n] (+)= A[m][k] B[k][n] (add == 0 overwrites C) for small products that fit in L1/L2 (the
   attention's tiles, the fast-weight chunks, the feedback steps; operands whose rows lie far apart
   in memory, as head_matmul's, are faster through the GEMM driver, which packs them):
   A(i, p) = A[i * ars + p * acs] (either layout), B and C row-major. Single-threaded; no packing
   (mf_sgemm would pack and allocate on every call), register tiles of 4 x 64 or 8 x 32 on AVX-512. */
static void mf__tile_mm(int m, int n, int k, const float *A, int ars, int acs, const float *B,
                        int ldb, float *C, int ldc, int add) {
    int i, j0;
    for (j0 = 0; j0 < n; j0 += MF__AV_MAXV * MF__AW) {
        int w = n - j0 < MF__AV_MAXV * MF__AW ? n - j0 : MF__AV_MAXV * MF__AW;
        int nv = (w + MF__AW - 1) / MF__AW;
        mf__am mk = mf__av_mask(w - (nv - 1) * MF__AW); /* unused by the portable kernel */
        const float *b0p = B + j0;
        i = 0;
        if (nv <= MF__AV_R8V)
            for (; i + 8 <= m; i += 8) {
                const float *a0 = A + (int64_t)i * ars;
                float *c = C + (int64_t)i * ldc + j0;
                if (nv == 1) MF__TM_TILE(8, 1)
#if MF__AV_R8V > 1
                else MF__TM_TILE(8, 2)
#endif
            }
        for (; i + 4 <= m; i += 4) {
            const float *a0 = A + (int64_t)i * ars;
            float *c = C + (int64_t)i * ldc + j0;
            switch (nv) {
            case 1: MF__TM_TILE(4, 1) break;
            case 2: MF__TM_TILE(4, 2) break;
            case 3: MF__TM_TILE(4, 3) break;
            default: MF__TM_TILE(4, 4) break;
            }
        }
        for (; i < m; i++) {
            const float *a0 = A + (int64_t)i * ars;
            float *c = C + (int64_t)i * ldc + j0;
            switch (nv) {
            case 1: MF__TM_TILE(1, 1) break;
            case 2: MF__TM_TILE(1, 2) break;
            case 3: MF__TM_TILE(1, 3) break;
            default: MF__TM_TILE(1, 4) break;
            }
        }
    }
}
#undef MF__TM_FMA
#undef MF__TM_ST1
#undef MF__TM_ST
#undef MF__TM_LD
#undef MF__TM_ROWS
#undef MF__TM_DECL
#undef MF__TM_TILE
/* An operand of a bf16 tile product (MF_PREC_BF16 on a CPU context, docs/math.md §22.5): rows x n
   floats of src (rows lds floats apart) rounded to bf16 (nearest even) into dst [rows][n], staged
   once where the kernel loads the tile so that mf__tile_mm's inner loop stays the fp32 one (the
   product of two bf16 values is exact in fp32: fp32 FMAs on rounded operands are bf16 products with
   fp32 accumulation). dst may be src when lds == n. Returns dst. */
static float *mf__bf16_rows(float *dst, const float *src, int64_t lds, int rows, int n) {
    int r;
    if (lds == n) mf__bf16_round_n(src, dst, NULL, (long)rows * n);
    else for (r = 0; r < rows; r++) mf__bf16_round_n(src + r * lds, dst + (int64_t)r * n, NULL, n);
    return dst;
}

/* ---- head_matmul: x [..., H, K] @ w [H, K, N] per head -> [..., H, N] ------------------------- */
/* One strided GEMM per head over all R leading rows: head h's rows of x are H*K floats apart, its
   matrix of the batch starts K floats after head h - 1's (the same for y, dy with N). */
enum { MF__ARG_HM_ROWS, MF__ARG_HM_H, MF__ARG_HM_K, MF__ARG_HM_N };
static int mf__head_matmul_shape(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *x = out->src[0], *w = out->src[1];
    int shape[MF_MAX_DIMS], i, H, K;
    char sx[64], sw[64];
    if (x->ndim < 2 || w->ndim != 3)
        return MF__SHAPE_FAIL("head_matmul: x %s must be [..., H, K] (2 to 4 dims) and w %s [H, K, N] (3 dims)",
                              mf_shape_str(x, sx, 64), mf_shape_str(w, sw, 64));
    H = x->shape[x->ndim - 2]; K = x->shape[x->ndim - 1];
    if (w->shape[0] != H || w->shape[1] != K)
        return MF__SHAPE_FAIL("head_matmul: x %s has H = %d heads of K = %d, so w %s must be [%d, %d, N] (one "
                              "K x N matrix per head; reshape x to [..., H, K] or w to [H, K, N])",
                              mf_shape_str(x, sx, 64), H, K, mf_shape_str(w, sw, 64), H, K);
    for (i = 0; i < x->ndim - 1; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = w->shape[2];
    mf__set_shape(out, x->ndim, shape);
    out->iarg[MF__ARG_HM_ROWS] = (int)(x->ne / ((int64_t)H * K));
    out->iarg[MF__ARG_HM_H] = H; out->iarg[MF__ARG_HM_K] = K; out->iarg[MF__ARG_HM_N] = w->shape[2];
    return 0;
}
static void mf__head_matmul_forward(mf_ctx *ctx, mf_tensor *out) {
    int R = out->iarg[MF__ARG_HM_ROWS], H = out->iarg[MF__ARG_HM_H], K = out->iarg[MF__ARG_HM_K];
    int N = out->iarg[MF__ARG_HM_N];
    mf__gemm_ld(ctx, 0, 0, R, N, K, out->src[0]->data, H * K, K, out->src[1]->data, N, (int64_t)K * N, 0.0f,
                out->data, H * N, N, H);
}
static void mf__head_matmul_backward(mf_ctx *ctx, mf_tensor *out) {
    int R = out->iarg[MF__ARG_HM_ROWS], H = out->iarg[MF__ARG_HM_H], K = out->iarg[MF__ARG_HM_K];
    int N = out->iarg[MF__ARG_HM_N], ax, aw;
    const float *x = out->src[0]->data, *w = out->src[1]->data, *dy = out->grad;
    float *dx = mf__g_claim(out->src[0], &ax), *dw;
    if (dx) /* dx_h = dy_h w_h^T */
        mf__gemm_ld(ctx, 0, 1, R, K, N, dy, H * N, N, w, N, (int64_t)K * N, ax ? 0.0f : 1.0f, dx, H * K, K, H);
    dw = mf__g_claim(out->src[1], &aw);
    if (dw) /* dw_h = x_h^T dy_h over all rows */
        mf__gemm_ld(ctx, 1, 0, K, N, R, x, H * K, K, dy, H * N, N, aw ? 0.0f : 1.0f, dw, N, (int64_t)K * N, H);
}
static const mf__op mf__op_head_matmul = { "head_matmul", 2, mf__head_matmul_shape, mf__head_matmul_forward,
                                           mf__head_matmul_backward, MF__OP_PROPS(MF__OP_ASSIGNS | MF__OP_BF16) };
MFDEF mf_tensor *mf_head_matmul(mf_ctx *ctx, mf_tensor *x, mf_tensor *w) {
    return mf__finish(ctx, mf__begin(ctx, &mf__op_head_matmul, x, w, NULL, NULL));
}

/* sum of x[0..n) in MF__AW lanes (then across the lanes) */
static float mf__vsum(const float *x, int n) {
    mf__av s = mf__av_zero();
    int j = 0;
    float r;
    for (; j + MF__AW <= n; j += MF__AW) s = mf__av_add(s, mf__av_load(x + j));
    r = mf__av_hsum(s);
    for (; j < n; j++) r += x[j];
    return r;
}
/* column sums over rows: cols[j] += sum_r a[r][j] (* b[r][j] when b), a and b [rows][D] with
   row stride D; parallel over column blocks, each column summed in row order (deterministic for
   any thread count, no shared partials). With st (layernorm): b is x and the term is
   a * (b - st[2r]) * st[2r + 1]; plain (or NULL): also plain[j] += sum_r a[r][j] in the same pass.
   Blocks as wide as the threads allow (up to 1024 columns): a
   block reads a long contiguous run of every row, which the prefetchers follow (64-column blocks
   read 256 bytes per row with a row stride of 1-4 KiB: latency bound). */
#define MF__COLSUM_MAXB 1024
static void mf__colsum(mf_ctx *ctx, const float *a, const float *b, const float *st, int64_t rows, int D,
                       float *cols, float *plain) {
#if MF__OMP
    int nt = mf__threads_for(ctx, (double)rows * D * (b ? 3 : 1));
#else
    int nt = 1;
#endif
    int bw = (D + nt - 1) / nt, nblk;
    int64_t blk;
    bw = (bw + 15) / 16 * 16;
    if (bw < 64) bw = 64;
    if (bw > MF__COLSUM_MAXB) bw = MF__COLSUM_MAXB;
    nblk = (D + bw - 1) / bw;
    MF__PARFOR(ctx, nblk, (double)rows * bw * (b ? 3 : 1))
    for (blk = 0; blk < nblk; blk++) {
        int j0 = (int)blk * bw, j1 = j0 + bw < D ? j0 + bw : D, j;
        int64_t r;
        float acc[MF__COLSUM_MAXB], acc2[MF__COLSUM_MAXB];
        for (j = 0; j < j1 - j0; j++) acc[j] = acc2[j] = 0;
        for (r = 0; r < rows; r++) {
            const float *ar = a + r * D + j0, *br = b ? b + r * D + j0 : NULL;
            if (!b) for (j = 0; j < j1 - j0; j++) acc[j] += ar[j];
            else if (!st) for (j = 0; j < j1 - j0; j++) acc[j] += ar[j] * br[j];
            else {
                float mean = st[2 * r], rstd = st[2 * r + 1];
                for (j = 0; j < j1 - j0; j++) acc[j] += ar[j] * ((br[j] - mean) * rstd);
            }
            if (plain) for (j = 0; j < j1 - j0; j++) acc2[j] += ar[j];
        }
        for (j = 0; j < j1 - j0; j++) cols[j0 + j] += acc[j];
        if (plain) for (j = 0; j < j1 - j0; j++) plain[j0 + j] += acc2[j];
    }
}
/* ---- linear: x [..., in] @ w [out, in]^T + b [out] -> [..., out] ------------------------------ */
static int mf__linear_shape(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *x = out->src[0], *w = out->src[1], *b = out->src[2];
    int shape[MF_MAX_DIMS], i;
    char sx[64], sw[64], sb[64];
    if (w->ndim != 2 || mf__last(x) != w->shape[1])
        return MF__SHAPE_FAIL("linear: x %s does not fit weight %s; the weight must be [out, in] with "
                              "in = x's last size", mf_shape_str(x, sx, 64), mf_shape_str(w, sw, 64));
    if (b && b->ne != w->shape[0])
        return MF__SHAPE_FAIL("linear: bias %s must have %d elements (the weight's out size)",
                              mf_shape_str(b, sb, 64), w->shape[0]);
    for (i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = w->shape[0];
    mf__set_shape(out, x->ndim, shape);
    return 0;
}
static void mf__linear_forward(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *x = out->src[0], *w = out->src[1], *b = out->src[2];
    int in = w->shape[1], nout = w->shape[0];
    int64_t rows = mf__rows(x);
    float *ws = mf__gemm_workspace(ctx, (int)rows, nout, in);
    double t0 = mf__gemm_t0(ctx);
    /* the bias is added in the GEMM's final store (no second pass over y) */
    if (ws) mf__ctx_gemm(ctx, 0, 1, (int)rows, nout, in, x->data, in, w->data, in, 0.0f, out->data, nout,
                         b ? b->data : NULL, ws, NULL);
    mf__gemm_t1(ctx, t0);
}
static void mf__linear_backward(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *x = out->src[0], *w = out->src[1], *b = out->src[2];
    int in = w->shape[1], nout = w->shape[0];
    int64_t rows = mf__rows(x);
    int ax, aw;
    float *dx = mf__g_claim(x, &ax), *dw, *db;
    if (dx) mf__gemm(ctx, 0, 0, (int)rows, in, nout, out->grad, 0, w->data, 0, ax ? 0.0f : 1.0f, dx, 0, 1);
    dw = mf__g_claim(w, &aw);
    db = b ? mf__g_add(ctx, b) : NULL;
    if (dw) {
        /* dW = dy^T x; the bias gradient (dy's column sums) is summed while dy's panels are packed */
        float *ws = mf__gemm_workspace(ctx, nout, in, (int)rows), *sums = NULL;
        double t0;
        int j;
        if (!ws) return;
        if (db && !(sums = (float *)mf__alloc(ctx, (size_t)nout * sizeof(float)))) return;
        if (sums) memset(sums, 0, (size_t)nout * sizeof(float));
        t0 = mf__gemm_t0(ctx); /* (with dy's column sums: the bias gradient) */
        mf__ctx_gemm(ctx, 1, 0, nout, in, (int)rows, out->grad, nout, x->data, in, aw ? 0.0f : 1.0f, dw, in, NULL, ws,
                     sums);
        mf__gemm_t1(ctx, t0);
        if (sums) for (j = 0; j < nout; j++) db[j] += sums[j];
    } else if (db) mf__colsum(ctx, out->grad, NULL, NULL, rows, nout, db, NULL);
}
static const mf__op mf__op_linear = { "linear", 2, mf__linear_shape, mf__linear_forward, mf__linear_backward,
                                      MF__OP_PROPS(MF__OP_ASSIGNS | MF__OP_BF16) };
MFDEF mf_tensor *mf_linear(mf_ctx *ctx, mf_tensor *x, mf_tensor *w, mf_tensor *b) {
    return mf__finish(ctx, mf__begin(ctx, &mf__op_linear, x, w, b, NULL));
}

/* ---- add / sub / mul with a broadcast operand ---------------------------------------------------
   The smaller operand repeats every (its size) elements of the larger. */
enum { MF__ADD, MF__SUB, MF__MUL };
enum { MF__ARG_BINARY_KIND }; /* iarg: which of the three */
static int mf__binary_shape(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *a = out->src[0], *b = out->src[1];
    mf_tensor *big = b->ne > a->ne ? b : a, *small = b->ne > a->ne ? a : b;
    int i, lead = 0;
    char sa[64], sb[64];
    while (lead < small->ndim - 1 && small->shape[lead] == 1) lead++; /* [1, D] broadcasts like [D] */
    if (small->ne != 1) {
        int n = small->ndim - lead, ok = n <= big->ndim;
        for (i = 0; ok && i < n; i++) ok = small->shape[lead + i] == big->shape[big->ndim - n + i];
        if (!ok)
            return MF__SHAPE_FAIL("%s: shapes %s and %s do not broadcast; the smaller must equal the "
                                  "trailing dims of the larger or have one element", out->op->name,
                                  mf_shape_str(a, sa, 64), mf_shape_str(b, sb, 64));
    }
    mf__set_shape(out, big->ndim, big->shape);
    return 0;
}
/* y = s * x (assign) or y += s * x, elementwise, in parallel */
static void mf__axpy(mf_ctx *ctx, int64_t n, float s, const float *x, float *y, int assign) {
    int64_t i;
    if (assign) {
        MF__PARFOR(ctx, n, MF__COST_STREAM)
        for (i = 0; i < n; i++) y[i] = s * x[i];
    } else {
        MF__PARFOR(ctx, n, MF__COST_STREAM)
        for (i = 0; i < n; i++) y[i] += s * x[i];
    }
}
/* out = a (op) b where one operand repeats: rows of the larger, each row over the smaller one */
static void mf__binary_forward(mf_ctx *ctx, mf_tensor *out) {
    const float *a = out->src[0]->data, *b = out->src[1]->data;
    int64_t na = out->src[0]->ne, nb = out->src[1]->ne, n = out->ne, i;
    int kind = out->iarg[MF__ARG_BINARY_KIND];
    if (na == n && nb == n) { /* same shapes: one flat loop the compiler vectorises */
        float *y = out->data;
        MF__PARFOR(ctx, n, MF__COST_STREAM)
        for (i = 0; i < n; i++) y[i] = kind == MF__ADD ? a[i] + b[i] : kind == MF__SUB ? a[i] - b[i] : a[i] * b[i];
        return;
    }
    if (na == 1 || nb == 1) {
        MF__PARFOR(ctx, n, MF__COST_STREAM)
        for (i = 0; i < n; i++) {
            float x = a[na == n ? i : 0], y = b[nb == n ? i : 0];
            out->data[i] = kind == MF__ADD ? x + y : kind == MF__SUB ? x - y : x * y;
        }
        return;
    }
    { /* the smaller operand (ns elements) repeats n / ns times */
        int64_t ns = na < nb ? na : nb, reps = n / ns, r;
        MF__PARFOR(ctx, reps, (double)ns * MF__COST_STREAM)
        for (r = 0; r < reps; r++) {
            const float *x = na == n ? a + r * ns : a, *z = nb == n ? b + r * ns : b;
            float *y = out->data + r * ns;
            int64_t k;
            for (k = 0; k < ns; k++) y[k] = kind == MF__ADD ? x[k] + z[k] : kind == MF__SUB ? x[k] - z[k] : x[k] * z[k];
        }
    }
}
static void mf__binary_backward(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *A = out->src[0], *B = out->src[1];
    float *da, *db;
    const float *g = out->grad;
    int64_t na = A->ne, nb = B->ne, n = out->ne, i;
    int kind = out->iarg[MF__ARG_BINARY_KIND], aa, ab;
    if (na == n && nb == n) { /* same shapes (residual adds): elementwise, in parallel */
        if (kind != MF__MUL) { /* (an input sharing out's gradient buffer has it already) */
            float sb = kind == MF__SUB ? -1.0f : 1.0f;
            if (A->grad != g && (da = mf__g_claim(A, &aa)) != NULL) mf__axpy(ctx, n, 1.0f, g, da, aa);
            if (B->grad != g && (db = mf__g_claim(B, &ab)) != NULL) mf__axpy(ctx, n, sb, g, db, ab);
            return;
        }
        da = mf__g_add(ctx, A);
        db = mf__g_add(ctx, B);
        MF__PARFOR(ctx, n, 2)
        for (i = 0; i < n; i++) {
            if (da) da[i] += g[i] * B->data[i];
            if (db) db[i] += g[i] * A->data[i];
        }
        return;
    }
    da = A->grad == g ? NULL : mf__g_add(ctx, A);
    db = B->grad == g ? NULL : mf__g_add(ctx, B);
    if (na > 1 && nb > 1 && kind != MF__MUL && (na < nb ? na : nb) <= 0x7fffffff) {
        /* a repeating operand under add / sub: the larger one elementwise, the smaller one summed
           over its repeats (column sums: parallel, each element summed in repeat order) */
        int64_t ns = na < nb ? na : nb;
        float *dbig = na == n ? da : db, *dsmall = na == n ? db : da;
        float sbig = (na == n || kind == MF__ADD) ? 1.0f : -1.0f, ssmall = (na == n && kind == MF__SUB) ? -1.0f : 1.0f;
        if (dbig) {
            MF__PARFOR(ctx, n, MF__COST_STREAM)
            for (i = 0; i < n; i++) dbig[i] += sbig * g[i];
        }
        if (dsmall) {
            if (ssmall == 1.0f) mf__colsum(ctx, g, NULL, NULL, n / ns, (int)ns, dsmall, NULL);
            else {
                float *tmp = (float *)mf__calloc(ctx, (size_t)ns * sizeof(float));
                if (!tmp) return;
                mf__colsum(ctx, g, NULL, NULL, n / ns, (int)ns, tmp, NULL);
                for (i = 0; i < ns; i++) dsmall[i] -= tmp[i];
            }
        }
        return;
    }
    /* the general case: the larger operand elementwise; the smaller summed over its repeats
       (serial, no races) */
    for (i = 0; i < n; i++) {
        int64_t ia = na == n ? i : i % na, ib = nb == n ? i : i % nb;
        if (da) da[ia] += kind == MF__MUL ? g[i] * B->data[ib] : g[i];
        if (db) db[ib] += kind == MF__MUL ? g[i] * A->data[ia] : kind == MF__SUB ? -g[i] : g[i];
    }
}
static const mf__op mf__op_add = { "add", 2, mf__binary_shape, mf__binary_forward, mf__binary_backward,
                                   MF__OP_PROPS(MF__OP_ASSIGNS | MF__OP_PASS_BOTH) };
static const mf__op mf__op_sub = { "sub", 2, mf__binary_shape, mf__binary_forward, mf__binary_backward,
                                   MF__OP_PROPS(MF__OP_ASSIGNS | MF__OP_PASS_FIRST) };
static const mf__op mf__op_mul = { "mul", 2, mf__binary_shape, mf__binary_forward, mf__binary_backward,
                                   MF__OP_PROPS(MF__OP_ASSIGNS) };
static mf_tensor *mf__binary(mf_ctx *ctx, const mf__op *op, int kind, mf_tensor *a, mf_tensor *b) {
    mf_tensor *t = mf__begin(ctx, op, a, b, NULL, NULL);
    if (t) t->iarg[MF__ARG_BINARY_KIND] = kind;
    return mf__finish(ctx, t);
}
MFDEF mf_tensor *mf_add(mf_ctx *ctx, mf_tensor *a, mf_tensor *b) { return mf__binary(ctx, &mf__op_add, MF__ADD, a, b); }
MFDEF mf_tensor *mf_sub(mf_ctx *ctx, mf_tensor *a, mf_tensor *b) { return mf__binary(ctx, &mf__op_sub, MF__SUB, a, b); }
MFDEF mf_tensor *mf_mul(mf_ctx *ctx, mf_tensor *a, mf_tensor *b) { return mf__binary(ctx, &mf__op_mul, MF__MUL, a, b); }

/* ---- elementwise unary ops: y = f(x) -------------------------------------------------------------- */
enum { MF__SCALE, MF__RELU, MF__GELU, MF__GELU_TANH, MF__SIGMOID, MF__SILU, MF__EXP, MF__ELU1, MF__RECIP };
enum { MF__ARG_UNARY_KIND };  /* iarg: f, one of the above */
enum { MF__FARG_UNARY_S };    /* farg: f's parameter (scale's factor) */
static int mf__same_shape(mf_ctx *ctx, mf_tensor *out) {
    (void)ctx;
    mf__set_shape(out, out->src[0]->ndim, out->src[0]->shape);
    return 0;
}
#define MF__SQRT_2_OVER_PI 0.7978845608028654f
static MF__HD float mf__sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
/* f and f' of one element, for every kind but MF__GELU (vectorised below; the device has
   mf__cu_gelu): the cases of a switch on the kind, assigning y = f(v) and d = f'(v) (y: f's
   output, read only where needed). The CPU loops and the CUDA unary kernels expand the same
   cases; as switch cases (not a function) they compile as they always have, down to the NaN a
   multiply keeps. */
#define MF__UNARY_F_CASES(v, s, y)                                                                      \
    case MF__SCALE: y = s * v; break;                                                                   \
    case MF__RELU: y = v > 0 ? v : 0; break;                                                            \
    case MF__GELU_TANH: y = 0.5f * v * (1.0f + tanhf(MF__SQRT_2_OVER_PI * (v + 0.044715f * v * v * v))); break; \
    case MF__SIGMOID: y = mf__sigmoidf(v); break;                                                       \
    case MF__SILU: y = v * mf__sigmoidf(v); break;                                                      \
    case MF__ELU1: y = v > 0 ? v + 1.0f : expf(v); break;                                               \
    case MF__RECIP: y = 1.0f / v; break;                                                                \
    default: y = expf(v); break;
#define MF__UNARY_DF_CASES(v, y, s, d)                                                                  \
    case MF__SCALE: d = s; break;                                                                       \
    case MF__RELU: d = v > 0 ? 1.0f : 0.0f; break;                                                      \
    case MF__GELU_TANH: {                                                                               \
        float u = MF__SQRT_2_OVER_PI * (v + 0.044715f * v * v * v), th = tanhf(u);                      \
        d = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * MF__SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * v * v); \
        break;                                                                                          \
    }                                                                                                   \
    case MF__SIGMOID: d = y * (1.0f - y); break;                                                        \
    case MF__SILU: { float sg = mf__sigmoidf(v); d = sg * (1.0f + v * (1.0f - sg)); break; }            \
    case MF__ELU1: d = v > 0 ? 1.0f : y; break;                                                         \
    case MF__RECIP: d = -y * y; break;                                                                  \
    default: d = y; break;
/* The exact GELU x Phi(x) and its derivative Phi(x) + x phi(x), without erf or exp: gelu(x) =
   x + gelu(-x) and gelu'(x) = 1 - gelu'(-x) fold every x onto -|x|, where both are smooth and
   small in the tail; [0, 7.75] is cut into 16 cells of width 1/2 (cell k = round(2|x|), centred on
   k/2) with a degree-6 polynomial per cell and function in s = |x| - k/2, a table lookup (one
   permute on AVX-512) per coefficient: no division, no exp, and the tail keeps its accuracy.
   Error against a double reference, every float in [-10, 10]: at most 1 ulp of the result +
   1.2e-8 (tests/test_ops.c checks 1 ulp + 5e-8 on a grid). Past |x| = 7.75 the folded value is 0
   (|gelu| < 4e-14, |gelu' - 0 or 1| < 3e-13 there). The table comes from tests/gelu_table.py. */
/* generated by tests/gelu_table.py: [function: gelu(-|x|), gelu'(-|x|)][power of s][cell]; an
   initialiser, so that metaformer_cuda.cuh can keep a __constant__ copy for its kernels */
#define MF__GELU_TAB { \
    { /* gelu */ \
        {0.000000000e+00f, -1.542687714e-01f, -1.586552560e-01f, -1.002108008e-01f, -4.550026357e-02f, -1.552416291e-02f, -4.049694166e-03f, -8.142017759e-04f, \
         -1.266849722e-04f, -1.528952816e-05f, -1.433257808e-06f, -1.044425915e-07f, -5.919525758e-09f, -2.610400507e-10f, -8.958687958e-12f, -2.393168671e-13f}, \
        {-5.000000000e-01f, -1.325049549e-01f, 8.331543952e-02f, 1.274692267e-01f, 8.523183316e-02f, 3.761108220e-02f, 1.194563787e-02f, 2.821757458e-03f, \
         5.036501680e-04f, 6.852972729e-05f, 7.147129963e-06f, 5.733821240e-07f, 3.547311422e-08f, 1.695442564e-09f, 6.268827124e-11f, 1.795010646e-12f}, \
        {3.989422619e-01f, 3.080571592e-01f, 1.209853888e-01f, -1.618969068e-02f, -5.399097502e-02f, -3.724764287e-02f, -1.551146805e-02f, -4.472497385e-03f, \
         -9.368113242e-04f, -1.458517509e-04f, -1.709733988e-05f, -1.521244940e-06f, -1.032924786e-07f, -5.372733813e-09f, -2.146839373e-10f, -6.604028956e-12f}, \
        {0.000000000e+00f, -1.100094840e-01f, -1.209811047e-01f, -5.666898191e-02f, -3.793590849e-06f, 1.643324643e-02f, 1.108085644e-02f, 4.200150259e-03f, \
         1.070577418e-03f, 1.947292621e-04f, 2.599404615e-05f, 2.587013341e-06f, 1.938654322e-07f, 1.101209168e-08f, 4.763788808e-10f, 1.574886228e-11f}, \
        {-6.648635864e-02f, -3.392244130e-02f, 2.016122267e-02f, 3.608852997e-02f, 1.799816452e-02f, 5.027790903e-04f, -4.062681459e-03f, -2.484156052e-03f, \
         -8.253207197e-04f, -1.813434355e-04f, -2.811536615e-05f, -3.171904154e-06f, -2.649980217e-07f, -1.657825877e-08f, -7.825248782e-10f, -2.802065351e-11f}, \
        {0.000000000e+00f, 2.211173996e-02f, 1.599512994e-02f, -2.570379293e-03f, -8.876993321e-03f, -4.283022135e-03f, -3.960631147e-05f, 8.362617809e-04f, \
         4.392575065e-04f, 1.253862283e-04f, 2.354829485e-05f, 3.105375299e-06f, 2.967831563e-07f, 2.093527840e-08f, 1.102914204e-09f, 4.374752297e-11f}, \
        {9.844673797e-03f, 3.031870583e-03f, -5.952886771e-03f, -4.849890713e-03f, 4.122084065e-04f, 1.928927843e-03f, 7.805186324e-04f, -4.720239667e-05f, \
         -1.472353906e-04f, -6.165756349e-05f, -1.447959676e-05f, -2.245259566e-06f, -2.441283300e-07f, -1.918642667e-08f, -1.109738634e-09f, -4.779972945e-11f}, \
    }, \
    { /* dgelu */ \
        {5.000000000e-01f, 1.325048804e-01f, -8.331546932e-02f, -1.274691969e-01f, -8.523180336e-02f, -3.761108592e-02f, -1.194564719e-02f, -2.821760252e-03f, \
         -5.036496441e-04f, -6.852915976e-05f, -7.146945791e-06f, -5.733472221e-07f, -3.546870886e-08f, -1.695051766e-09f, -6.266322877e-11f, -1.793831468e-12f}, \
        {-7.978842854e-01f, -6.161143184e-01f, -2.419709116e-01f, 3.237933666e-02f, 1.079820096e-01f, 7.449531555e-02f, 3.102292866e-02f, 8.944985457e-03f, \
         1.873621019e-03f, 2.917041420e-04f, 3.419507630e-05f, 3.042588332e-06f, 2.065998643e-07f, 1.074698819e-08f, 4.294772871e-10f, 1.321374867e-11f}, \
        {0.000000000e+00f, 3.300611675e-01f, 3.629560769e-01f, 1.699918956e-01f, 1.000360417e-08f, -4.929836094e-02f, -3.323886916e-02f, -1.259935368e-02f, \
         -3.211923875e-03f, -5.844054394e-04f, -7.805291534e-05f, -7.774475307e-06f, -5.832951047e-07f, -3.318716324e-08f, -1.438819397e-09f, -4.770328924e-11f}, \
        {2.659294605e-01f, 1.356876940e-01f, -8.063293248e-02f, -1.443500668e-01f, -7.199732959e-02f, -2.013780875e-03f, 1.625133120e-02f, 9.937390685e-03f, \
         3.301421180e-03f, 7.253191434e-04f, 1.124277987e-04f, 1.267921380e-05f, 1.058718567e-06f, 6.618303416e-08f, 3.120743886e-09f, 1.115956702e-10f}, \
        {0.000000000e+00f, -1.123016849e-01f, -8.065590262e-02f, 1.365358848e-02f, 4.499119148e-02f, 2.134198695e-02f, 7.618411360e-07f, -4.239885136e-03f, \
         -2.186105354e-03f, -6.153250579e-04f, -1.139638189e-04f, -1.480916308e-05f, -1.393090770e-06f, -9.660240607e-08f, -4.995988512e-09f, -1.942547373e-10f}, \
        {-5.881222710e-02f, -1.815794222e-02f, 3.552607819e-02f, 2.903465368e-02f, -2.398540964e-03f, -1.153093483e-02f, -4.692794755e-03f, 2.709509863e-04f, \
         8.811950684e-04f, 3.708181321e-04f, 8.741635247e-05f, 1.360606075e-05f, 1.485161079e-06f, 1.172005710e-07f, 6.808315245e-09f, 2.946020650e-10f}, \
        {0.000000000e+00f, 2.229491249e-02f, 8.705815300e-03f, -1.025249436e-02f, -7.757877465e-03f, 9.328903398e-04f, 2.523966599e-03f, 7.502376684e-04f, \
         -1.300299045e-04f, -1.485388784e-04f, -4.837950837e-05f, -9.196666724e-06f, -1.164453010e-06f, -1.035739885e-07f, -6.656395435e-09f, -3.144534633e-10f}, \
    }, \
}
static const float mf__gelu_tab[2][7][16] = MF__GELU_TAB;
/* worst fit error before rounding to float: gelu 3.1e-09, gelu' 8.9e-09 */
/* the folded function (c = mf__gelu_tab[0]: gelu(-a), [1]: gelu'(-a)) at a = |x| >= 0; NaN stays
   NaN. Inline and unrolled: called out of line, the lookups' setup is redone per vector. */
static inline mf__av mf__av_gelu_fold(mf__av a, const float (*c)[16]) {
    mf__av k = mf__av_min(mf__av_round(mf__av_add(a, a)), mf__av_set1(15.0f));
    mf__av s = mf__av_fma(k, mf__av_set1(-0.5f), a), p = mf__av_lut16(c[6], k); /* s: exact (Sterbenz) */
    p = mf__av_fma(p, s, mf__av_lut16(c[5], k));
    p = mf__av_fma(p, s, mf__av_lut16(c[4], k));
    p = mf__av_fma(p, s, mf__av_lut16(c[3], k));
    p = mf__av_fma(p, s, mf__av_lut16(c[2], k));
    p = mf__av_fma(p, s, mf__av_lut16(c[1], k));
    p = mf__av_fma(p, s, mf__av_lut16(c[0], k));
    return mf__av_ifneg(mf__av_sub(mf__av_set1(7.75f), a), mf__av_zero(), p);
}
/* gelu(x) (grad 0) or gelu'(x) (grad 1), unfolded */
static inline mf__av mf__av_gelu(mf__av x, int grad) {
    mf__av h = mf__av_gelu_fold(mf__av_abs(x), mf__gelu_tab[grad]);
    return mf__av_ifneg(x, h, grad ? mf__av_sub(mf__av_set1(1.0f), h) : mf__av_add(x, h));
}
/* y = gelu(x) (g NULL), or g * gelu'(x) */
static mf__av mf__av_gelu_step(mf__av v, const float *g, mf__am mk, int64_t i, int masked) {
    if (!g) return mf__av_gelu(v, 0);
    return mf__av_mul(masked ? mf__av_loadm(g + i, mk) : mf__av_load(g + i), mf__av_gelu(v, 1));
}
/* relu: y = x > 0 ? x : 0 (g NULL), or g * (x > 0 ? 1 : 0): the scalar cases' values bit for bit
   (g * 0 keeps its sign and NaN), without their unpredictable branch */
static mf__av mf__av_relu_step(mf__av v, const float *g, mf__am mk, int64_t i, int masked) {
    mf__av z = mf__av_zero();
    if (!g) return mf__av_iflt(z, v, v, z);
    return mf__av_mul(masked ? mf__av_loadm(g + i, mk) : mf__av_load(g + i), mf__av_iflt(z, v, mf__av_set1(1.0f), z));
}
static mf__av mf__av_act_step(int kind, mf__av v, const float *g, mf__am mk, int64_t i, int masked) {
    return kind == MF__GELU ? mf__av_gelu_step(v, g, mk, i, masked) : mf__av_relu_step(v, g, mk, i, masked);
}
/* the vectorised activations (kind MF__GELU or MF__RELU): y = act(x) (g NULL), y = g * act'(x)
   (add 0) or y += g * act'(x) (add 1) */
static void mf__act_run(mf_ctx *ctx, int kind, const float *x, const float *g, float *y, int64_t n, int add) {
    int64_t nb = (n + 4095) / 4096, b;
    MF__PARFOR(ctx, nb, 4096.0 * 6)
    for (b = 0; b < nb; b++) {
        int64_t i = b * 4096, end = i + 4096 < n ? i + 4096 : n;
        for (; i + MF__AW <= end; i += MF__AW) {
            mf__av r = mf__av_act_step(kind, mf__av_load(x + i), g, mf__av_mask(MF__AW), i, 0);
            mf__av_store(y + i, add ? mf__av_add(mf__av_load(y + i), r) : r);
        }
        if (i < end) { /* vector tail */
            mf__am mk = mf__av_mask((int)(end - i));
            mf__av r = mf__av_act_step(kind, mf__av_loadm(x + i, mk), g, mk, i, 1);
            mf__av_storem(y + i, mk, add ? mf__av_add(mf__av_loadm(y + i, mk), r) : r);
        }
    }
}
static void mf__unary_forward(mf_ctx *ctx, mf_tensor *out) {
    const float *x = out->src[0]->data;
    float *y = out->data, s = out->farg[MF__FARG_UNARY_S];
    int64_t n = out->ne, i;
    int kind = out->iarg[MF__ARG_UNARY_KIND];
    if (kind == MF__GELU || kind == MF__RELU) { /* the common FFN activations: vectorised */
        mf__act_run(ctx, kind, x, NULL, y, n, 0);
        return;
    }
    MF__PARFOR(ctx, n, 8)
    for (i = 0; i < n; i++) {
        float v = x[i];
        switch (kind) { MF__UNARY_F_CASES(v, s, y[i]) }
    }
}
static void mf__unary_backward(mf_ctx *ctx, mf_tensor *out) {
    const float *x = out->src[0]->data, *y = out->data, *g = out->grad;
    int64_t n = out->ne, i;
    int kind = out->iarg[MF__ARG_UNARY_KIND], assign;
    float *dx = mf__g_claim(out->src[0], &assign), s = out->farg[MF__FARG_UNARY_S];
    if (!dx) return;
    if (dx == g) assign = 1; /* the input's gradient shares the buffer (mf__grad_shared_src): in place */
    if (kind == MF__GELU || kind == MF__RELU) {
        mf__act_run(ctx, kind, x, g, dx, n, !assign);
        return;
    }
    MF__PARFOR(ctx, n, 8)
    for (i = 0; i < n; i++) {
        float v = x[i], d;
        switch (kind) { MF__UNARY_DF_CASES(v, y[i], s, d) }
        dx[i] = assign ? g[i] * d : dx[i] + g[i] * d;
    }
}
/* one descriptor per kind (the op's name is its kind's): the same kernels and shape; the FFN's
   activations may be stored in bf16 */
#define MF__UNARY_OP(nm, props) \
    static const mf__op mf__op_##nm = { #nm, 1, mf__same_shape, mf__unary_forward, mf__unary_backward, \
                                        MF__OP_PROPS(MF__OP_UNARY | MF__OP_ASSIGNS | (props)) }
MF__UNARY_OP(scale, 0);
MF__UNARY_OP(relu, MF__OP_BF16);
MF__UNARY_OP(gelu, MF__OP_BF16);
MF__UNARY_OP(sigmoid, 0);
MF__UNARY_OP(silu, 0);
MF__UNARY_OP(exp, 0);
MF__UNARY_OP(elu1, 0);
MF__UNARY_OP(reciprocal, 0);
static mf_tensor *mf__unary(mf_ctx *ctx, const mf__op *op, int kind, mf_tensor *x, float s) {
    mf_tensor *t = mf__begin(ctx, op, x, NULL, NULL, NULL);
    if (t) { t->iarg[MF__ARG_UNARY_KIND] = kind; t->farg[MF__FARG_UNARY_S] = s; }
    return mf__finish(ctx, t);
}
MFDEF mf_tensor *mf_scale(mf_ctx *ctx, mf_tensor *x, float s) { return mf__unary(ctx, &mf__op_scale, MF__SCALE, x, s); }
MFDEF mf_tensor *mf_relu(mf_ctx *ctx, mf_tensor *x) { return mf__unary(ctx, &mf__op_relu, MF__RELU, x, 0); }
MFDEF mf_tensor *mf_gelu(mf_ctx *ctx, mf_tensor *x, int tanh_approx) {
    return mf__unary(ctx, &mf__op_gelu, tanh_approx ? MF__GELU_TANH : MF__GELU, x, 0);
}
MFDEF mf_tensor *mf_sigmoid(mf_ctx *ctx, mf_tensor *x) { return mf__unary(ctx, &mf__op_sigmoid, MF__SIGMOID, x, 0); }
MFDEF mf_tensor *mf_silu(mf_ctx *ctx, mf_tensor *x) { return mf__unary(ctx, &mf__op_silu, MF__SILU, x, 0); }
MFDEF mf_tensor *mf_exp(mf_ctx *ctx, mf_tensor *x) { return mf__unary(ctx, &mf__op_exp, MF__EXP, x, 0); }
MFDEF mf_tensor *mf_elu1(mf_ctx *ctx, mf_tensor *x) { return mf__unary(ctx, &mf__op_elu1, MF__ELU1, x, 0); }
MFDEF mf_tensor *mf_reciprocal(mf_ctx *ctx, mf_tensor *x) { return mf__unary(ctx, &mf__op_reciprocal, MF__RECIP, x, 0); }

/* ---- softmax over the last axis, optionally causal: x [..., Tq, Tk] ------------------------------
   Query i of a [Tq, Tk] block sees keys 0 .. i + Tk - Tq; a row that sees no key is all zeros (no NaN). */
enum { MF__ARG_SOFTMAX_CAUSAL }; /* iarg */
static int mf__softmax_shape(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *x = out->src[0];
    char s[64];
    if (out->iarg[MF__ARG_SOFTMAX_CAUSAL] && x->ndim < 2)
        return MF__SHAPE_FAIL("softmax: a causal softmax needs scores [..., Tq, Tk], got %s", mf_shape_str(x, s, 64));
    return mf__same_shape(ctx, out);
}
/* number of visible keys of row r */
static int mf__visible(const mf_tensor *x, int causal, int64_t r) {
    int tk = mf__last(x), tq, v;
    if (!causal) return tk;
    tq = x->shape[x->ndim - 2];
    v = (int)(r % tq) + tk - tq + 1;
    return v < 0 ? 0 : v > tk ? tk : v;
}
static void mf__softmax_forward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    int n = mf__last(x), causal = out->iarg[MF__ARG_SOFTMAX_CAUSAL];
    int64_t rows = mf__rows(x), r;
    MF__PARFOR(ctx, rows, 4 * n)
    for (r = 0; r < rows; r++) {
        const float *xr = x->data + r * n;
        float *yr = out->data + r * n, mx = -INFINITY, sum = 0;
        int j, vis = mf__visible(x, causal, r);
        for (j = 0; j < vis; j++) mx = xr[j] > mx ? xr[j] : mx;
        for (j = 0; j < vis; j++) { yr[j] = expf(xr[j] - mx); sum += yr[j]; }
        for (j = 0; j < vis; j++) yr[j] /= sum;
        for (; j < n; j++) yr[j] = 0;
    }
}
static void mf__softmax_backward(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]);
    int n = mf__last(out);
    int64_t rows = mf__rows(out), r;
    if (!dx) return;
    MF__PARFOR(ctx, rows, 4 * n)
    for (r = 0; r < rows; r++) { /* dx = y * (dy - sum(dy * y)) */
        const float *y = out->data + r * n, *g = out->grad + r * n;
        float dot = 0;
        int j;
        for (j = 0; j < n; j++) dot += g[j] * y[j];
        for (j = 0; j < n; j++) dx[r * n + j] += y[j] * (g[j] - dot);
    }
}
static const mf__op mf__op_softmax = { "softmax", 1, mf__softmax_shape, mf__softmax_forward, mf__softmax_backward,
                                       MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_softmax(mf_ctx *ctx, mf_tensor *x, int causal) {
    mf_tensor *t = mf__begin(ctx, &mf__op_softmax, x, NULL, NULL, NULL);
    if (t) t->iarg[MF__ARG_SOFTMAX_CAUSAL] = causal != 0;
    return mf__finish(ctx, t);
}

/* row log-sum-exp of n values, in two parts: returns log(sum(exp(x - max))) and sets *mx to the
   max. Callers use (x - mx) - result: adding mx first would round the result to float at the
   logits' magnitude (an error of 6e-5 at |x| ~ 1000). Vectorised (mf__av_exp_ieee, ~2 ulp; a NaN
   or +inf in the row makes the result NaN, as expf does) with a scalar tail: a loss over a small
   vocabulary is otherwise mostly scalar expf calls. */
static float mf__lse(const float *x, int n, float *mx_out) {
    mf__av vmx = mf__av_set1(-INFINITY), acc = mf__av_zero();
    float lanes[MF__AW], mx = -INFINITY, sum;
    int j, k;
    for (j = 0; j + MF__AW <= n; j += MF__AW) vmx = mf__av_max(vmx, mf__av_load(x + j));
    mf__av_store(lanes, vmx);
    for (k = 0; k < MF__AW; k++) mx = lanes[k] > mx ? lanes[k] : mx;
    for (; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    for (j = 0; j + MF__AW <= n; j += MF__AW) acc = mf__av_add(acc, mf__av_exp_ieee(mf__av_sub(mf__av_load(x + j), mf__av_set1(mx))));
    sum = mf__av_hsum(acc);
    for (; j < n; j++) sum += expf(x[j] - mx);
    *mx_out = mx;
    return logf(sum);
}

/* ---- log_softmax over the last axis ---------------------------------------------------------- */
static void mf__log_softmax_forward(mf_ctx *ctx, mf_tensor *out) {
    const float *x = out->src[0]->data;
    int n = mf__last(out);
    int64_t rows = mf__rows(out), r;
    MF__PARFOR(ctx, rows, 4 * n)
    for (r = 0; r < rows; r++) {
        float mx, l = mf__lse(x + r * n, n, &mx);
        int j;
        for (j = 0; j < n; j++) out->data[r * n + j] = (x[r * n + j] - mx) - l;
    }
}
static void mf__log_softmax_backward(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]);
    int n = mf__last(out);
    int64_t rows = mf__rows(out), r;
    if (!dx) return;
    MF__PARFOR(ctx, rows, 4 * n)
    for (r = 0; r < rows; r++) { /* dx = dy - softmax * sum(dy) */
        const float *y = out->data + r * n, *g = out->grad + r * n;
        float sum = 0;
        int j;
        for (j = 0; j < n; j++) sum += g[j];
        for (j = 0; j < n; j++) dx[r * n + j] += g[j] - expf(y[j]) * sum;
    }
}
static const mf__op mf__op_log_softmax = { "log_softmax", 1, mf__same_shape, mf__log_softmax_forward,
                                           mf__log_softmax_backward, MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_log_softmax(mf_ctx *ctx, mf_tensor *x) {
    return mf__finish(ctx, mf__begin(ctx, &mf__op_log_softmax, x, NULL, NULL, NULL));
}

/* ---- cross-entropy fused with softmax: logits [..., V], one target per row -> [1] ----------------
   aux: the targets (copied); saved: per row max and log-sum-exp(x - max) */
enum { MF__ARG_CE_IGNORE, MF__ARG_CE_COUNT }; /* iarg: the ignore index; the rows counted (set by the shape) */
static int mf__cross_entropy_shape(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    const int32_t *tg = (const int32_t *)out->aux;
    int64_t rows = mf__rows(x), r, count = 0;
    int V = mf__last(x), one = 1;
    for (r = 0; r < rows; r++) {
        if (tg[r] == out->iarg[MF__ARG_CE_IGNORE]) continue;
        if (tg[r] < 0 || tg[r] >= V)
            return MF__SHAPE_FAIL("cross_entropy: target %d at row %lld is outside [0, %d) (the logits' "
                                  "last size) and is not the ignore index %d", (int)tg[r], (long long)r, V,
                                  out->iarg[MF__ARG_CE_IGNORE]);
        count++;
    }
    out->iarg[MF__ARG_CE_COUNT] = (int)count;
    mf__set_shape(out, 1, &one);
    return 0;
}
static void mf__cross_entropy_forward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    const int32_t *tg = (const int32_t *)out->aux;
    int V = mf__last(x);
    int64_t rows = mf__rows(x), r;
    float *lse = out->saved = (float *)mf__alloc(ctx, 2 * (size_t)rows * sizeof(float));
    double total = 0;
    if (!lse) return;
    MF__PARFOR(ctx, rows, 4 * V) /* lse[2r] the row max, lse[2r + 1] log(sum(exp(x - max))) */
    for (r = 0; r < rows; r++) lse[2 * r + 1] = mf__lse(x->data + r * V, V, &lse[2 * r]);
    for (r = 0; r < rows; r++)
        if (tg[r] != out->iarg[MF__ARG_CE_IGNORE])
            total += ((double)lse[2 * r] - x->data[r * V + tg[r]]) + lse[2 * r + 1];
    out->data[0] = out->iarg[MF__ARG_CE_COUNT] ? (float)(total / out->iarg[MF__ARG_CE_COUNT]) : 0.0f;
}
/* y = g softmax(x) (assign) or y += g softmax(x), one row of n logits with max mx and
   log-sum-exp(x - mx) l (mf__lse) */
static void mf__ce_grad_row(const float *x, int n, float mx, float l, float g, float *y, int assign) {
    mf__av vm = mf__av_set1(mx), vl = mf__av_set1(l), vg = mf__av_set1(g);
    int j = 0;
    for (; j + MF__AW <= n; j += MF__AW) {
        mf__av p = mf__av_mul(vg, mf__av_exp_ieee(mf__av_sub(mf__av_sub(mf__av_load(x + j), vm), vl)));
        mf__av_store(y + j, assign ? p : mf__av_add(mf__av_load(y + j), p));
    }
    for (; j < n; j++) y[j] = (assign ? 0.0f : y[j]) + g * expf((x[j] - mx) - l);
}
static void mf__cross_entropy_backward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    const int32_t *tg = (const int32_t *)out->aux;
    int V = mf__last(x), assign;
    float *dx = mf__g_claim(out->src[0], &assign), g;
    int64_t rows = mf__rows(x), r;
    if (!dx) return;
    if (assign && !out->iarg[MF__ARG_CE_COUNT]) mf__zero_floats(ctx, dx, x->ne);
    if (!out->iarg[MF__ARG_CE_COUNT]) return;
    g = out->grad[0] / (float)out->iarg[MF__ARG_CE_COUNT];
    MF__PARFOR(ctx, rows, 4 * V)
    for (r = 0; r < rows; r++) { /* d/dx = (softmax - onehot) * g */
        if (tg[r] == out->iarg[MF__ARG_CE_IGNORE]) {
            if (assign) memset(dx + r * V, 0, (size_t)V * sizeof(float));
            continue;
        }
        mf__ce_grad_row(x->data + r * V, V, out->saved[2 * r], out->saved[2 * r + 1], g, dx + r * V, assign);
        dx[r * V + tg[r]] -= g;
    }
}
static const mf__op mf__op_cross_entropy = { "cross_entropy", 1, mf__cross_entropy_shape, mf__cross_entropy_forward,
                                             mf__cross_entropy_backward, MF__OP_PROPS(MF__OP_ASSIGNS) };
MFDEF mf_tensor *mf_cross_entropy(mf_ctx *ctx, mf_tensor *logits, const int32_t *targets, int ignore_index) {
    mf_tensor *t = mf__begin(ctx, &mf__op_cross_entropy, logits, NULL, NULL, NULL);
    if (!t) return NULL;
    if (!logits) return mf__finish(ctx, t); /* reports the NULL input */
    if (!targets) return (mf_tensor *)mf__fail(ctx, "cross_entropy: targets is NULL; pass one int per row of logits");
    if (!(t->aux = mf__alloc(ctx, (size_t)mf__rows(logits) * sizeof(int32_t)))) return NULL;
    memcpy(t->aux, targets, (size_t)mf__rows(logits) * sizeof(int32_t));
    t->iarg[MF__ARG_CE_IGNORE] = ignore_index;
    return mf__finish(ctx, t);
}

/* ---- mse: mean((a - b)^2) -> [1] --------------------------------------------------------------- */
static int mf__mse_shape(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *a = out->src[0], *b = out->src[1];
    int i, one = 1;
    char sa[64], sb[64];
    int same = a->ndim == b->ndim;
    for (i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
    if (!same)
        return MF__SHAPE_FAIL("mse: shapes %s and %s differ; both operands must have the same shape",
                              mf_shape_str(a, sa, 64), mf_shape_str(b, sb, 64));
    mf__set_shape(out, 1, &one);
    return 0;
}
static void mf__mse_forward(mf_ctx *ctx, mf_tensor *out) {
    const float *a = out->src[0]->data, *b = out->src[1]->data;
    int64_t n = out->src[0]->ne, i;
    double s = 0;
    (void)ctx;
    for (i = 0; i < n; i++) s += (double)(a[i] - b[i]) * (a[i] - b[i]);
    out->data[0] = (float)(s / (double)n);
}
static void mf__mse_backward(mf_ctx *ctx, mf_tensor *out) {
    const float *a = out->src[0]->data, *b = out->src[1]->data;
    float *da = mf__g(out->src[0]), *db = mf__g(out->src[1]);
    int64_t n = out->src[0]->ne, i;
    float g = 2.0f * out->grad[0] / (float)n;
    MF__PARFOR(ctx, n, 2)
    for (i = 0; i < n; i++) {
        float d = g * (a[i] - b[i]);
        if (da) da[i] += d;
        if (db) db[i] -= d;
    }
}
static const mf__op mf__op_mse = { "mse", 2, mf__mse_shape, mf__mse_forward, mf__mse_backward, MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_mse(mf_ctx *ctx, mf_tensor *a, mf_tensor *b) {
    return mf__finish(ctx, mf__begin(ctx, &mf__op_mse, a, b, NULL, NULL));
}

/* ---- layernorm over the last axis: x [..., D], gamma [D], beta [D] --------------------------------
   saved: mean and 1/std per row */
enum { MF__FARG_LN_EPS }; /* farg */
static int mf__layernorm_shape(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *x = out->src[0], *g = out->src[1], *b = out->src[2];
    int D = mf__last(x);
    char s[64];
    if ((g && g->ne != D) || (b && b->ne != D))
        return MF__SHAPE_FAIL("layernorm: gamma and beta must have %d elements (x's last size); got %s",
                              D, mf_shape_str(g && g->ne != D ? g : b, s, 64));
    if (!(out->farg[MF__FARG_LN_EPS] > 0))
        return MF__SHAPE_FAIL("layernorm: eps %g must be positive (PyTorch uses 1e-5)",
                              (double)out->farg[MF__FARG_LN_EPS]);
    return mf__same_shape(ctx, out);
}
/* y = LayerNorm(x) for x [rows][D] (gm, bt may be NULL); st[2r], st[2r + 1] = mean and 1/std of row r,
   what the backward reads */
static void mf__layernorm_rows(mf_ctx *ctx, const float *x, const mf_tensor *gm, const mf_tensor *bt, float eps,
                               int64_t rows, int D, float *y, float *st) {
    int64_t r;
    MF__PARFOR(ctx, rows, 6 * D)
    for (r = 0; r < rows; r++) {
        const float *xr = x + r * D;
        float *yr = y + r * D, mean, var, rstd;
        mf__av vm, vr, sv = mf__av_zero();
        int j = 0;
        mean = mf__vsum(xr, D) / (float)D;
        vm = mf__av_set1(mean);
        for (; j + MF__AW <= D; j += MF__AW) {
            mf__av d = mf__av_sub(mf__av_load(xr + j), vm);
            sv = mf__av_fma(d, d, sv);
        }
        var = mf__av_hsum(sv);
        for (; j < D; j++) var += (xr[j] - mean) * (xr[j] - mean);
        rstd = 1.0f / sqrtf(var / (float)D + eps);
        vr = mf__av_set1(rstd);
        for (j = 0; j + MF__AW <= D; j += MF__AW) {
            mf__av y = mf__av_mul(mf__av_sub(mf__av_load(xr + j), vm), vr);
            if (gm) y = mf__av_mul(y, mf__av_load(gm->data + j));
            if (bt) y = mf__av_add(y, mf__av_load(bt->data + j));
            mf__av_store(yr + j, y);
        }
        for (; j < D; j++)
            yr[j] = (xr[j] - mean) * rstd * (gm ? gm->data[j] : 1.0f) + (bt ? bt->data[j] : 0.0f);
        st[2 * r] = mean; st[2 * r + 1] = rstd;
    }
}
static void mf__layernorm_forward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    int64_t rows = mf__rows(x);
    out->saved = (float *)mf__alloc(ctx, 2 * (size_t)rows * sizeof(float));
    if (out->saved)
        mf__layernorm_rows(ctx, x->data, out->src[1], out->src[2], out->farg[MF__FARG_LN_EPS], rows, mf__last(x),
                           out->data, out->saved);
}
/* The LayerNorm backward runs over chunks of this many rows; each chunk also sums its rows'
   gamma / beta gradient contributions, and the chunks' sums are added in chunk order: one pass
   over dy and x instead of two, with sums that do not depend on the thread count. */
#define MF__LN_CHUNK 32
static void mf__layernorm_backward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0], *gm = out->src[1];
    int assign;
    float *dx = mf__g_claim(out->src[0], &assign), *dg = mf__g_add(ctx, out->src[1]), *db = mf__g_add(ctx, out->src[2]);
    int D = mf__last(x), j;
    int64_t rows = mf__rows(x), nch = (rows + MF__LN_CHUNK - 1) / MF__LN_CHUNK, ch;
    const float *st = out->saved;
    float *part = NULL; /* [chunk][dgamma D | dbeta D] */
    if (!dx) { /* both parameter gradients in one pass over dy */
        if (dg) mf__colsum(ctx, out->grad, x->data, st, rows, D, dg, db);
        else if (db) mf__colsum(ctx, out->grad, NULL, NULL, rows, D, db, NULL);
        return;
    }
    if ((dg || db) && !(part = (float *)mf__alloc(ctx, (size_t)(nch * 2 * D) * sizeof(float)))) return;
    MF__PARFOR(ctx, nch, 10.0 * MF__LN_CHUNK * D)
    for (ch = 0; ch < nch; ch++) {
        int64_t r, r1 = (ch + 1) * MF__LN_CHUNK < rows ? (ch + 1) * MF__LN_CHUNK : rows;
        float *pg = part ? part + ch * 2 * D : NULL, *pb = pg ? pg + D : NULL;
        if (pg) memset(pg, 0, (size_t)(2 * D) * sizeof(float));
        for (r = ch * MF__LN_CHUNK; r < r1; r++) {
            /* dx = rstd * (dxh - mean(dxh) - xh * mean(dxh * xh)), dxh = dy * gamma */
            const float *xr = x->data + r * D, *g = out->grad + r * D;
            float mean = st[2 * r], rstd = st[2 * r + 1], m1, m2;
            mf__av a1 = mf__av_zero(), a2 = mf__av_zero(), vm = mf__av_set1(mean), vr = mf__av_set1(rstd);
            mf__av v1, v2;
            int k = 0;
            for (; k + MF__AW <= D; k += MF__AW) {
                mf__av dy = mf__av_load(g + k), dxh = dy, xh = mf__av_mul(mf__av_sub(mf__av_load(xr + k), vm), vr);
                if (gm) dxh = mf__av_mul(dxh, mf__av_load(gm->data + k));
                a1 = mf__av_add(a1, dxh);
                a2 = mf__av_fma(dxh, xh, a2);
                if (pg) {
                    mf__av_store(pg + k, mf__av_add(mf__av_load(pg + k), mf__av_mul(dy, xh)));
                    mf__av_store(pb + k, mf__av_add(mf__av_load(pb + k), dy));
                }
            }
            m1 = mf__av_hsum(a1); m2 = mf__av_hsum(a2);
            for (; k < D; k++) {
                float dxh = g[k] * (gm ? gm->data[k] : 1.0f), xh = (xr[k] - mean) * rstd;
                m1 += dxh; m2 += dxh * xh;
                if (pg) { pg[k] += g[k] * xh; pb[k] += g[k]; }
            }
            m1 /= (float)D; m2 /= (float)D;
            v1 = mf__av_set1(m1); v2 = mf__av_set1(m2);
            for (k = 0; k + MF__AW <= D; k += MF__AW) {
                mf__av dxh = mf__av_load(g + k), xh = mf__av_mul(mf__av_sub(mf__av_load(xr + k), vm), vr);
                if (gm) dxh = mf__av_mul(dxh, mf__av_load(gm->data + k));
                dxh = mf__av_sub(mf__av_sub(dxh, v1), mf__av_mul(xh, v2));
                mf__av_store(dx + r * D + k, assign ? mf__av_mul(vr, dxh) : mf__av_fma(vr, dxh, mf__av_load(dx + r * D + k)));
            }
            for (; k < D; k++) {
                float dxh = g[k] * (gm ? gm->data[k] : 1.0f), xh = (xr[k] - mean) * rstd;
                dx[r * D + k] = (assign ? 0.0f : dx[r * D + k]) + rstd * (dxh - m1 - xh * m2);
            }
        }
    }
    if (part)
        for (ch = 0; ch < nch; ch++)
            for (j = 0; j < D; j++) {
                if (dg) dg[j] += part[ch * 2 * D + j];
                if (db) db[j] += part[ch * 2 * D + D + j];
            }
}
static const mf__op mf__op_layernorm = { "layernorm", 1, mf__layernorm_shape, mf__layernorm_forward,
                                         mf__layernorm_backward, MF__OP_PROPS(MF__OP_ASSIGNS | MF__OP_BF16) };
MFDEF mf_tensor *mf_layernorm(mf_ctx *ctx, mf_tensor *x, mf_tensor *gamma, mf_tensor *beta, float eps) {
    mf_tensor *t = mf__begin(ctx, &mf__op_layernorm, x, gamma, beta, NULL);
    if (t) t->farg[MF__FARG_LN_EPS] = eps;
    return mf__finish(ctx, t);
}

/* ---- embedding: rows of table [V, D] picked by ids -> [ids shape..., D] ---------------------------
   aux: the ids (copied) */
static int mf__embedding_shape(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *tb = out->src[0];
    const int32_t *ids = (const int32_t *)out->aux;
    int64_t n = out->ne, i; /* mf_embedding put the id count in ne */
    int shape[MF_MAX_DIMS], k;
    char s[64];
    if (tb->ndim != 2)
        return MF__SHAPE_FAIL("embedding: the table must be [V, D], got %s", mf_shape_str(tb, s, 64));
    for (i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tb->shape[0])
            return MF__SHAPE_FAIL("embedding: id %d at position %lld is outside the vocabulary [0, %d)",
                                  (int)ids[i], (long long)i, tb->shape[0]);
    for (k = 0; k < out->ndim; k++) shape[k] = out->shape[k];
    shape[out->ndim] = tb->shape[1];
    mf__set_shape(out, out->ndim + 1, shape);
    return 0;
}
static void mf__embedding_forward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *tb = out->src[0];
    const int32_t *ids = (const int32_t *)out->aux;
    int D = tb->shape[1];
    int64_t n = out->ne / D, i;
    MF__PARFOR(ctx, n, (double)D * MF__COST_STREAM)
    for (i = 0; i < n; i++) memcpy(out->data + i * D, tb->data + (int64_t)ids[i] * D, (size_t)D * sizeof(float));
}
static void mf__embedding_backward(mf_ctx *ctx, mf_tensor *out) {
    const int32_t *ids = (const int32_t *)out->aux;
    float *dt = mf__g(out->src[0]);
    int D = out->src[0]->shape[1], j;
    int64_t n = out->ne / D, i;
    (void)ctx;
    if (!dt) return;
    for (i = 0; i < n; i++) /* serial: the same id may repeat */
        for (j = 0; j < D; j++) dt[(int64_t)ids[i] * D + j] += out->grad[i * D + j];
}
static const mf__op mf__op_embedding = { "embedding", 1, mf__embedding_shape, mf__embedding_forward,
                                         mf__embedding_backward, MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_embedding(mf_ctx *ctx, mf_tensor *table, const int32_t *ids, int ndim, const int *shape) {
    mf_tensor *t = mf__begin(ctx, &mf__op_embedding, table, NULL, NULL, NULL);
    int64_t n;
    if (!t || !table) return mf__finish(ctx, t);
    if (!ids) return (mf_tensor *)mf__fail(ctx, "embedding: ids is NULL; pass one int per position");
    if (ndim > MF_MAX_DIMS - 1)
        return (mf_tensor *)mf__fail(ctx, "embedding: ids have %d dims; at most %d (the output adds one)", ndim, MF_MAX_DIMS - 1);
    if ((n = mf__check_shape(ctx, "embedding (the ids' shape)", ndim, shape)) < 0) return NULL;
    if (!(t->aux = mf__alloc(ctx, (size_t)n * sizeof(int32_t)))) return NULL;
    memcpy(t->aux, ids, (size_t)n * sizeof(int32_t));
    mf__set_shape(t, ndim, shape);
    return mf__finish(ctx, t);
}

/* ---- dropout: y = keep ? x / (1 - p) : 0, keep drawn from (seed, stream, index) ------------------
   The stream is the context's dropout call counter, kept so that the backward redraws the mask. */
enum { MF__FARG_DROPOUT_P };                                /* farg */
enum { MF__ARG_DROPOUT_STREAM_LO, MF__ARG_DROPOUT_STREAM_HI }; /* iarg: the stream's two halves */
static uint64_t mf__dropout_stream(const mf_tensor *out) {
    return ((uint64_t)(uint32_t)out->iarg[MF__ARG_DROPOUT_STREAM_HI] << 32) | (uint32_t)out->iarg[MF__ARG_DROPOUT_STREAM_LO];
}
static int mf__dropout_keep(const mf_ctx *ctx, const mf_tensor *out, int64_t i) {
    return mf__drop_keep(ctx->seed, mf__dropout_stream(out), (uint64_t)i, out->farg[MF__FARG_DROPOUT_P]);
}
static void mf__dropout_forward(mf_ctx *ctx, mf_tensor *out) {
    const float *x = out->src[0]->data;
    float s = 1.0f / (1.0f - out->farg[MF__FARG_DROPOUT_P]);
    int64_t i;
    MF__PARFOR(ctx, out->ne, 8)
    for (i = 0; i < out->ne; i++) out->data[i] = mf__dropout_keep(ctx, out, i) ? x[i] * s : 0.0f;
}
static void mf__dropout_backward(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]), s = 1.0f / (1.0f - out->farg[MF__FARG_DROPOUT_P]);
    int64_t i;
    if (!dx) return;
    MF__PARFOR(ctx, out->ne, 8)
    for (i = 0; i < out->ne; i++) if (mf__dropout_keep(ctx, out, i)) dx[i] += out->grad[i] * s;
}
static const mf__op mf__op_dropout = { "dropout", 1, mf__same_shape, mf__dropout_forward, mf__dropout_backward,
                                       MF__OP_PROPS(MF__OP_BF16_AS_INPUT) };
MFDEF mf_tensor *mf_dropout(mf_ctx *ctx, mf_tensor *x, float p) {
    mf_tensor *t;
    if (!mf_ok(ctx)) return NULL;
    if (!(p >= 0.0f && p < 1.0f)) return (mf_tensor *)mf__fail(ctx, "dropout: p = %g must be in [0, 1)", (double)p);
    if (!x) return (mf_tensor *)mf__fail(ctx, "dropout: input 1 is NULL");
    if (!ctx->training || p == 0.0f) return x;
    t = mf__begin(ctx, &mf__op_dropout, x, NULL, NULL, NULL);
    if (t) {
        t->farg[MF__FARG_DROPOUT_P] = p;
        t->iarg[MF__ARG_DROPOUT_STREAM_LO] = (int)(uint32_t)ctx->rng_calls;
        t->iarg[MF__ARG_DROPOUT_STREAM_HI] = (int)(uint32_t)(ctx->rng_calls >> 32);
        ctx->rng_calls++;
    }
    return mf__finish(ctx, t);
}

/* ---- reshape: a view with a new shape ----------------------------------------------------------- */
enum { MF__ARG_RESHAPE_SIZES = 0, MF__ARG_RESHAPE_NDIM = MF_MAX_DIMS }; /* iarg: the sizes (one -1), their count */
static int mf__reshape_shape(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    const int *sizes = out->iarg + MF__ARG_RESHAPE_SIZES;
    int ndim = out->iarg[MF__ARG_RESHAPE_NDIM], shape[MF_MAX_DIMS], i, infer = -1;
    int64_t known = 1;
    char s[64];
    if (ndim < 1 || ndim > MF_MAX_DIMS) return MF__SHAPE_FAIL("reshape: ndim %d is not in 1..%d", ndim, MF_MAX_DIMS);
    for (i = 0; i < ndim; i++) {
        shape[i] = sizes[i];
        if (shape[i] == -1 && infer < 0) infer = i;
        else if (shape[i] <= 0) return MF__SHAPE_FAIL("reshape: size %d of dimension %d is invalid (positive, or one -1)", shape[i], i);
        else if (shape[i] > x->ne / known) { /* also keeps the product from overflowing */
            double holds = 1;
            int k;
            for (k = 0; k < ndim; k++) holds *= sizes[k] > 0 ? sizes[k] : 1;
            return MF__SHAPE_FAIL("reshape: %s has %lld elements; the new shape holds %.0f",
                                  mf_shape_str(x, s, 64), (long long)x->ne, holds);
        }
        else known *= shape[i];
    }
    if (infer >= 0 && x->ne % known != 0)
        return MF__SHAPE_FAIL("reshape: cannot infer the -1 size: the %lld elements of %s are not divisible "
                              "by %lld (the product of the other sizes)", (long long)x->ne, mf_shape_str(x, s, 64), (long long)known);
    if (infer >= 0) shape[infer] = (int)(x->ne / known), known = x->ne;
    if (known != x->ne)
        return MF__SHAPE_FAIL("reshape: %s has %lld elements; the new shape holds %lld",
                              mf_shape_str(x, s, 64), (long long)x->ne, (long long)known);
    mf__set_shape(out, ndim, shape);
    return 0;
}
static void mf__nop_forward(mf_ctx *ctx, mf_tensor *out) { (void)ctx; (void)out; }
static void mf__reshape_backward(mf_ctx *ctx, mf_tensor *out) {
    int assign;
    float *dx = mf__g_claim(out->src[0], &assign);
    if (dx) mf__axpy(ctx, out->ne, 1.0f, out->grad, dx, assign);
}
static const mf__op mf__op_reshape = { "reshape", 1, mf__reshape_shape, mf__nop_forward, mf__reshape_backward,
                                       MF__OP_PROPS(MF__OP_VIEW | MF__OP_ASSIGNS | MF__OP_PASS_FIRST) };
MFDEF mf_tensor *mf_reshape(mf_ctx *ctx, mf_tensor *x, int ndim, const int *shape) {
    mf_tensor *t = mf__begin(ctx, &mf__op_reshape, x, NULL, NULL, NULL);
    int i;
    if (!t) return NULL;
    if (!shape) return (mf_tensor *)mf__fail(ctx, "reshape: shape is NULL");
    t->iarg[MF__ARG_RESHAPE_NDIM] = ndim;
    for (i = 0; i < ndim && i < MF_MAX_DIMS; i++) t->iarg[MF__ARG_RESHAPE_SIZES + i] = shape[i];
    return mf__finish(ctx, t);
}

/* iarg: the axis of concat, slice, roll and sum_axis (normalised by their shape functions) */
enum { MF__ARG_AXIS = 0 };
/* negative axes count from the end; returns -1 when out of range */
static int mf__axis(const mf_tensor *x, int axis) {
    if (axis < 0) axis += x->ndim;
    return (axis >= 0 && axis < x->ndim) ? axis : -1;
}
/* sizes before / at / after an axis: the tensor is [outer, n, inner] */
static void mf__split_at(const mf_tensor *x, int axis, int64_t *outer, int64_t *inner) {
    int i;
    *outer = 1; *inner = 1;
    for (i = 0; i < axis; i++) *outer *= x->shape[i];
    for (i = axis + 1; i < x->ndim; i++) *inner *= x->shape[i];
}

/* ---- permute: out.shape[i] = x.shape[perm[i]] ---------------------------------------------------- */
enum { MF__ARG_PERMUTE_PERM = 0 }; /* iarg: perm, one slot per dim */
static int mf__permute_shape(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    int seen[MF_MAX_DIMS] = {0, 0, 0, 0}, shape[MF_MAX_DIMS], i;
    char s[64];
    for (i = 0; i < x->ndim; i++) {
        int p = out->iarg[MF__ARG_PERMUTE_PERM + i];
        if (p < 0 || p >= x->ndim || seen[p]++)
            return MF__SHAPE_FAIL("permute: perm must list each of the %d dims of %s once; entry %d is %d",
                                  x->ndim, mf_shape_str(x, s, 64), i, p);
        shape[i] = x->shape[p];
    }
    mf__set_shape(out, x->ndim, shape);
    return 0;
}
/* for output element o: the input offset (x viewed as 4-D with leading 1s) */
static void mf__permute_strides(const mf_tensor *out, int64_t *ostride_in, int *oshape) {
    const mf_tensor *x = out->src[0];
    int64_t xs[MF_MAX_DIMS];
    int i, nd = x->ndim, pad = MF_MAX_DIMS - nd;
    xs[nd - 1] = 1;
    for (i = nd - 2; i >= 0; i--) xs[i] = xs[i + 1] * x->shape[i + 1];
    for (i = 0; i < MF_MAX_DIMS; i++) { ostride_in[i] = 0; oshape[i] = 1; }
    for (i = 0; i < nd; i++) {
        ostride_in[pad + i] = xs[out->iarg[MF__ARG_PERMUTE_PERM + i]];
        oshape[pad + i] = out->shape[i];
    }
}
static void mf__permute_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    int64_t st[MF_MAX_DIMS], n01;
    int sh[MF_MAX_DIMS];
    int assign = 0; /* backward: every element of dx is written once (a permutation) */
    float *dx = backward ? mf__g_claim(out->src[0], &assign) : NULL;
    if (backward && !dx) return;
    mf__permute_strides(out, st, sh);
    n01 = (int64_t)sh[0] * sh[1];
    {
        int64_t ab;
        MF__PARFOR(ctx, n01, (double)sh[2] * sh[3] * MF__COST_STREAM)
        for (ab = 0; ab < n01; ab++) {
            int64_t a = ab / sh[1], b = ab % sh[1], c, d, o = ab * sh[2] * sh[3];
            if (st[3] == 1) { /* the last axis stays last: contiguous runs of sh[3] */
                for (c = 0; c < sh[2]; c++, o += sh[3]) {
                    const int64_t in = a * st[0] + b * st[1] + c * st[2];
                    if (backward && assign) memcpy(dx + in, out->grad + o, (size_t)sh[3] * sizeof(float));
                    else if (backward) { for (d = 0; d < sh[3]; d++) dx[in + d] += out->grad[o + d]; }
                    else memcpy(out->data + o, out->src[0]->data + in, (size_t)sh[3] * sizeof(float));
                }
                continue;
            }
            for (c = 0; c < sh[2]; c++)
                for (d = 0; d < sh[3]; d++, o++) {
                    int64_t in = a * st[0] + b * st[1] + c * st[2] + d * st[3];
                    if (backward) dx[in] = (assign ? 0.0f : dx[in]) + out->grad[o];
                    else out->data[o] = out->src[0]->data[in];
                }
        }
    }
}
static void mf__permute_forward(mf_ctx *ctx, mf_tensor *out) { mf__permute_run(ctx, out, 0); }
static void mf__permute_backward(mf_ctx *ctx, mf_tensor *out) { mf__permute_run(ctx, out, 1); }
static const mf__op mf__op_permute = { "permute", 1, mf__permute_shape, mf__permute_forward, mf__permute_backward,
                                       MF__OP_PROPS(MF__OP_ASSIGNS) };
MFDEF mf_tensor *mf_permute(mf_ctx *ctx, mf_tensor *x, const int *perm) {
    mf_tensor *t = mf__begin(ctx, &mf__op_permute, x, NULL, NULL, NULL);
    int i;
    if (!t || !x) return mf__finish(ctx, t);
    if (!perm) return (mf_tensor *)mf__fail(ctx, "permute: perm is NULL");
    for (i = 0; i < x->ndim; i++) t->iarg[MF__ARG_PERMUTE_PERM + i] = perm[i];
    return mf__finish(ctx, t);
}
MFDEF mf_tensor *mf_transpose(mf_ctx *ctx, mf_tensor *x, int dim0, int dim1) {
    int perm[MF_MAX_DIMS] = {0, 1, 2, 3}, a, b;
    char s[64];
    if (!mf_ok(ctx)) return NULL;
    if (!x) return (mf_tensor *)mf__fail(ctx, "transpose: input 1 is NULL");
    a = mf__axis(x, dim0); b = mf__axis(x, dim1);
    if (a < 0 || b < 0)
        return (mf_tensor *)mf__fail(ctx, "transpose: dims %d and %d are not both axes of %s", dim0, dim1, mf_shape_str(x, s, 64));
    perm[a] = b; perm[b] = a;
    return mf_permute(ctx, x, perm);
}

/* ---- concat along an axis -------------------------------------------------------------------------- */
static int mf__concat_shape(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *a = out->src[0], *b = out->src[1];
    int ax = mf__axis(a, out->iarg[MF__ARG_AXIS]), i, ok = a->ndim == b->ndim, shape[MF_MAX_DIMS];
    char sa[64], sb[64];
    for (i = 0; ok && i < a->ndim; i++) ok = i == ax || a->shape[i] == b->shape[i];
    if (ax < 0 || !ok)
        return MF__SHAPE_FAIL("concat: %s and %s cannot be joined along axis %d (same ndim, equal sizes "
                              "except that axis)", mf_shape_str(a, sa, 64), mf_shape_str(b, sb, 64),
                              out->iarg[MF__ARG_AXIS]);
    for (i = 0; i < a->ndim; i++) shape[i] = a->shape[i];
    shape[ax] += b->shape[ax];
    out->iarg[MF__ARG_AXIS] = ax;
    mf__set_shape(out, a->ndim, shape);
    return 0;
}
static void mf__concat_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    int ax = out->iarg[MF__ARG_AXIS], k;
    int64_t outer, inner, o;
    mf__split_at(out, ax, &outer, &inner);
    for (k = 0; k < 2; k++) {
        const mf_tensor *s = out->src[k];
        int64_t chunk = s->shape[ax] * inner, off = k ? out->src[0]->shape[ax] * inner : 0;
        float *ds = backward ? mf__g(s) : NULL;
        if (backward && !ds) continue;
        MF__PARFOR(ctx, outer, chunk)
        for (o = 0; o < outer; o++) {
            float *dst = out->data + o * out->shape[ax] * inner + off;
            int64_t i;
            if (!backward) memcpy(dst, s->data + o * chunk, (size_t)chunk * sizeof(float));
            else for (i = 0; i < chunk; i++) ds[o * chunk + i] += out->grad[o * out->shape[ax] * inner + off + i];
        }
    }
}
static void mf__concat_forward(mf_ctx *ctx, mf_tensor *out) { mf__concat_run(ctx, out, 0); }
static void mf__concat_backward(mf_ctx *ctx, mf_tensor *out) { mf__concat_run(ctx, out, 1); }
static const mf__op mf__op_concat = { "concat", 2, mf__concat_shape, mf__concat_forward, mf__concat_backward,
                                      MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_concat(mf_ctx *ctx, mf_tensor *a, mf_tensor *b, int axis) {
    mf_tensor *t = mf__begin(ctx, &mf__op_concat, a, b, NULL, NULL);
    if (t) t->iarg[MF__ARG_AXIS] = axis;
    return mf__finish(ctx, t);
}

/* ---- slice: x[..., start : start + len, ...] along an axis ------------------------------------- */
enum { MF__ARG_SLICE_START = 1, MF__ARG_SLICE_LEN = 2 }; /* iarg, after MF__ARG_AXIS */
static int mf__slice_shape(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    int ax = mf__axis(x, out->iarg[MF__ARG_AXIS]), shape[MF_MAX_DIMS], i;
    int start = out->iarg[MF__ARG_SLICE_START], len = out->iarg[MF__ARG_SLICE_LEN];
    char s[64];
    if (ax < 0)
        return MF__SHAPE_FAIL("slice: axis %d is not an axis of %s", out->iarg[MF__ARG_AXIS], mf_shape_str(x, s, 64));
    if (start < 0 || len < 1 || start > x->shape[ax] - len)
        return MF__SHAPE_FAIL("slice: [%d, %d + %d) is not inside axis %d of %s (size %d); len must be >= 1",
                              start, start, len, ax, mf_shape_str(x, s, 64), x->shape[ax]);
    for (i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    shape[ax] = len;
    out->iarg[MF__ARG_AXIS] = ax;
    mf__set_shape(out, x->ndim, shape);
    return 0;
}
static void mf__slice_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    const mf_tensor *x = out->src[0];
    int ax = out->iarg[MF__ARG_AXIS];
    int64_t outer, inner, o, chunk, off;
    float *dx = backward ? mf__g(x) : NULL;
    if (backward && !dx) return;
    mf__split_at(x, ax, &outer, &inner);
    chunk = out->shape[ax] * inner;
    off = out->iarg[MF__ARG_SLICE_START] * inner;
    MF__PARFOR(ctx, outer, chunk)
    for (o = 0; o < outer; o++) {
        int64_t base = o * x->shape[ax] * inner + off, i;
        if (!backward) memcpy(out->data + o * chunk, x->data + base, (size_t)chunk * sizeof(float));
        else for (i = 0; i < chunk; i++) dx[base + i] += out->grad[o * chunk + i];
    }
}
static void mf__slice_forward(mf_ctx *ctx, mf_tensor *out) { mf__slice_run(ctx, out, 0); }
static void mf__slice_backward(mf_ctx *ctx, mf_tensor *out) { mf__slice_run(ctx, out, 1); }
static const mf__op mf__op_slice = { "slice", 1, mf__slice_shape, mf__slice_forward, mf__slice_backward, MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_slice(mf_ctx *ctx, mf_tensor *x, int axis, int start, int len) {
    mf_tensor *t = mf__begin(ctx, &mf__op_slice, x, NULL, NULL, NULL);
    if (t) { t->iarg[MF__ARG_AXIS] = axis; t->iarg[MF__ARG_SLICE_START] = start; t->iarg[MF__ARG_SLICE_LEN] = len; }
    return mf__finish(ctx, t);
}

/* ---- roll along an axis: out[(i + shift) mod n] = x[i] ------------------------------------------- */
enum { MF__ARG_ROLL_SHIFT = 1 }; /* iarg, after MF__ARG_AXIS */
static int mf__roll_shape(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    int ax = mf__axis(x, out->iarg[MF__ARG_AXIS]);
    char s[64];
    if (ax < 0)
        return MF__SHAPE_FAIL("roll: axis %d is not an axis of %s", out->iarg[MF__ARG_AXIS], mf_shape_str(x, s, 64));
    out->iarg[MF__ARG_AXIS] = ax;
    return mf__same_shape(ctx, out);
}
static void mf__roll_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    const mf_tensor *x = out->src[0];
    int ax = out->iarg[MF__ARG_AXIS], n = x->shape[ax];
    int shift = ((out->iarg[MF__ARG_ROLL_SHIFT] % n) + n) % n;
    int64_t outer, inner, o;
    float *dx = backward ? mf__g(x) : NULL;
    if (backward && !dx) return;
    mf__split_at(x, ax, &outer, &inner);
    MF__PARFOR(ctx, outer, n * inner)
    for (o = 0; o < outer; o++) {
        int i;
        for (i = 0; i < n; i++) {
            int64_t src = (o * n + i) * inner, dst = (o * n + (i + shift) % n) * inner, k;
            if (!backward) memcpy(out->data + dst, x->data + src, (size_t)inner * sizeof(float));
            else for (k = 0; k < inner; k++) dx[src + k] += out->grad[dst + k];
        }
    }
}
static void mf__roll_forward(mf_ctx *ctx, mf_tensor *out) { mf__roll_run(ctx, out, 0); }
static void mf__roll_backward(mf_ctx *ctx, mf_tensor *out) { mf__roll_run(ctx, out, 1); }
static const mf__op mf__op_roll = { "roll", 1, mf__roll_shape, mf__roll_forward, mf__roll_backward, MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_roll(mf_ctx *ctx, mf_tensor *x, int shift, int axis) {
    mf_tensor *t = mf__begin(ctx, &mf__op_roll, x, NULL, NULL, NULL);
    if (t) { t->iarg[MF__ARG_AXIS] = axis; t->iarg[MF__ARG_ROLL_SHIFT] = shift; }
    return mf__finish(ctx, t);
}

/* ---- sum / mean of all elements -> [1] ----------------------------------------------------------- */
enum { MF__ARG_REDUCE_MEAN }; /* iarg: 1 for the mean */
static int mf__reduce_shape(mf_ctx *ctx, mf_tensor *out) {
    int one = 1;
    (void)ctx;
    mf__set_shape(out, 1, &one);
    return 0;
}
static void mf__reduce_forward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    double s = 0;
    int64_t i;
    (void)ctx;
    for (i = 0; i < x->ne; i++) s += x->data[i];
    out->data[0] = (float)(out->iarg[MF__ARG_REDUCE_MEAN] ? s / (double)x->ne : s);
}
static void mf__reduce_backward(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]), g = out->grad[0];
    int64_t i, n = out->src[0]->ne;
    if (!dx) return;
    if (out->iarg[MF__ARG_REDUCE_MEAN]) g /= (float)n;
    MF__PARFOR(ctx, n, MF__COST_STREAM)
    for (i = 0; i < n; i++) dx[i] += g;
}
static const mf__op mf__op_sum = { "sum", 1, mf__reduce_shape, mf__reduce_forward, mf__reduce_backward, MF__OP_PROPS(0) };
static const mf__op mf__op_mean = { "mean", 1, mf__reduce_shape, mf__reduce_forward, mf__reduce_backward, MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_sum(mf_ctx *ctx, mf_tensor *x) { return mf__finish(ctx, mf__begin(ctx, &mf__op_sum, x, NULL, NULL, NULL)); }
MFDEF mf_tensor *mf_mean(mf_ctx *ctx, mf_tensor *x) {
    mf_tensor *t = mf__begin(ctx, &mf__op_mean, x, NULL, NULL, NULL);
    if (t) t->iarg[MF__ARG_REDUCE_MEAN] = 1;
    return mf__finish(ctx, t);
}

/* ---- sum over one axis (removed) ------------------------------------------------------------------- */
static int mf__sum_axis_shape(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    int ax = mf__axis(x, out->iarg[MF__ARG_AXIS]), shape[MF_MAX_DIMS], i, n = 0;
    char s[64];
    if (ax < 0)
        return MF__SHAPE_FAIL("sum_axis: axis %d is not an axis of %s", out->iarg[MF__ARG_AXIS], mf_shape_str(x, s, 64));
    for (i = 0; i < x->ndim; i++) if (i != ax) shape[n++] = x->shape[i];
    if (n == 0) shape[n++] = 1;
    out->iarg[MF__ARG_AXIS] = ax;
    mf__set_shape(out, n, shape);
    return 0;
}
static void mf__sum_axis_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    const mf_tensor *x = out->src[0];
    int ax = out->iarg[MF__ARG_AXIS], n = x->shape[ax];
    int64_t outer, inner, o;
    float *dx = backward ? mf__g(x) : NULL;
    if (backward && !dx) return;
    mf__split_at(x, ax, &outer, &inner);
    MF__PARFOR(ctx, outer, n * inner)
    for (o = 0; o < outer; o++) {
        float *y = out->data + o * inner;
        const float *g = backward ? out->grad + o * inner : NULL;
        int64_t k;
        int i;
        if (!backward) for (k = 0; k < inner; k++) y[k] = 0;
        for (i = 0; i < n; i++) {
            int64_t base = (o * n + i) * inner;
            if (!backward) for (k = 0; k < inner; k++) y[k] += x->data[base + k];
            else for (k = 0; k < inner; k++) dx[base + k] += g[k];
        }
    }
}
static void mf__sum_axis_forward(mf_ctx *ctx, mf_tensor *out) { mf__sum_axis_run(ctx, out, 0); }
static void mf__sum_axis_backward(mf_ctx *ctx, mf_tensor *out) { mf__sum_axis_run(ctx, out, 1); }
static const mf__op mf__op_sum_axis = { "sum_axis", 1, mf__sum_axis_shape, mf__sum_axis_forward, mf__sum_axis_backward,
                                        MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_sum_axis(mf_ctx *ctx, mf_tensor *x, int axis) {
    mf_tensor *t = mf__begin(ctx, &mf__op_sum_axis, x, NULL, NULL, NULL);
    if (t) t->iarg[MF__ARG_AXIS] = axis;
    return mf__finish(ctx, t);
}

/* ---- conv1d, channels last: x [B, T, Cin], w [Cout, Cin, K], b [Cout] -> [B, To, Cout] ----------
   im2col: cols [B*To, Cin*K] (saved), cols[(b,t)][c*K + k] = x[b][t*stride + k - pad][c] (0 outside);
   y = cols @ w^T + b. */
enum { MF__ARG_CONV_STRIDE, MF__ARG_CONV_PAD }; /* iarg */
static int mf__conv1d_shape(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0], *w = out->src[1], *b = out->src[2];
    int stride = out->iarg[MF__ARG_CONV_STRIDE], pad = out->iarg[MF__ARG_CONV_PAD], To, shape[3];
    char sx[64], sw[64];
    if (x->ndim != 3 || w->ndim != 3 || w->shape[1] != x->shape[2])
        return MF__SHAPE_FAIL("conv1d: x %s and w %s do not fit; x is [B, T, Cin], w is [Cout, Cin, K]",
                              mf_shape_str(x, sx, 64), mf_shape_str(w, sw, 64));
    if (b && b->ne != w->shape[0])
        return MF__SHAPE_FAIL("conv1d: the bias %s must have %d elements (Cout, w's first size)", mf_shape_str(b, sx, 64), w->shape[0]);
    if (stride < 1 || pad < 0)
        return MF__SHAPE_FAIL("conv1d: stride %d must be >= 1 and pad %d >= 0", stride, pad);
    if ((int64_t)x->shape[1] + 2 * (int64_t)pad > 0x7fffffff)
        return MF__SHAPE_FAIL("conv1d: pad %d is absurdly large for an input of length %d", pad, x->shape[1]);
    To = x->shape[1] + 2 * pad - w->shape[2];
    if (To < 0)
        return MF__SHAPE_FAIL("conv1d: the input length %d (+ 2 * pad %d) is shorter than the kernel %d",
                              x->shape[1], pad, w->shape[2]);
    shape[0] = x->shape[0]; shape[1] = To / stride + 1; shape[2] = w->shape[0];
    mf__set_shape(out, 3, shape);
    return 0;
}
/* cols <-> x; backward adds cols into dx (serial over time within a batch row: windows overlap) */
static void mf__im2col(mf_ctx *ctx, const mf_tensor *out, const float *x, float *cols, float *dx) {
    int B = out->shape[0], To = out->shape[1], T = out->src[0]->shape[1], C = out->src[0]->shape[2];
    int K = out->src[1]->shape[2], stride = out->iarg[MF__ARG_CONV_STRIDE], pad = out->iarg[MF__ARG_CONV_PAD];
    int64_t b;
    MF__PARFOR(ctx, B, (double)To * C * K)
    for (b = 0; b < B; b++) {
        int t, c, k;
        for (t = 0; t < To; t++)
            for (k = 0; k < K; k++) {
                int ts = t * stride + k - pad;
                float *col = cols + ((b * To + t) * (int64_t)C) * K + k;
                const int inside = ts >= 0 && ts < T;
                int64_t xo = (b * (int64_t)T + ts) * C;
                for (c = 0; c < C; c++) {
                    if (!dx) col[(int64_t)c * K] = inside ? x[xo + c] : 0.0f;
                    else if (inside) dx[xo + c] += col[(int64_t)c * K];
                }
            }
    }
}
static void mf__conv1d_forward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0], *w = out->src[1], *b = out->src[2];
    int64_t rows = (int64_t)out->shape[0] * out->shape[1], r;
    int CK = w->shape[1] * w->shape[2], Co = w->shape[0];
    float *cols = out->saved = (float *)mf__alloc(ctx, (size_t)(rows * CK) * sizeof(float));
    if (!cols) return;
    mf__im2col(ctx, out, x->data, cols, NULL);
    mf__gemm(ctx, 0, 1, (int)rows, Co, CK, cols, 0, w->data, 0, 0.0f, out->data, 0, 1);
    if (b)
        for (r = 0; r < rows; r++) {
            int j;
            for (j = 0; j < Co; j++) out->data[r * Co + j] += b->data[j];
        }
}
static void mf__conv1d_backward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *w = out->src[1];
    float *dx = mf__g(out->src[0]), *dw = mf__g(out->src[1]), *db = mf__g(out->src[2]);
    int64_t rows = (int64_t)out->shape[0] * out->shape[1];
    int CK = w->shape[1] * w->shape[2], Co = w->shape[0];
    if (dw) mf__gemm(ctx, 1, 0, Co, CK, (int)rows, out->grad, 0, out->saved, 0, 1.0f, dw, 0, 1);
    if (db) mf__colsum(ctx, out->grad, NULL, NULL, rows, Co, db, NULL);
    if (dx) {
        float *dcols = (float *)mf__alloc(ctx, (size_t)(rows * CK) * sizeof(float));
        if (!dcols) return;
        mf__gemm(ctx, 0, 0, (int)rows, CK, Co, out->grad, 0, w->data, 0, 0.0f, dcols, 0, 1);
        mf__im2col(ctx, out, NULL, dcols, dx);
    }
}
static const mf__op mf__op_conv1d = { "conv1d", 2, mf__conv1d_shape, mf__conv1d_forward, mf__conv1d_backward,
                                      MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_conv1d(mf_ctx *ctx, mf_tensor *x, mf_tensor *w, mf_tensor *b, int stride, int pad) {
    mf_tensor *t = mf__begin(ctx, &mf__op_conv1d, x, w, b, NULL);
    if (t) { t->iarg[MF__ARG_CONV_STRIDE] = stride; t->iarg[MF__ARG_CONV_PAD] = pad; }
    return mf__finish(ctx, t);
}

/* ---- mean over a window of the sequence axis: x [B, T, D] -> [B, T, D] -----------------------------
   window of t: centred [t - k/2, t + k/2] or causal [t - k + 1, t], clipped to [0, T), divided by
   the number of positions inside (count_include_pad = false). */
enum { MF__ARG_POOL_KERNEL, MF__ARG_POOL_CAUSAL, MF__ARG_POOL_MINUS }; /* iarg; minus: avg_pool_sub */
static void mf__pool_window(int t, int T, int k, int causal, int *lo, int *hi) {
    *lo = causal ? t - k + 1 : t - k / 2;
    *hi = causal ? t : t + k / 2;
    if (*lo < 0) *lo = 0;
    if (*hi > T - 1) *hi = T - 1;
}
static int mf__avg_pool_shape(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    int k = out->iarg[MF__ARG_POOL_KERNEL];
    char s[64];
    if (x->ndim != 3) return MF__SHAPE_FAIL("avg_pool_seq: x must be [B, T, D], got %s", mf_shape_str(x, s, 64));
    if (k < 1 || (!out->iarg[MF__ARG_POOL_CAUSAL] && k % 2 == 0))
        return MF__SHAPE_FAIL("avg_pool_seq: kernel %d must be >= 1, and odd for a centred window", k);
    return mf__same_shape(ctx, out);
}
/* forward: y[t] = mean of x over window(t); backward: dx[s] += sum of dy[t] / |window(t)| over the
   t whose window holds s. Both from a running prefix sum over time, O(B * T * D). */
/* Window sums as running sums in double: the window [lo(t), hi(t)] only moves forward with t (so do
   the backward's reversed windows), so every row enters the sum once and leaves it once, with no
   [B, T, D] prefix table. A sum of at most T floats is exact in double for any practical range of
   values, so the result is the correctly rounded window mean (the CUDA kernel's direct window sums
   give the same). Backward: dx[t] += sum of dy[t'] / |window(t')| over the t' whose window holds t. */
static void mf__avg_pool_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    int B = out->shape[0], T = out->shape[1], D = out->shape[2];
    int k = out->iarg[MF__ARG_POOL_KERNEL], causal = out->iarg[MF__ARG_POOL_CAUSAL];
    int minus = out->iarg[MF__ARG_POOL_MINUS], assign = 0; /* avg_pool_sub: the mean minus the input row itself */
    const float *src = backward ? out->grad : out->src[0]->data;
    float *dx = backward ? mf__g_claim(out->src[0], &assign) : NULL;
    double *sums = (double *)mf__alloc(ctx, (size_t)B * D * sizeof(double));
    int64_t b;
    if (!sums || (backward && !dx)) return;
    MF__PARFOR(ctx, B, 3.0 * T * D)
    for (b = 0; b < B; b++) {
        double *S = sums + b * (int64_t)D;
        const float *x = src + b * (int64_t)T * D;
        int t, d, lo, hi, in = 0, gone = 0;
        for (d = 0; d < D; d++) S[d] = 0;
        for (t = 0; t < T; t++) {
            if (!backward) mf__pool_window(t, T, k, causal, &lo, &hi);
            else { /* the t' whose window holds t: centred [t - k/2, t + k/2], causal [t, t + k - 1] */
                lo = causal ? t : t - k / 2; hi = causal ? t + k - 1 : t + k / 2;
                if (lo < 0) lo = 0;
                if (hi > T - 1) hi = T - 1;
            }
            for (; in <= hi; in++) { /* row `in` enters (backward: dy[in] / |window(in)|) */
                float w = 1.0f;
                int l2, h2;
                if (backward) { mf__pool_window(in, T, k, causal, &l2, &h2); w = 1.0f / (float)(h2 - l2 + 1); }
                for (d = 0; d < D; d++) S[d] += w * x[(int64_t)in * D + d];
            }
            for (; gone < lo; gone++) { /* row `gone` leaves, with the value it entered with */
                float w = 1.0f;
                int l2, h2;
                if (backward) { mf__pool_window(gone, T, k, causal, &l2, &h2); w = 1.0f / (float)(h2 - l2 + 1); }
                for (d = 0; d < D; d++) S[d] -= w * x[(int64_t)gone * D + d];
            }
            if (!backward) {
                /* S / n without a division per element: q = S (1/n), then one correction with the
                   exact residual S - q n (Markstein: with 1/n correctly rounded, q + (S - q n) / n
                   rounds to exactly S / n, the correctly rounded quotient) */
                double n = hi - lo + 1;
#if defined(FP_FAST_FMA) /* a hardware fma; without one, the division is the faster */
                double r = 1.0 / n;
#endif
                for (d = 0; d < D; d++) {
                    int64_t e = ((int64_t)b * T + t) * D + d;
#if defined(FP_FAST_FMA)
                    double q = S[d] * r;
                    float y = (float)fma(fma(-q, n, S[d]), r, q);
#else
                    float y = (float)(S[d] / n);
#endif
                    out->data[e] = minus ? y - src[e] : y;
                }
            } else
                for (d = 0; d < D; d++) {
                    int64_t e = ((int64_t)b * T + t) * D + d;
                    float y = minus ? (float)S[d] - src[e] : (float)S[d];
                    dx[e] = assign ? y : dx[e] + y;
                }
        }
    }
}
static void mf__avg_pool_forward(mf_ctx *ctx, mf_tensor *out) { mf__avg_pool_run(ctx, out, 0); }
static void mf__avg_pool_backward(mf_ctx *ctx, mf_tensor *out) { mf__avg_pool_run(ctx, out, 1); }
static const mf__op mf__op_avg_pool = { "avg_pool_seq", 1, mf__avg_pool_shape, mf__avg_pool_forward,
                                        mf__avg_pool_backward, MF__OP_PROPS(MF__OP_ASSIGNS) };
/* avg_pool_sub: avg_pool_seq(x) - x in one op (the pool mixer, PoolFormer's token mixer), with the
   values of mf_sub(mf_avg_pool_seq(x), x) bit for bit: one pass and one tensor fewer each way */
static const mf__op mf__op_avg_pool_sub = { "avg_pool_sub", 1, mf__avg_pool_shape, mf__avg_pool_forward,
                                            mf__avg_pool_backward, MF__OP_PROPS(MF__OP_ASSIGNS) };
static mf_tensor *mf__avg_pool(mf_ctx *ctx, const mf__op *op, mf_tensor *x, int kernel, int causal) {
    mf_tensor *t = mf__begin(ctx, op, x, NULL, NULL, NULL);
    if (t) {
        t->iarg[MF__ARG_POOL_KERNEL] = kernel;
        t->iarg[MF__ARG_POOL_CAUSAL] = causal != 0;
        t->iarg[MF__ARG_POOL_MINUS] = op == &mf__op_avg_pool_sub;
    }
    return mf__finish(ctx, t);
}
MFDEF mf_tensor *mf_avg_pool_seq(mf_ctx *ctx, mf_tensor *x, int kernel, int causal) {
    return mf__avg_pool(ctx, &mf__op_avg_pool, x, kernel, causal);
}
static mf_tensor *mf__avg_pool_sub(mf_ctx *ctx, mf_tensor *x, int kernel, int causal) {
    return mf__avg_pool(ctx, &mf__op_avg_pool_sub, x, kernel, causal);
}

/* iarg of attention and rel_attention (their shape is one function); the dropout stream's halves
   also of feedback_attention */
enum { MF__ARG_ATTN_CAUSAL, MF__ARG_ATTN_STREAM_LO, MF__ARG_ATTN_STREAM_HI, MF__ARG_ATTN_LAYOUT, MF__ARG_ATTN_PARTS };
/* Where an attention op's operands live (shared by the CPU kernels and their CUDA twins): heads
   bh = b H + h; operand x (MF__AT_Q, _K, _V, _O: the output, and its gradient) is heads-major
   [B, H, T, d] (bthd 0: rows d floats apart) or token-major [B, T, H, d] (bthd 1,
   MF_ATTN_TOKENS_MAJOR: rows H d floats apart), or, inside the model, a part of a token-major pack
   [B, T, P H, d] (q, k and v of one GEMM: rows P H d floats apart, part p from p H d on). Row i of
   head bh of operand x starts at mf__attn_at; rel_attention's are always heads-major. */
enum { MF__AT_Q, MF__AT_K, MF__AT_V, MF__AT_O };
typedef struct mf__attn_geo { int64_t BH, off[4]; int H, Tq, Tk, dk, dv, bthd, ld[4]; } mf__attn_geo;
static MF__HD int64_t mf__attn_at(const mf__attn_geo *g, int x, int64_t bh, int i) {
    int T = x == MF__AT_K || x == MF__AT_V ? g->Tk : g->Tq, d = x <= MF__AT_K ? g->dk : g->dv;
    return g->off[x] + (g->bthd ? (bh / g->H * T + i) * g->ld[x] + bh % g->H * d : (bh * T + i) * g->ld[x]);
}
/* farg of attention, rel_attention and feedback_attention: the score scale and the probability
   dropout p (0 outside training mode) */
enum { MF__FARG_ATTN_SCALE, MF__FARG_ATTN_DROP };

/* ---- attention-probability dropout inside the fused kernels (docs/math.md §4.1) -----------------
   The probabilities P [B, H, Tq, Tk] are never formed, so the mask is drawn where a tile of them is:
   element (b, h, i, j) keeps with mf__drop_keep(seed, stream, ((b H + h) Tq + i) Tk + j, p), the
   draw mf_dropout would make on the whole tensor at the same stream (the context's dropout call
   counter, taken by the op in training mode when p > 0). Kept values are scaled by 1 / (1 - p);
   the softmax's sum (and the saved log-sum-exp) is that of the undropped P, and the backward
   redraws the same mask from the stream kept in the op's arguments. p == 0: no draw at all. */
typedef struct mf__attn_drop {
    uint64_t key; /* mf__drop_key(seed, stream) */
    float p, s;   /* probability, 1 / (1 - p) */
} mf__attn_drop;
static MF__HD mf__attn_drop mf__attn_drop_make(uint64_t seed, uint64_t stream, float p) {
    mf__attn_drop d;
    d.p = p; d.s = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    d.key = p > 0.0f ? mf__drop_key(seed, stream) : 0;
    return d;
}
static uint64_t mf__attn_drop_stream(const mf_tensor *out) {
    return ((uint64_t)(uint32_t)out->iarg[MF__ARG_ATTN_STREAM_HI] << 32) | (uint32_t)out->iarg[MF__ARG_ATTN_STREAM_LO];
}
static mf__attn_drop mf__attn_drop_of(const mf_ctx *ctx, const mf_tensor *out) {
    return mf__attn_drop_make(ctx->seed, mf__attn_drop_stream(out), out->farg[MF__FARG_ATTN_DROP]);
}
/* p checked by the op's entry point; the op takes a stream only when it will drop something */
static int mf__attn_drop_check(mf_ctx *ctx, const char *op, float p) {
    if (p >= 0.0f && p < 1.0f) return 0;
    mf__fail(ctx, "%s: attention dropout p = %g must be in [0, 1) (0: none)", op, (double)p);
    return -1;
}
static void mf__attn_drop_set(mf_ctx *ctx, mf_tensor *t, float p) {
    int on = ctx->training && p > 0.0f;
    t->farg[MF__FARG_ATTN_DROP] = on ? p : 0.0f;
    if (!on) return;
    t->iarg[MF__ARG_ATTN_STREAM_LO] = (int)(uint32_t)ctx->rng_calls;
    t->iarg[MF__ARG_ATTN_STREAM_HI] = (int)(uint32_t)(ctx->rng_calls >> 32);
    ctx->rng_calls++;
}
/* ---- attention: fused multi-head scaled dot-product attention, FlashAttention-2 on the CPU -------
   q [B, H, Tq, dk], k [B, H, Tk, dk], v [B, H, Tk, dv] -> [B, H, Tq, dv]; arguments: the score scale
   and causal (MF__FARG_ATTN_SCALE, MF__ARG_ATTN_CAUSAL); saved: the row log-sum-exp, B*H*Tq floats
   (+inf for a row that sees no key). Token-major operands (MF__ARG_ATTN_LAYOUT, MF__ARG_ATTN_PARTS:
   [B, T, H, d], or parts of a pack of projections) only move the rows: mf__attn_geo says where each
   row of each operand is, and every tile product takes its operands' row strides.
   Layout: a tile of MF__AT_BQ queries and MF__AT_BK keys keeps its scores TRANSPOSED, st[key][query],
   so the softmax statistics of the 64 queries (running max, sum, log-sum-exp, D) are vectors and
   every product below is C += A B with B row-major, vectorised along C's rows (mf__tile_mm: a
   hand-blocked kernel, 4 x 64 or 8 x 32 register tiles on AVX-512; mf_sgemm per tile would pack
   and malloc on every call). exp is a vector polynomial (~2 ulp).
   The scale is folded into a transposed copy of the query tile (scale * Q^T, [dk][64]).
   Forward: parallel over (b, h, query tile), or over whole heads when there are 4 per thread (a
   token-major head's keys and values are then copied once per head, not once per query tile); key
   tiles in order with the online softmax (running max m and sum l, the accumulator rescaled by
   exp(m_old - m_new)); key tiles that causality hides from the whole query tile are skipped;
   out = acc / l, lse = m + log l.
   Backward (FA2): D_i = rowsum(dO_i * O_i); for each (key tile, query tile) pair P is recomputed
   as exp(scale q k - lse), dV += P^T dO, dP = dO V^T, dS = scale * P * (dP - D), dQ += dS K,
   dK += dS^T Q. Race-free and deterministic without atomics: when there are enough heads, each
   thread owns whole (b, h) heads and runs every pair of the head (5 products per pair); with fewer
   heads than threads, a dK/dV pass parallel over (b, h, key tile) is followed by a dQ pass parallel
   over (b, h, query tile) (7 products per pair, but every thread busy). Each gradient row gets its
   contributions in the same order in both schemes (dK/dV over ascending query tiles, dQ over
   ascending key tiles), so the gradients are bit-identical for any thread count.
   Scratch (per-thread slices, taken from the activation arena before the parallel region): forward
   (dk + dv + 64 + 3) * 64 floats per thread (whole heads: + Tk (dk + dv) for the copied keys and
   values); backward two 64 x 64 tiles per thread, and the per-head inputs scale * Q^T, dO^T, lse and
   D: per thread with whole heads (built from the thread's copy of the head), else for every head
   (about the size of q plus out).
   Transposes (scale * Q^T, dO^T) go through registers in MF__AW x MF__AW blocks.
   bf16 products (a CPU context in MF_PREC_BF16, docs/math.md §22.5): every tile product's operands
   are rounded once where they are staged: the keys and values copied (per head or per key tile, as
   token-major ones are) and rounded, scale * Q^T and dO^T after their transposes, P~ and dS into a
   tile of their own (a fourth per thread in the backward), and in the backward a rounded copy of
   each head's q, k, v, dO; the softmax, its statistics, D and every accumulator stay fp32.
   Tiles: 64 x 64 keeps a thread's tiles (scores, dP, Q^T, accumulator: ~50 KiB at d = 64) in L1/L2;
   64 queries = 4 AVX-512 vectors = one register tile row. */
#define MF__AT_BQ 64 /* queries per tile: the vector axis of a score tile; a multiple of 16 */
#define MF__AT_BK 64 /* keys per tile */

/* MF__ARG_ATTN_PARTS: 0 (no packs), or 1 + a byte per operand x (q, k, v: bytes 0, 1, 2) that
   holds its part p (bits 0-3) of a token-major pack [B, T, P H, d] of P (bits 4-7) projections */
#define MF__ATTN_PACKS(pq, Pq, pk, Pk, pv, Pv) (1 + ((pq) | (Pq) << 4 | ((pk) | (Pk) << 4) << 8 | ((pv) | (Pv) << 4) << 16))
static int mf__attn_part(int parts, int x) { return parts ? ((parts - 1) >> (8 * x)) & 15 : 0; }
static int mf__attn_packs(int parts, int x) { /* P of operand x; 1: not a pack */
    return parts ? ((parts - 1) >> (8 * x + 4)) & 15 : 1;
}
/* An attention op's geometry (mf__attention_shape has checked the shapes); rel_attention's q, k, v
   are read the same way (heads-major) */
static mf__attn_geo mf__attn_geo_of(const mf_tensor *out) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2];
    mf__attn_geo g;
    int x, parts = out->iarg[MF__ARG_ATTN_PARTS];
    g.bthd = out->iarg[MF__ARG_ATTN_LAYOUT] != 0;
    g.H = g.bthd ? Q->shape[2] / mf__attn_packs(parts, MF__AT_Q) : Q->shape[1];
    g.Tq = Q->shape[g.bthd ? 1 : 2]; g.Tk = K->shape[g.bthd ? 1 : 2];
    g.dk = Q->shape[3]; g.dv = V->shape[3]; g.BH = (int64_t)Q->shape[0] * g.H;
    for (x = 0; x < 4; x++) {
        int d = x <= MF__AT_K ? g.dk : g.dv, P = x < 3 ? mf__attn_packs(parts, x) : 1;
        g.ld[x] = g.bthd ? P * g.H * d : d;
        g.off[x] = x < 3 ? (int64_t)mf__attn_part(parts, x) * g.H * d : 0;
    }
    return g;
}

/* dst[jj][ii] = the dropped, rescaled src[jj][ii] of a transposed tile ([key][query], MF__AT_BQ
   lanes; lanes from bq on get 0); e0: the element index of (query lane 0, key row 0), ld: Tk */
static void mf__attn_drop_tile(const mf__attn_drop *d, float *dst, const float *src, int bk, int bq, int64_t e0,
                               int64_t ld) {
    int jj, ii;
    for (jj = 0; jj < bk; jj++) {
        const float *x = src + jj * MF__AT_BQ;
        float *y = dst + jj * MF__AT_BQ;
        for (ii = 0; ii < bq; ii++)
            y[ii] = mf__drop_keep_at(d->key, (uint64_t)(e0 + ii * ld + jj), d->p) ? x[ii] * d->s : 0.0f;
        for (; ii < MF__AT_BQ; ii++) y[ii] = 0.0f;
    }
}



/* dst[c * ldd + r] = s * src[r * lds + c] for an MF__AW x MF__AW block, in registers: MF__AW row
   loads, log2(MF__AW) rounds of lane shuffles, MF__AW column stores (a gather per column costs
   several times more, and its lanes hit as many cache lines as the block has rows) */
#if MF__AW == 16
#define MF__TR_PD(f, a, b) _mm512_castpd_ps(f(_mm512_castps_pd(a), _mm512_castps_pd(b)))
static void mf__av_transpose_block(const float *src, int lds, float s, float *dst, int ldd) {
    __m512 r[16], t[16];
    int i;
    for (i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + (int64_t)i * lds);
    for (i = 0; i < 16; i += 2) { /* [a0 b0 a1 b1 | a4 b4 a5 b5 | ...], [a2 b2 a3 b3 | ...] */
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (i = 0; i < 16; i += 4) { /* rows i..i+3, columns 0..3 of each 128-bit lane */
        r[i] = MF__TR_PD(_mm512_unpacklo_pd, t[i], t[i + 2]);
        r[i + 1] = MF__TR_PD(_mm512_unpackhi_pd, t[i], t[i + 2]);
        r[i + 2] = MF__TR_PD(_mm512_unpacklo_pd, t[i + 1], t[i + 3]);
        r[i + 3] = MF__TR_PD(_mm512_unpackhi_pd, t[i + 1], t[i + 3]);
    }
    for (i = 0; i < 4; i++) { /* 128-bit lanes: rows 0..7 and 8..15, columns c, c + 8 / c + 4, c + 12 */
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (i = 0; i < 8; i++) { /* column i (i < 4: from lane 0 of t[i], t[i + 8]), column i + 8 */
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
    for (i = 0; i < 16; i++) _mm512_storeu_ps(dst + (int64_t)i * ldd, _mm512_mul_ps(_mm512_set1_ps(s), r[i]));
}
#undef MF__TR_PD
#elif MF__AW == 8
static void mf__av_transpose_block(const float *src, int lds, float s, float *dst, int ldd) {
    __m256 r[8], t[8];
    int i;
    for (i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + (int64_t)i * lds);
    for (i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (i = 0; i < 8; i += 4) { /* rows i..i+3, columns 0..3 of each 128-bit lane */
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (i = 0; i < 4; i++) {
        t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
        t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
    }
    for (i = 0; i < 8; i++) _mm256_storeu_ps(dst + (int64_t)i * ldd, _mm256_mul_ps(_mm256_set1_ps(s), t[i]));
}
#else
static void mf__av_transpose_block(const float *src, int lds, float s, float *dst, int ldd) {
    (void)lds; (void)ldd;
    dst[0] = s * src[0];
}
#endif

/* dst[c * ldd + r] = s * src[r * lds + c] for c < cols, r < rows_pad (zeros from r = rows on);
   rows_pad is a multiple of MF__AW. */
static void mf__attn_transpose(const float *src, int lds, int rows, int rows_pad, int cols, float s,
                               float *dst, int ldd) {
    int r, c;
    for (r = 0; r + MF__AW <= rows; r += MF__AW) {
        for (c = 0; c + MF__AW <= cols; c += MF__AW)
            mf__av_transpose_block(src + (int64_t)r * lds + c, lds, s, dst + (int64_t)c * ldd + r, ldd);
        for (; c < cols; c++) {
            mf__av x = mf__av_gather(src + (int64_t)r * lds + c, lds);
            mf__av_store(dst + (int64_t)c * ldd + r, mf__av_mul(mf__av_set1(s), x));
        }
    }
    for (c = 0; c < cols; c++) {
        float *d = dst + (int64_t)c * ldd;
        int i;
        for (i = r; i < rows; i++) d[i] = s * src[(int64_t)i * lds + c];
        for (; i < rows_pad; i++) d[i] = 0.0f;
    }
}

/* Hide key j from query i when j > i + off: st[key][query] = -inf for the keys j0.. (bk rows) and
   the queries i0.. of a tile (local query columns below j - off - i0). */
static void mf__attn_mask(float *st, int j0, int bk, int i0, int off) {
    const mf__av ninf = mf__av_set1(-INFINITY);
    int jj, ii;
    for (jj = 0; jj < bk; jj++) {
        int first = j0 + jj - off - i0; /* the first local query that sees key j0 + jj */
        float *s = st + jj * MF__AT_BQ;
        if (first > MF__AT_BQ) first = MF__AT_BQ;
        for (ii = 0; ii + MF__AW <= first; ii += MF__AW) mf__av_store(s + ii, ninf);
        if (ii < first) mf__av_storem(s + ii, mf__av_mask(first - ii), ninf);
    }
}

/* The tile products of a causal diagonal tile without the work the mask zeroes. first: the local
   query from which key row 0 of the tile is visible (key row r: from first + r), i.e. j0 - off - i0;
   diag == 0: no key is hidden, the whole product. Key rows go in groups of 16, query columns in
   whole vectors, so only fully hidden vectors are left out: the sums are those of the whole
   product (the terms left out are exact zeros). */
#define MF__AT_G 16
static int mf__attn_first_vec(int first) { /* the first query vector a group from `first` sees */
    int c = first <= 0 ? 0 : first / MF__AW * MF__AW;
    return c > MF__AT_BQ ? MF__AT_BQ : c;
}
/* C [bk][BQ] (scores or dP^T: rows keys, columns queries) = A [bk][d] B [d][BQ]; the hidden columns
   are left as they are (the mask, or the dS pass, covers them) */
static void mf__attn_mm_keys(int bk, int d, const float *A, int ars, const float *B, int ldb, float *C,
                             int diag, int first) {
    int g;
    if (!diag) { mf__tile_mm(bk, MF__AT_BQ, d, A, ars, 1, B, ldb, C, MF__AT_BQ, 0); return; }
    for (g = 0; g < bk; g += MF__AT_G) {
        int c0 = mf__attn_first_vec(first + g), rows = bk - g < MF__AT_G ? bk - g : MF__AT_G;
        if (c0 < MF__AT_BQ)
            mf__tile_mm(rows, MF__AT_BQ - c0, d, A + (int64_t)g * ars, ars, 1, B + c0, ldb,
                        C + (int64_t)g * MF__AT_BQ + c0, MF__AT_BQ, 0);
    }
}
/* C [bk][n] += S [bk][BQ] X [bq][n] (dV += P^T dO, dK += dS^T Q: a sum over the tile's queries) */
static void mf__attn_mm_keys_acc(int bk, int n, int bq, const float *S, const float *X, int ldx, float *C,
                                 int ldc, int diag, int first) {
    int g;
    if (!diag) { mf__tile_mm(bk, n, bq, S, MF__AT_BQ, 1, X, ldx, C, ldc, 1); return; }
    for (g = 0; g < bk; g += MF__AT_G) {
        int c0 = mf__attn_first_vec(first + g), rows = bk - g < MF__AT_G ? bk - g : MF__AT_G;
        if (c0 < bq)
            mf__tile_mm(rows, n, bq - c0, S + (int64_t)g * MF__AT_BQ + c0, MF__AT_BQ, 1, X + (int64_t)c0 * ldx, ldx,
                        C + (int64_t)g * ldc, ldc, 1);
    }
}
/* C [bq][n] += S^T X for S [bk][BQ], X [bk][n] (O += P V, dQ += dS K: a sum over the tile's keys) */
static void mf__attn_mm_queries_acc(int bq, int n, int bk, const float *S, const float *X, int ldx, float *C,
                                    int ldc, int diag, int first) {
    int q0;
    if (!diag) { mf__tile_mm(bq, n, bk, S, 1, MF__AT_BQ, X, ldx, C, ldc, 1); return; }
    for (q0 = 0; q0 < bq; q0 += MF__AT_G) { /* key r is visible to some query of the group iff first + r <= q0 + 15 */
        int kq = q0 + MF__AT_G - first, rows = bq - q0 < MF__AT_G ? bq - q0 : MF__AT_G;
        if (kq > bk) kq = bk;
        if (kq > 0) mf__tile_mm(rows, n, kq, S + q0, 1, MF__AT_BQ, X, ldx, C + (int64_t)q0 * ldc, ldc, 1);
    }
}

static int mf__attention_shape(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *q = out->src[0], *k = out->src[1], *v = out->src[2];
    int shape[4], bthd = out->iarg[MF__ARG_ATTN_LAYOUT] != 0, ht = bthd ? 2 : 1, tt = bthd ? 1 : 2, x, h[3];
    const char *lay = bthd ? "[B, T, H, d] (MF_ATTN_TOKENS_MAJOR)" : "[B, H, T, d]";
    char sq[64], sk[64], sv[64];
    mf_shape_str(q, sq, 64); mf_shape_str(k, sk, 64); mf_shape_str(v, sv, 64);
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        return MF__SHAPE_FAIL("attention: q %s, k %s, v %s must all be 4-D: %s (split the heads with "
                              "mf_reshape%s)", sq, sk, sv, lay, bthd ? "" : " + mf_transpose");
    for (x = 0; x < 3; x++) { /* the heads of each operand (a pack holds P H) */
        int P = mf__attn_packs(out->iarg[MF__ARG_ATTN_PARTS], x), part = mf__attn_part(out->iarg[MF__ARG_ATTN_PARTS], x);
        h[x] = out->src[x]->shape[ht] / P;
        if (P < 1 || out->src[x]->shape[ht] % P || part >= P)
            return MF__SHAPE_FAIL("attention: part %d of a pack of %d does not fit %s", part, P,
                                  x == 0 ? sq : x == 1 ? sk : sv);
    }
    if (k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] || h[1] != h[0] || h[2] != h[0])
        return MF__SHAPE_FAIL("attention: batch and head sizes differ: q %s, k %s, v %s; B and H of %s "
                              "must be equal", sq, sk, sv, lay);
    if (k->shape[tt] != v->shape[tt])
        return MF__SHAPE_FAIL("attention: k %s and v %s have different numbers of keys (T of %s); "
                              "each key needs one value", sk, sv, lay);
    if (k->shape[3] != q->shape[3])
        return MF__SHAPE_FAIL("attention: q %s and k %s have different head sizes dk (last size)", sq, sk);
    if (!(fabsf(out->farg[MF__FARG_ATTN_SCALE]) <= 3.402823466e+38f)) /* not NaN, not infinite */
        return MF__SHAPE_FAIL("attention: scale is %g; it must be finite (usually 1 / sqrt(dk))",
                              (double)out->farg[MF__FARG_ATTN_SCALE]);
    shape[0] = q->shape[0]; shape[1] = bthd ? q->shape[1] : h[0]; shape[2] = bthd ? h[0] : q->shape[2];
    shape[3] = v->shape[3];
    mf__set_shape(out, 4, shape); /* [B, H, Tq, dv] or [B, Tq, H, dv]: q's layout */
    return 0;
}

/* The online softmax of a query tile (FlashAttention-2), shared by the fused kernels: per query a
   running max m, a running sum l of exp(s - m) and an accumulator acc [MF__AT_BQ][dv] of exp(s - m) v.
   m starts very negative but finite: exp(m_old - m_new) is then 1 or 0, never NaN. */
static void mf__attn_online_init(float *m, float *l, float *acc, int dv) {
    int ii;
    for (ii = 0; ii < MF__AT_BQ; ii++) { m[ii] = -1e30f; l[ii] = 0; }
    memset(acc, 0, (size_t)MF__AT_BQ * dv * sizeof(float));
}
/* One key block: st [bk][MF__AT_BQ] holds the (transposed, scaled, masked) scores and is replaced by
   exp(s - m_new); acc (bq rows) is rescaled by al = exp(m_old - m_new) and gains P vblk
   (vblk: the block's bk values, rows ldv floats apart). al: MF__AT_BQ floats of scratch. diag, first: a causal
   diagonal tile's hidden part, left out of P vblk (mf__attn_mm_queries_acc). d: the dropout (e0, ld:
   mf__attn_drop_tile's element index of the tile and Tk), applied to P after the sum l. */
static void mf__attn_online_block(float *st, int bk, int bq, int dv, const float *vblk, int ldv, float *m, float *l,
                                  float *al, float *acc, int diag, int first, const mf__attn_drop *d, int64_t e0,
                                  int64_t ld, int bf16) {
    int ii, jj, c;
    for (ii = 0; ii < MF__AT_BQ; ii += MF__AW) { /* MF__AW queries at a time */
        /* the max and the sum in 4 chains of keys jj % 4 (one chain would wait on each max / add) */
        mf__av mo = mf__av_load(m + ii), mx = mo, x0 = mo, x1 = mo, x2 = mo, x3 = mo, sum, a;
        float *c = st + ii;
        for (jj = 0; jj + 4 <= bk; jj += 4, c += 4 * MF__AT_BQ) {
            x0 = mf__av_max(x0, mf__av_load(c)); x1 = mf__av_max(x1, mf__av_load(c + MF__AT_BQ));
            x2 = mf__av_max(x2, mf__av_load(c + 2 * MF__AT_BQ)); x3 = mf__av_max(x3, mf__av_load(c + 3 * MF__AT_BQ));
        }
        for (; jj < bk; jj++, c += MF__AT_BQ) x0 = mf__av_max(x0, mf__av_load(c));
        mx = mf__av_max(mf__av_max(x0, x1), mf__av_max(x2, x3));
        a = mf__av_exp(mf__av_sub(mo, mx));
        x0 = x1 = x2 = x3 = mf__av_zero();
#define MF__AT_EXP1(x, c) { mf__av p_ = mf__av_exp(mf__av_sub(mf__av_load(c), mx)); mf__av_store(c, p_); x = mf__av_add(x, p_); }
        for (jj = 0, c = st + ii; jj + 4 <= bk; jj += 4, c += 4 * MF__AT_BQ) {
            MF__AT_EXP1(x0, c) MF__AT_EXP1(x1, c + MF__AT_BQ) MF__AT_EXP1(x2, c + 2 * MF__AT_BQ) MF__AT_EXP1(x3, c + 3 * MF__AT_BQ)
        }
        for (; jj < bk; jj++, c += MF__AT_BQ) MF__AT_EXP1(x0, c)
#undef MF__AT_EXP1
        sum = mf__av_add(mf__av_add(x0, x1), mf__av_add(x2, x3));
        mf__av_store(m + ii, mx);
        mf__av_store(al + ii, a);
        mf__av_store(l + ii, mf__av_fma(a, mf__av_load(l + ii), sum));
    }
    for (ii = 0; ii < bq; ii++)
        if (al[ii] != 1.0f)
            for (c = 0; c < dv; c++) acc[(int64_t)ii * dv + c] *= al[ii];
    if (d->p > 0.0f) mf__attn_drop_tile(d, st, st, bk, bq, e0, ld); /* after the sum: l is undropped */
    if (bf16) mf__bf16_rows(st, st, MF__AT_BQ, bk, MF__AT_BQ); /* P~, the product's operand */
    mf__attn_mm_queries_acc(bq, dv, bk, st, vblk, ldv, acc, dv, diag, first);
}
/* o = acc / l (rows ldo floats apart) and the row log-sum-exp m + log l; a query that saw no key:
   zeros and +inf */
static void mf__attn_online_finish(const float *acc, const float *m, const float *l, int bq, int dv, float *o,
                                   int ldo, float *lse) {
    int ii, c;
    for (ii = 0; ii < bq; ii++) {
        float inv = l[ii] > 0 ? 1.0f / l[ii] : 0.0f;
        for (c = 0; c < dv; c++) o[(int64_t)ii * ldo + c] = acc[(int64_t)ii * dv + c] * inv;
        lse[ii] = l[ii] > 0 ? m[ii] + logf(l[ii]) : INFINITY;
    }
}

/* rows rows of n floats: dst (ldd apart) = src (lds apart), or += with add; the strided side's
   rows are asked for MF__AT_PF rows ahead */
#define MF__AT_PF 8
static void mf__attn_rows(float *dst, int ldd, const float *src, int lds, int rows, int n, int add) {
    int r, c;
    for (r = 0; r < rows; r++) {
        float *y = dst + (int64_t)r * ldd;
        const float *x = src + (int64_t)r * lds;
        if (r + MF__AT_PF < rows) mf__prefetch_row(add ? y + (int64_t)MF__AT_PF * ldd : x + (int64_t)MF__AT_PF * lds, n);
        if (add) for (c = 0; c < n; c++) y[c] += x[c];
        else memcpy(y, x, (size_t)n * sizeof(float));
    }
}
/* the scratch of mf__attn_fwd_tile_kv, rounded up to 16 floats */
static int64_t mf__attn_fwd_floats(const mf__attn_geo *g) {
    return ((int64_t)(g->dk + g->dv + MF__AT_BK + 3) * MF__AT_BQ + (int64_t)MF__AT_BK * (g->dk + g->dv) + 15) & ~(int64_t)15;
}
/* Forward of query tile qt of head bh, the keys and values read from k, v (row 0 of the head, rows
   ldk / ldv floats apart); work: (dk + 64 + dv + 3) * 64 + 64 (dk + dv) floats. bf16: the tile
   products' operands rounded to bf16 (scale * Q^T, P~ and, when stage, the K and V tiles as they are
   copied; without stage k and v hold bf16 values already) */
static void mf__attn_fwd_tile_kv(mf_tensor *out, const mf__attn_drop *d, const mf__attn_geo *g, int64_t bh, int qt,
                                 float *work, const float *k, int ldk, const float *v, int ldv, int bf16, int stage) {
    int Tq = g->Tq, Tk = g->Tk, dk = g->dk, dv = g->dv;
    int causal = out->iarg[MF__ARG_ATTN_CAUSAL], off = Tk - Tq, i0 = qt * MF__AT_BQ, j0, kend;
    int bq = Tq - i0 < MF__AT_BQ ? Tq - i0 : MF__AT_BQ;
    float scale = out->farg[MF__FARG_ATTN_SCALE];
    const float *q = out->src[0]->data + mf__attn_at(g, MF__AT_Q, bh, i0);
    float *o = out->data + mf__attn_at(g, MF__AT_O, bh, i0), *lse = out->saved + bh * Tq + i0;
    float *qt_ = work, *st = qt_ + (int64_t)dk * MF__AT_BQ, *acc = st + MF__AT_BK * MF__AT_BQ;
    float *m = acc + (int64_t)MF__AT_BQ * dv, *l = m + MF__AT_BQ, *al = l + MF__AT_BQ;
    float *kc = al + MF__AT_BQ, *vc = kc + (int64_t)MF__AT_BK * dk; /* contiguous K, V tiles (token-major) */
    int pack = ldk != dk || ldv != dv || stage;
    /* keys from kend on are hidden from every query of the tile */
    kend = causal ? (i0 + bq + off < Tk ? i0 + bq + off : Tk) : Tk;
    mf__attn_transpose(q, g->ld[MF__AT_Q], bq, MF__AT_BQ, dk, scale, qt_, MF__AT_BQ);
    if (bf16) mf__bf16_rows(qt_, qt_, MF__AT_BQ, dk, MF__AT_BQ);
    mf__attn_online_init(m, l, acc, dv);
    for (j0 = 0; j0 < kend; j0 += MF__AT_BK) {
        int bk = kend - j0 < MF__AT_BK ? kend - j0 : MF__AT_BK, diag = causal && j0 + bk - 1 > i0 + off;
        const float *kb = k + (int64_t)j0 * ldk, *vb = v + (int64_t)j0 * ldv;
        if (pack) { /* far-apart rows (see mf__attn_bwd_gather): the tile products read copies */
            if (stage) mf__bf16_rows(kc, kb, ldk, bk, dk);
            else mf__attn_rows(kc, dk, kb, ldk, bk, dk, 0);
            if (vb == kb && dv == dk) vb = kc;
            else if (stage) vb = mf__bf16_rows(vc, vb, ldv, bk, dv);
            else { mf__attn_rows(vc, dv, vb, ldv, bk, dv, 0); vb = vc; }
            kb = kc;
        }
        mf__attn_mm_keys(bk, dk, kb, pack ? dk : ldk, qt_, MF__AT_BQ, st, diag, j0 - off - i0);
        if (diag) mf__attn_mask(st, j0, bk, i0, off);
        mf__attn_online_block(st, bk, bq, dv, vb, pack ? dv : ldv, m, l, al, acc, diag, j0 - off - i0, d,
                              (bh * Tq + i0) * Tk + j0, Tk, bf16);
    }
    mf__attn_online_finish(acc, m, l, bq, dv, o, g->ld[MF__AT_O], lse);
}
/* Forward of query tile qt of head bh (mf__attn_tiles_fwd's tile); qt < 0: every query tile of the
   head, with its far-apart keys and values (token-major rows) copied once into the end of work
   (Tk (dk + dv) floats more) rather than a key tile per query tile. bf16: the tile products on
   operands rounded to bf16, the keys and values rounded as they are copied (per head or per tile). */
static void mf__attn_fwd_tile(mf_tensor *out, const mf__attn_drop *d, int64_t bh, int qt, float *work, int bf16) {
    const mf__attn_geo g = mf__attn_geo_of(out);
    const float *k = out->src[1]->data + mf__attn_at(&g, MF__AT_K, bh, 0);
    const float *v = out->src[2]->data + mf__attn_at(&g, MF__AT_V, bh, 0);
    float *kh = work + mf__attn_fwd_floats(&g), *vh = kh + (int64_t)g.Tk * g.dk;
    if (qt >= 0) {
        mf__attn_fwd_tile_kv(out, d, &g, bh, qt, work, k, g.ld[MF__AT_K], v, g.ld[MF__AT_V], bf16, bf16);
        return;
    }
    if (bf16) mf__bf16_rows(kh, k, g.ld[MF__AT_K], g.Tk, g.dk);
    else mf__attn_rows(kh, g.dk, k, g.ld[MF__AT_K], g.Tk, g.dk, 0);
    if (v == k && g.dv == g.dk) vh = kh; /* k = v (metric, quadratic: p): one copy */
    else if (bf16) mf__bf16_rows(vh, v, g.ld[MF__AT_V], g.Tk, g.dv);
    else mf__attn_rows(vh, g.dv, v, g.ld[MF__AT_V], g.Tk, g.dv, 0);
    for (qt = (g.Tq + MF__AT_BQ - 1) / MF__AT_BQ - 1; qt >= 0; qt--)
        mf__attn_fwd_tile_kv(out, d, &g, bh, qt, work, kh, g.dk, vh, g.dv, bf16, 0);
}

static int mf__attn_threads(mf_ctx *ctx, double work) {
#if MF__OMP
    return mf__threads_for(ctx, work);
#else
    (void)ctx; (void)work;
    return 1;
#endif
}
/* The fused kernels' small products ([mf:attention], [mf:xl], the chunkwise fast weights, the
   feedback recurrence's steps) on bf16 operands: a CPU context in MF_PREC_BF16, whichever kernel its
   GEMMs run on (docs/math.md §22.5) */
static int mf__attn_bf16(const mf_ctx *ctx) { return mf__ctx_bf16(ctx) != MF_BF16_NONE; }
static int mf__attn_thread_num(void) {
#if MF__OMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
/* The forward of a tiled attention (this op, and rel_attention in [mf:xl]): tile(out, dropout, head,
   query tile, scratch) for every query tile of every head, on up to nt threads with `per` floats of
   scratch each (flops sizes the thread count); out->saved gets the log-sum-exp [BH][Tq].
   per_head > 0: when there are heads enough to keep the threads busy (4 per thread), a thread takes
   whole heads instead, tile(..., head, -1, ...), with per + per_head floats of scratch. tile's bf16:
   the context's products are bf16 (a CPU context in MF_PREC_BF16: mf__attn_bf16). */
static void mf__attn_tiles_fwd(mf_ctx *ctx, mf_tensor *out, int64_t per, int64_t per_head, double flops,
                               void (*tile)(mf_tensor *out, const mf__attn_drop *d, int64_t bh, int qt, float *work,
                                            int bf16)) {
    const mf__attn_geo g = mf__attn_geo_of(out);
    mf__attn_drop d = mf__attn_drop_of(ctx, out);
    int Tq = g.Tq, nqt = (Tq + MF__AT_BQ - 1) / MF__AT_BQ, nt, heads, bf16 = mf__attn_bf16(ctx);
    int64_t BH = g.BH, n = BH * nqt, t;
    float *work;
    nt = mf__attn_threads(ctx, flops);
    if (nt > n) nt = (int)n;
    heads = per_head > 0 && BH >= 4 * (int64_t)nt;
    if (heads) { per = (per + per_head + 15) & ~(int64_t)15; n = BH; }
    out->saved = (float *)mf__alloc(ctx, (size_t)(BH * Tq) * sizeof(float));
    work = (float *)mf__alloc(ctx, (size_t)(per * nt) * sizeof(float));
    if (!out->saved || !work) return;
#if MF__OMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for (t = 0; t < n; t++) /* the last query tiles of a causal head have the most keys: go first */
        tile(out, &d, heads ? t : t / nqt, heads ? -1 : nqt - 1 - (int)(t % nqt), work + per * mf__attn_thread_num(),
             bf16);
}
/* The backward's per-head inputs of head t: dO^T [dv][Tqp], the forward's lse [Tqp] (+inf
   padding) and D = rowsum(dO * O) [Tqp]; ge: the op's geometry (mf__attn_geo_of); g: dO of the head,
   rows ldg floats apart (NULL: in out->grad) */
static void mf__attn_bwd_head(const mf_tensor *out, const mf__attn_geo *ge, int64_t t, const float *g, int ldg, int Tqp,
                              float *dot, float *lse, float *D) {
    int Tq = ge->Tq, dv = ge->dv, ld = ge->ld[MF__AT_O], i;
    const float *o = out->data + mf__attn_at(ge, MF__AT_O, t, 0);
    if (!g) { g = out->grad + mf__attn_at(ge, MF__AT_O, t, 0); ldg = ld; }
    mf__attn_transpose(g, ldg, Tq, Tqp, dv, 1.0f, dot, Tqp);
    for (i = 0; i < Tqp; i++) {
        lse[i] = i < Tq ? out->saved[t * Tq + i] : INFINITY;
        D[i] = i < Tq ? mf__vdot(dv, g + (int64_t)i * ldg, o + (int64_t)i * ld, MF__TAIL_VEC) : 0.0f;
    }
}

static void mf__attention_forward(mf_ctx *ctx, mf_tensor *out) {
    const mf__attn_geo g = mf__attn_geo_of(out);
    int Tq = g.Tq, Tk = g.Tk, dk = g.dk, dv = g.dv;
    int64_t BH = g.BH;
    int strided = g.ld[MF__AT_K] != dk || g.ld[MF__AT_V] != dv || mf__attn_bf16(ctx); /* bf16: rounded copies */
    mf__attn_tiles_fwd(ctx, out, mf__attn_fwd_floats(&g), strided ? (int64_t)Tk * (dk + dv) : 0,
                       2.0 * (double)BH * Tq * Tk * (dk + dv) * (out->iarg[MF__ARG_ATTN_CAUSAL] ? 0.5 : 1.0),
                       mf__attn_fwd_tile);
}

/* One head's rows for the backward: q, k, v, dO and the gradients gq, gk, gv (NULL: not wanted here)
   from row 0 of the head on, and the row strides (the gradients': their input's) - in the tensors, or
   in a thread's contiguous copy of the head (mf__attn_bwd_gather). */
typedef struct mf__attn_head { const float *q, *k, *v, *dO; float *gq, *gk, *gv; int ldq, ldk, ldv, ldo; } mf__attn_head;
/* head bh in the tensors; what: 1 = dK and dV, 2 = dQ, 3 = all */
static mf__attn_head mf__attn_head_of(const mf_tensor *out, const mf__attn_geo *ge, int64_t bh, int what) {
    mf__attn_head h;
    float *gq = (what & 2) ? mf__g(out->src[0]) : NULL, *gk = (what & 1) ? mf__g(out->src[1]) : NULL;
    float *gv = (what & 1) ? mf__g(out->src[2]) : NULL;
    int64_t qo = mf__attn_at(ge, MF__AT_Q, bh, 0), ko = mf__attn_at(ge, MF__AT_K, bh, 0), vo = mf__attn_at(ge, MF__AT_V, bh, 0);
    h.q = out->src[0]->data + qo; h.k = out->src[1]->data + ko; h.v = out->src[2]->data + vo;
    h.dO = out->grad + mf__attn_at(ge, MF__AT_O, bh, 0);
    h.gq = gq ? gq + qo : NULL; h.gk = gk ? gk + ko : NULL; h.gv = gv ? gv + vo : NULL;
    h.ldq = ge->ld[MF__AT_Q]; h.ldk = ge->ld[MF__AT_K]; h.ldv = ge->ld[MF__AT_V]; h.ldo = ge->ld[MF__AT_O];
    return h;
}
/* Token-major heads have rows H d (or P H d) floats apart: strides of 1 KiB and more, whose rows
   fall into a few L1 sets and defeat the prefetcher (the tile products ran ~30% slower). A thread
   copies such a head into w (floats: mf__attn_gather_floats) as [T][d] blocks with zeroed
   gradients, runs its pairs there and adds the gradients back (mf__attn_bwd_scatter). */
static int64_t mf__attn_gather_floats(const mf__attn_geo *ge) {
    return 2 * ((int64_t)ge->Tq * ge->dk + (int64_t)ge->Tk * (ge->dk + ge->dv)) + (int64_t)ge->Tq * ge->dv;
}
/* The head's inputs q, k, v, dO as [T][d] blocks in w ((Tq + Tk) (dk + dv) floats), copied when fill,
   rounded to bf16 when bf16 (the tile products' operands, docs/math.md §22.5); the gradients stay t's */
static mf__attn_head mf__attn_bwd_inputs(const mf__attn_geo *ge, const mf__attn_head *t, float *w, int fill, int bf16) {
    mf__attn_head h = *t;
    int Tq = ge->Tq, Tk = ge->Tk, dk = ge->dk, dv = ge->dv;
    float *q = w, *k = q + (int64_t)Tq * dk, *v = k + (int64_t)Tk * dk, *o = v + (int64_t)Tk * dv;
    int kv = t->v == t->k && dv == dk; /* k = v (metric, quadratic: p): one copy */
    if (fill && bf16) {
        mf__bf16_rows(q, t->q, t->ldq, Tq, dk); mf__bf16_rows(k, t->k, t->ldk, Tk, dk);
        if (!kv) mf__bf16_rows(v, t->v, t->ldv, Tk, dv);
        mf__bf16_rows(o, t->dO, t->ldo, Tq, dv);
    } else if (fill) {
        mf__attn_rows(q, dk, t->q, t->ldq, Tq, dk, 0); mf__attn_rows(k, dk, t->k, t->ldk, Tk, dk, 0);
        if (!kv) mf__attn_rows(v, dv, t->v, t->ldv, Tk, dv, 0);
        mf__attn_rows(o, dv, t->dO, t->ldo, Tq, dv, 0);
    }
    h.q = q; h.k = k; h.v = kv ? k : v; h.dO = o;
    h.ldq = h.ldk = dk; h.ldv = h.ldo = dv;
    return h;
}
static mf__attn_head mf__attn_bwd_gather(const mf__attn_geo *ge, const mf__attn_head *t, float *w, int bf16) {
    mf__attn_head h = mf__attn_bwd_inputs(ge, t, w, 1, bf16);
    int Tq = ge->Tq, Tk = ge->Tk, dk = ge->dk, dv = ge->dv;
    float *gq = w + (int64_t)(Tq + Tk) * (dk + dv), *gk = gq + (int64_t)Tq * dk, *gv = gk + (int64_t)Tk * dk;
    memset(gq, 0, (size_t)((int64_t)Tq * dk + (int64_t)Tk * (dk + dv)) * sizeof(float));
    h.gq = t->gq ? gq : NULL; h.gk = t->gk ? gk : NULL; h.gv = t->gv ? gv : NULL;
    return h;
}
static void mf__attn_bwd_scatter(const mf__attn_geo *ge, const mf__attn_head *t, const mf__attn_head *h) {
    if (t->gq) mf__attn_rows(t->gq, t->ldq, h->gq, h->ldq, ge->Tq, ge->dk, 1);
    if (t->gk) mf__attn_rows(t->gk, t->ldk, h->gk, h->ldk, ge->Tk, ge->dk, 1);
    if (t->gv) mf__attn_rows(t->gv, t->ldv, h->gv, h->ldv, ge->Tk, ge->dv, 1);
}

/* Backward of one (key tile kt, query tile qt) pair of head bh; ge: the op's geometry (mf__attn_geo_of); hp: the head's rows
   (only its non-NULL gradients are computed).
   hd: the head's scale * Q^T [dk][Tqp], dO^T [dv][Tqp], lse [Tqp] (+inf padding), D [Tqp];
   st, dp: two 64 x 64 tiles of the thread; with dropout (d->p > 0) a third, pd, gets the dropped
   P~ = P * mask / (1 - p): dV += P~^T dO and dS = P * (mask dP~ / (1 - p) - D) = P~ dP~ - P D
   (D = rowsum(dO * O) is still sum_j P dP: O = P~ V).
   rt: NULL, or a tile for the bf16 copies of P~ and dS (bf16 products: hp's inputs and hd's
   transposes hold bf16 values, mf__attention_backward; P and dS stay fp32 for dS and the sums). */
static void mf__attn_bwd_pair(mf_tensor *out, const mf__attn_geo *ge, const mf__attn_drop *d, int64_t bh, int kt,
                              int qt, const mf__attn_head *hp, const float *hd, float *st, float *dp, float *pd,
                              float *rt) {
    int Tq = ge->Tq, Tk = ge->Tk, dk = ge->dk, dv = ge->dv, causal = out->iarg[MF__ARG_ATTN_CAUSAL];
    int ldq = hp->ldq, ldk = hp->ldk, ldv = hp->ldv, ldo = hp->ldo;
    int Tqp = (Tq + MF__AT_BQ - 1) / MF__AT_BQ * MF__AT_BQ, off = Tk - Tq, jj, ii;
    int i0 = qt * MF__AT_BQ, j0 = kt * MF__AT_BK;
    int bq = Tq - i0 < MF__AT_BQ ? Tq - i0 : MF__AT_BQ, bk = Tk - j0 < MF__AT_BK ? Tk - j0 : MF__AT_BK;
    float scale = out->farg[MF__FARG_ATTN_SCALE];
    float *gq = hp->gq, *gk = hp->gk, *gv = hp->gv;
    int64_t qi = (int64_t)i0 * ldq, kj = (int64_t)j0 * ldk, vj = (int64_t)j0 * ldv;
    const float *q = hp->q + qi, *k = hp->k + kj;
    const float *v = hp->v + vj, *dO = hp->dO + (int64_t)i0 * ldo;
    const float *qs = hd + i0, *dot = hd + (int64_t)dk * Tqp + i0;
    const float *lse = hd + (int64_t)(dk + dv) * Tqp + i0, *D = lse + Tqp;
    int diag = causal && j0 + bk - 1 > i0 + off, first = j0 - off - i0;
    if (causal && j0 > i0 + bq - 1 + off) return; /* every key of the tile is hidden */
    /* P^T = exp(scale k q - lse) */
    mf__attn_mm_keys(bk, dk, k, ldk, qs, Tqp, st, diag, first);
    if (diag) mf__attn_mask(st, j0, bk, i0, off);
    for (jj = 0; jj < bk; jj++)
        for (ii = 0; ii < MF__AT_BQ; ii += MF__AW) {
            float *s = st + jj * MF__AT_BQ + ii;
            mf__av_store(s, mf__av_exp(mf__av_sub(mf__av_load(s), mf__av_load(lse + ii))));
        }
    if (d->p > 0.0f) mf__attn_drop_tile(d, pd, st, bk, bq, (bh * Tq + i0) * Tk + j0, Tk);
    if (gv) { /* dV += P^T dO (P~ with dropout) */
        const float *pv = d->p > 0.0f ? pd : st;
        if (rt) pv = mf__bf16_rows(rt, pv, MF__AT_BQ, bk, MF__AT_BQ);
        mf__attn_mm_keys_acc(bk, dv, bq, pv, dO, ldo, gv + vj, ldv, diag, first);
    }
    if (!gk && !gq) return;
    /* dP^T = v dO^T; dS^T = scale * P^T * (dP^T - D), 0 where P is (dP^T is not computed there) */
    mf__attn_mm_keys(bk, dv, v, ldv, dot, Tqp, dp, diag, first);
    for (jj = 0; jj < bk; jj++) {
        int c0 = diag ? mf__attn_first_vec(first + jj / MF__AT_G * MF__AT_G) : 0;
        float *g = dp + jj * MF__AT_BQ;
        for (ii = 0; ii < c0; ii += MF__AW) mf__av_store(g + ii, mf__av_zero());
        if (d->p > 0.0f)
            for (; ii < MF__AT_BQ; ii += MF__AW) {
                mf__av ds = mf__av_sub(mf__av_mul(mf__av_load(pd + jj * MF__AT_BQ + ii), mf__av_load(g + ii)),
                                       mf__av_mul(mf__av_load(st + jj * MF__AT_BQ + ii), mf__av_load(D + ii)));
                mf__av_store(g + ii, mf__av_mul(ds, mf__av_set1(scale)));
            }
        else
            for (; ii < MF__AT_BQ; ii += MF__AW) {
                mf__av ds = mf__av_mul(mf__av_load(st + jj * MF__AT_BQ + ii),
                                       mf__av_sub(mf__av_load(g + ii), mf__av_load(D + ii)));
                mf__av_store(g + ii, mf__av_mul(ds, mf__av_set1(scale)));
            }
    }
    if (rt) dp = mf__bf16_rows(rt, dp, MF__AT_BQ, bk, MF__AT_BQ);
    if (gq) /* dQ += dS K */
        mf__attn_mm_queries_acc(bq, dk, bk, dp, k, ldk, gq + qi, ldq, diag, first);
    if (gk) /* dK += dS^T Q */
        mf__attn_mm_keys_acc(bk, dk, bq, dp, q, ldq, gk + kj, ldk, diag, first);
}

/* Head t's per-head inputs of the backward in hd: scale * Q^T [dk][Tqp], dO^T [dv][Tqp], lse [Tqp] (+inf
   padding), D = rowsum(dO * O) [Tqp]; q, dO: the head's rows (ldq / ldo floats apart; dO NULL: in out->grad) */
static void mf__attn_bwd_tables(const mf_tensor *out, const mf__attn_geo *ge, int64_t t, const float *q, int ldq,
                                const float *dO, int ldo, int Tqp, float *hd) {
    int dk = ge->dk, dv = ge->dv;
    mf__attn_transpose(q, ldq, ge->Tq, Tqp, dk, out->farg[MF__FARG_ATTN_SCALE], hd, Tqp);
    mf__attn_bwd_head(out, ge, t, dO, ldo, Tqp, hd + (int64_t)dk * Tqp, hd + (int64_t)(dk + dv) * Tqp,
                      hd + (int64_t)(dk + dv + 1) * Tqp);
}
static void mf__attention_backward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2];
    const mf__attn_geo ge = mf__attn_geo_of(out);
    int Tq = ge.Tq, Tk = ge.Tk, dk = ge.dk, dv = ge.dv;
    int nqt = (Tq + MF__AT_BQ - 1) / MF__AT_BQ, nkt = (Tk + MF__AT_BK - 1) / MF__AT_BK;
    int Tqp = nqt * MF__AT_BQ, nt, pass, need_kv = mf__g(K) || mf__g(V), need_q = mf__g(Q) != NULL;
    int64_t BH = ge.BH, hs = (int64_t)(dk + dv + 2) * Tqp, t;
    mf__attn_drop d = mf__attn_drop_of(ctx, out);
    int bf16 = mf__attn_bf16(ctx), np = (d.p > 0.0f ? 3 : 2) + bf16; /* bf16: a tile for the rounded P~, dS */
    int64_t tile = MF__AT_BK * MF__AT_BQ, per = np * tile, in = (int64_t)(Tq + Tk) * (dk + dv);
    int gather = ge.ld[MF__AT_Q] != dk || ge.ld[MF__AT_K] != dk || ge.ld[MF__AT_V] != dv || ge.ld[MF__AT_O] != dv;
    float *head, *work, *rin = NULL;
    if (!need_kv && !need_q) return;
    nt = mf__attn_threads(ctx, 5.0 * (double)BH * Tq * Tk * (dk + dv) * (out->iarg[MF__ARG_ATTN_CAUSAL] ? 0.5 : 1.0));
    /* Whole heads per thread (5 products per tile pair) when that keeps the threads about as busy
       as the split (7 products per pair); else the dK/dV pass, then the dQ pass. A thread's head
       (copied first when its rows are far apart) gives its per-head inputs: scale * Q^T [dk][Tqp],
       dO^T [dv][Tqp], lse [Tqp] (+inf padding), D = rowsum(dO * O) [Tqp]. bf16: the tile products'
       operands rounded once per head (a copy of q, k, v, dO, and the two transposes); lse and D,
       from the fp32 values, stay fp32. */
    if (need_kv && need_q && (double)((BH + nt - 1) / nt) <= 1.4 * (double)BH / nt) {
        int64_t gper = gather || bf16 ? (mf__attn_gather_floats(&ge) + 15) & ~(int64_t)15 : 0, tper = per + hs + gper;
        work = (float *)mf__alloc(ctx, (size_t)(tper * nt) * sizeof(float));
        if (!work) return;
#if MF__OMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
        for (t = 0; t < BH; t++) {
            float *st = work + tper * mf__attn_thread_num(), *hd = st + per;
            mf__attn_head th = mf__attn_head_of(out, &ge, t, 3), h = th;
            int kt, qt;
            if (bf16) mf__attn_bwd_tables(out, &ge, t, th.q, th.ldq, th.dO, th.ldo, Tqp, hd);
            if (gather || bf16) h = mf__attn_bwd_gather(&ge, &th, hd + hs, bf16);
            if (bf16) mf__bf16_rows(hd, hd, Tqp, dk + dv, Tqp);
            else mf__attn_bwd_tables(out, &ge, t, h.q, h.ldq, h.dO, h.ldo, Tqp, hd);
            for (kt = 0; kt < nkt; kt++)
                for (qt = 0; qt < nqt; qt++)
                    mf__attn_bwd_pair(out, &ge, &d, t, kt, qt, &h, hd, st, st + tile, st + 2 * tile,
                                      bf16 ? st + (np - 1) * tile : NULL);
            if (gather || bf16) mf__attn_bwd_scatter(&ge, &th, &h);
        }
        return;
    }
    head = (float *)mf__alloc(ctx, (size_t)(BH * hs) * sizeof(float));
    work = (float *)mf__alloc(ctx, (size_t)(per * nt) * sizeof(float));
    if (bf16) rin = (float *)mf__alloc(ctx, (size_t)(BH * in) * sizeof(float)); /* every head's rounded inputs */
    if (!head || !work || (bf16 && !rin)) return;
#if MF__OMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (t = 0; t < BH; t++) {
        mf__attn_bwd_tables(out, &ge, t, Q->data + mf__attn_at(&ge, MF__AT_Q, t, 0), ge.ld[MF__AT_Q], NULL, 0, Tqp,
                            head + t * hs);
        if (bf16) {
            mf__attn_head th = mf__attn_head_of(out, &ge, t, 3);
            mf__bf16_rows(head + t * hs, head + t * hs, Tqp, dk + dv, Tqp);
            mf__attn_bwd_inputs(&ge, &th, rin + t * in, 1, 1);
        }
    }
    for (pass = 0; pass < 2; pass++) { /* 0: dK, dV over (head, key tile); 1: dQ over (head, query tile) */
        int nown = pass == 0 ? nkt : nqt, nloop = pass == 0 ? nqt : nkt;
        int64_t n = BH * nown;
        if (pass == 0 ? !need_kv : !need_q) continue;
#if MF__OMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
        for (t = 0; t < n; t++) {
            int64_t bh = t / nown;
            int own = (int)(t % nown), x;
            float *st = work + per * mf__attn_thread_num();
            mf__attn_head h = mf__attn_head_of(out, &ge, bh, pass == 0 ? 1 : 2);
            if (bf16) h = mf__attn_bwd_inputs(&ge, &h, rin + bh * in, 0, 1);
            for (x = 0; x < nloop; x++)
                mf__attn_bwd_pair(out, &ge, &d, bh, pass == 0 ? own : x, pass == 0 ? x : own, &h, head + bh * hs, st,
                                  st + tile, st + 2 * tile, bf16 ? st + (np - 1) * tile : NULL);
        }
    }
}
static const mf__op mf__op_attention = { "attention", 3, mf__attention_shape, mf__attention_forward,
                                         mf__attention_backward, MF__OP_PROPS(MF__OP_BF16) };
/* the attention op; parts: 0, or (token-major) 1 + the parts q, k, v read of packs [B, T, P H, d]
   in bytes 0, 1, 2 (MF__ARG_ATTN_PARTS) */
static mf_tensor *mf__attention_make(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, float scale, int causal,
                                     float dropout, int bthd, int parts) {
    mf_tensor *t;
    if (!mf_ok(ctx) || mf__attn_drop_check(ctx, "attention", dropout) < 0) return NULL;
    t = mf__begin(ctx, &mf__op_attention, q, k, v, NULL);
    if (t) {
        t->farg[MF__FARG_ATTN_SCALE] = scale; t->iarg[MF__ARG_ATTN_CAUSAL] = causal != 0;
        t->iarg[MF__ARG_ATTN_LAYOUT] = bthd; t->iarg[MF__ARG_ATTN_PARTS] = parts;
    }
    if (t) mf__attn_drop_set(ctx, t, dropout);
    return mf__finish(ctx, t);
}
MFDEF mf_tensor *mf_attention_layout(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, float scale,
                                     int causal, float dropout, mf_attn_layout layout) {
    if (!mf_ok(ctx)) return NULL;
    if (layout != MF_ATTN_HEADS_MAJOR && layout != MF_ATTN_TOKENS_MAJOR)
        return (mf_tensor *)mf__fail(ctx, "mf_attention_layout: layout %d is neither MF_ATTN_HEADS_MAJOR (0) nor "
                                     "MF_ATTN_TOKENS_MAJOR (1)", (int)layout);
    return mf__attention_make(ctx, q, k, v, scale, causal, dropout, layout == MF_ATTN_TOKENS_MAJOR, 0);
}
MFDEF mf_tensor *mf_attention(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, float scale, int causal,
                              float dropout) {
    return mf_attention_layout(ctx, q, k, v, scale, causal, dropout, MF_ATTN_HEADS_MAJOR);
}

/* The input whose gradient can live in t's output gradient buffer, when it is an activation that
   nothing else on the tape reads: one of the op's first grad_passes inputs (a reshape's input,
   either operand of an add, the first of a sub) with t's size (the two gradients are equal element
   for element: no copy in the backward, and both tensors' gradients read right afterwards), or,
   with recycled activation gradients (mf_set_keep_activation_grads(ctx, 0): nobody reads them
   afterwards), the input of an is_unary op (its backward turns the buffer into dx = dy * f'(x)
   in place, each element read before it is written). One buffer less, and the backward writes
   into memory it has just used. The first such input, or -1. */
static int mf__grad_shared_src(const mf_ctx *ctx, const mf_tensor *t) {
    int unary = t->op->is_unary, k;
    int last = ctx->recycle_grads && unary ? 0 : t->op->grad_passes - 1;
    for (k = 0; k <= last; k++) {
        const mf_tensor *s = t->src[k];
        if (!s || !s->op || s->is_param || !s->requires_grad || s->ne != t->ne) continue;
        if (s->n_uses == 1) return k;
        /* recycled: a pass-through input read by other ops too (a residual stream) still takes
           the buffer when t is its latest reader (no gradient buffer yet, mf__backward_recycling):
           the buffer holds t's share, the earlier readers add theirs (not x + x: one buffer, two
           shares) */
        if (ctx->recycle_grads && !unary && !s->grad && t->src[0] != t->src[1]) return k;
    }
    return -1;
}

/* ==== [mf:layers] =========================================================================== */
MFDEF mf_linear_layer mf_linear_layer_new(mf_ctx *ctx, const char *name, int in, int out, int has_bias) {
    mf_linear_layer L;
    char nm[256];
    int shape[2];
    L.weight = L.bias = NULL;
    if (!mf_ok(ctx)) return L;
    if (!name || strlen(name) > 200) { mf__fail(ctx, "mf_linear_layer_new: name is NULL or longer than 200 chars"); return L; }
    shape[0] = out; shape[1] = in;
    snprintf(nm, sizeof nm, "%s.weight", name);
    L.weight = mf_param(ctx, nm, 2, shape);
    mf_init_kaiming_uniform(ctx, L.weight);
    if (has_bias) {
        snprintf(nm, sizeof nm, "%s.bias", name);
        L.bias = mf_param(ctx, nm, 1, &out);
        mf_init_bias(ctx, L.bias, in);
    }
    if (!mf_ok(ctx)) L.weight = L.bias = NULL;
    return L;
}

/* ==== [mf:model] ============================================================================ */
/* The generic model: embeddings, the blocks, the final LN and head, loss, generation, inspection.
   It knows no mixer: every token mixer belongs to a FAMILY (one descriptor, mf__family, with the
   same hooks for all), and the mixer table ([mf:mixers], after the family sections) gives each
   mixer its name, family, flags (MF__MIX_*: what the generic code asks of a mixer) and the config
   fields it reads. A family owns its section ([mf:attention], [mf:pool], [mf:xl], [mf:fastweights],
   [mf:feedback]); a mixer registered at run time (mf_mixer_register) gets a family of its own whose
   hooks call its definition's. tests/hygiene.sh fails when this section names a mixer or one of
   the mixers' config fields.
   Adding a mixer to a family: its code in the family's section, one row in mf__mixer_rows (and
   an enum value in [mf:api]). Adding a family: a section with an mf__family descriptor and its
   rows. */

/* per-mixer flags of a row */
enum {
    MF__MIX_LN1 = 1,         /* the block has ln1 ("layers.<l>.ln1.*", before the family's parameters) */
    MF__MIX_PRE_LN = 2,      /* the generic block applies ln1 before the mixer (else the mixer gets the layer input) */
    MF__MIX_HEADS = 4,       /* splits d_model into n_heads heads (n_heads must divide d_model) */
    MF__MIX_FIXED_STATE = 8, /* generation state of a fixed size: with pos = NONE it generates past max_seq */
    MF__MIX_SKIP = 16,       /* no mixer sub-block at all (identity) */
    MF__MIX_MAPS = 32,       /* softmax attention: mf_model_attention can inspect it */
    MF__MIX_NONCAUSAL = 64   /* has a non-causal form (causal = 0; docs/math.md §20): not a recurrence */
};

typedef struct mf__layer {
    int p0, np;               /* the layer's parameters: mf_param_at(ctx, p0 .. p0 + np - 1), creation order */
    mf_tensor *ln1_w, *ln1_b; /* ln1 (rows with MF__MIX_LN1; relative and feedback read it themselves) */
    mf_tensor *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b; /* the FFN sub-block */
    mf_tensor *lnm_w, *lnm_b; /* block stream_norm: ln_mid, on the stream between the sub-blocks */
    void *mix;                /* the family's per-layer struct (family->layer_size bytes, zeroed) */
} mf__layer;

/* Checkpoints of a model's state ([mf:io]): a family's state hook names each piece of its state once;
   mf_model_save collects them (MF__STATE_SAVE), mf_model_load checks every piece against the file
   before anything changes (MF__STATE_CHECK) and then copies them in (MF__STATE_APPLY). Saved as
   "__state__.<name>": int32 arrays from the host, float32 buffers on the model's device. */
typedef struct mf_state_io mf__state_io;
#define MF__STATE_SAVE MF_STATE_SAVE
#define MF__STATE_CHECK MF_STATE_CHECK
#define MF__STATE_APPLY MF_STATE_APPLY
#if defined(__GNUC__) || defined(__clang__)
#define MF__FOR_FAMILIES __attribute__((unused)) /* unused when every family with state is switched off */
#else
#define MF__FOR_FAMILIES
#endif
static MF__FOR_FAMILIES int mf__state_mode(const mf__state_io *io);
static void mf__state_layer(mf__state_io *io, int layer); /* a registered mixer's pieces: of that layer */
/* n ints: saved from v, or (check) found with n values, (check, apply) read into v; 0 or -1 */
static MF__FOR_FAMILIES int mf__state_ints(mf__state_io *io, const char *name, int32_t *v, int n);
/* floats of the given shape at data (the model's device): saved from, or (check) found with that
   shape, (apply) copied into data; 0 or -1 */
static MF__FOR_FAMILIES int mf__state_floats(mf__state_io *io, const char *name, float *data, int ndim, const int *shape);

/* A family of mixers: the same hooks for every family (NULL where the family has nothing to do).
   m->layers[l].mix is the family's per-layer struct, m->fam_state its model-level state. */
typedef struct mf__family {
    const char *name;
    size_t layer_size;   /* bytes of the per-layer struct */
    unsigned fields;     /* MF__F(...) bits: every optional config field a mixer of the family reads */
    int (*check)(mf_ctx *ctx, const mf_model_config *c);  /* 0, or -1 with a message naming the field */
    void (*make_layer)(mf_model *m, int l);  /* the mixer's parameters of layer l (between ln1 and ln2) */
    void (*init)(mf_model *m);   /* after every layer, before ln_f / head: model-level parameters, constants, state */
    void (*free)(mf_model *m);   /* state and per-layer buffers (not the per-layer structs: the model frees them) */
    /* per-layer families: the mixer of layer l on x [B, T, D] (ln1(x) with MF__MIX_PRE_LN); gen: generation
       (B = 1, positions from pos0, continuing the family's state) */
    mf_tensor *(*mixer)(mf_model *m, int l, mf_tensor *x, int pos0, int gen);
    /* whole-stack families (feedback): embeddings [B, T, D] -> the last layer's outputs; the blocks and
       mixer above are then not used */
    mf_tensor *(*run_stack)(mf_model *m, mf_tensor *x, int pos0, int gen);
    /* generation starts: prepare the state; 1 = continue one token per step from the state, 0 =
       rerun the whole window each step, -1 = error (in ctx) */
    int (*gen_begin)(mf_model *m);
    mf_tensor *(*aux_loss)(mf_model *m); /* a loss term of the last forward added by mf_model_loss, or NULL */
    /* the state that crosses calls of mf_model_forward / mf_model_loss (memories), for checkpoints
       (mf_model_save / mf_model_load): list every piece with mf__state_ints / mf__state_floats, in the
       same order whatever mf__state_mode is; 0, or -1 (error in ctx). NULL: no such state. Float
       pieces hold batch rows first, and an int piece named "*.lengths" the row count in element 0:
       [mf:dist] gathers and splits the rows over the ranks by that rule. */
    int (*state)(mf_model *m, mf__state_io *io);
    /* the keys in front of a query's own T positions (memories), for inspection; NULL: none */
    int (*held_keys)(const mf_model *m);
    /* memories (mf_model_memory_slot, mf_model_reset_memory): select slot 0 or 1, returning the
       previous one; empty the current slot. NULL: no memories */
    int (*memory_slot)(mf_model *m, int slot);
    void (*reset_memory)(mf_model *m);
    void (*memory_rows)(mf_model *m, int row0, int rows); /* mf_model_memory_rows, checked; NULL: rows in the model */
    /* the forward's matrix-product FLOPs per token of the mixers of all layers (a multiply-add is 2)
       in sequences of T tokens, keys the mean keys a query sees ((T + 1) / 2 causal, T full) */
    double (*flops)(const mf_model_config *c, int T, double keys);
} mf__family;

/* one row per mixer kind, in [mf:mixers] */
typedef struct mf__mixer_row {
    const char *name;
    mf_mixer_kind kind;
    const mf__family *family; /* NULL: left out by the compile switch `off` */
    const char *off;          /* the switch that leaves the family out (NULL: always compiled) */
    unsigned flags;           /* MF__MIX_* */
    unsigned fields;          /* MF__F(...): the optional config fields this mixer reads */
    const char *help;         /* one line: what it computes, and its seed (mf_mixer_help) */
    const mf_mixer_def *def;  /* a registered mixer's definition (NULL: built in) */
} mf__mixer_row;
static const mf__mixer_row *mf__mixer_row_of(int kind); /* [mf:mixers]; NULL for an unknown kind */
/* a mixer of mf_mixer_register (its checkpoints name it; the built-in rows, pool's too, do not) */
static int mf__registered(const mf__mixer_row *r) { return r && (int)r->kind >= MF_MIXER_COUNT; }

struct mf_model {
    mf_ctx *ctx;
    mf_model_config cfg;
    const mf__mixer_row *mixer; /* the config's row */
    const mf__family *fam;      /* its family */
    void *fam_state;            /* the family's model-level state, or NULL */
    mf_tensor *tok_emb, *pos_emb, *lnf_w, *lnf_b, *head_w, *head_b;
    mf_tensor *cls_w, *cls_b;   /* the classification head (n_classes > 0; then head_w, head_b are NULL) */
    float *sinusoid;    /* [max_seq][D] when pos == SINUSOIDAL */
    mf__layer *layers;
    char *fam_layers;   /* n_layers per-layer structs of the family */
    int cache_len;      /* tokens held by the generation cache */
    int on_device;      /* sinusoid, the family's constants and caches are device buffers (CUDA) */
    struct mf__probe *probe; /* set during mf_model_attention: the mixers attend through mf__probe_attend */
    int mem_slot;       /* a registered mixer's memory slot (0, 1): mf_model_memory_slot */
    int mem_row0, mem_rows; /* its micro-batch rows: mf_model_memory_rows */
    int generating;     /* 1 while mf_model_generate runs: the memories of slot 2 */
};

/* mixers whose generation state has a fixed size: with no position table they generate past max_seq */
static int mf__unbounded(const mf_model *m) {
    return (m->mixer->flags & MF__MIX_FIXED_STATE) && m->cfg.pos == MF_POS_NONE;
}
/* a buffer of the model's device (mf__dmalloc) */
static void mf__model_dfree(mf_model *m, void *p) {
    if (m->on_device) mf__dfree(m->ctx, p); else MF_FREE(p);
}

/* a constant table of the model built on the host (NULL: out of memory, already reported): kept as is
   on the CPU; on CUDA copied to a device buffer and the host copy freed. NULL when that fails. */
static float *mf__model_const(mf_model *m, float *host, size_t bytes) {
    float *d;
    if (!host || !m->on_device) return host;
    d = (float *)mf__dmalloc(m->ctx, bytes, "model constants");
    if (d && mf__dupload(m->ctx, d, host, bytes) < 0) { mf__dfree(m->ctx, d); d = NULL; }
    MF_FREE(host);
    return d;
}

/* "sdpa, metric or linear" into buf: the mixers whose row has one of the flags (compiled ones) or
   reads one of the fields (MF__F bits), registered ones too, the last two joined by last; the count */
static int mf__mixer_list(unsigned flags, unsigned fields, const char *last, char *buf, size_t size) {
    int k, n = 0, count = 0, seen = 0, pass;
    const mf__mixer_row *r;
    buf[0] = '\0';
    for (pass = 0; pass < 2; pass++) /* count, then write */
        for (k = 0; k < mf_mixer_count() && n < (int)size; k++) {
            r = mf__mixer_row_of(k);
            if (!((r->flags & flags) && r->family) && !(r->fields & fields)) continue;
            if (!pass) { count++; continue; }
            seen++;
            n += snprintf(buf + n, size - (size_t)n, "%s%s", seen == 1 ? "" : seen < count ? ", " : last, r->name);
        }
    return count;
}

/* a parameter of layer l named "layers.<l>.<name>" */
static mf_tensor *mf__layer_param(mf_model *m, int l, const char *name, int ndim, int d0, int d1) {
    char nm[96];
    int shape[2];
    shape[0] = d0; shape[1] = d1;
    snprintf(nm, sizeof nm, "layers.%d.%s", l, name);
    return mf_param(m->ctx, nm, ndim, shape);
}
/* a Linear(in, out): weight kaiming-uniform, bias U(+-1/sqrt(in)) */
static void mf__layer_linear(mf_model *m, int l, const char *name, int in, int out, int bias,
                             mf_tensor **w, mf_tensor **b) {
    char nm[64];
    snprintf(nm, sizeof nm, "%s.weight", name);
    *w = mf__layer_param(m, l, nm, 2, out, in);
    mf_init_kaiming_uniform(m->ctx, *w);
    if (bias) {
        snprintf(nm, sizeof nm, "%s.bias", name);
        *b = mf__layer_param(m, l, nm, 1, out, 0);
        mf_init_bias(m->ctx, *b, in);
    } else *b = NULL;
}
static void mf__layer_norm_params(mf_model *m, int l, const char *name, mf_tensor **w, mf_tensor **b) {
    char nm[64];
    snprintf(nm, sizeof nm, "%s.weight", name);
    *w = mf__layer_param(m, l, nm, 1, m->cfg.d_model, 0);
    mf_init_const(m->ctx, *w, 1.0f);
    snprintf(nm, sizeof nm, "%s.bias", name);
    *b = mf__layer_param(m, l, nm, 1, m->cfg.d_model, 0);
}

/* block l: [ln1], the family's parameters, ln2, the FFN (in this order: parameter order is the
   flat buffer's, the checkpoint's and the initialisation's) */
static void mf__make_layer(mf_model *m, int l) {
    const mf_model_config *c = &m->cfg;
    mf__layer *L = &m->layers[l];
    int D = c->d_model;
    L->p0 = mf_param_tensors(m->ctx);
    L->mix = m->fam_layers + (size_t)l * m->fam->layer_size;
    if (m->mixer->flags & MF__MIX_LN1) mf__layer_norm_params(m, l, "ln1", &L->ln1_w, &L->ln1_b);
    if (m->fam->make_layer) m->fam->make_layer(m, l);
    if (c->block == MF_BLOCK_STREAM_NORM) mf__layer_norm_params(m, l, "ln_mid", &L->lnm_w, &L->lnm_b);
    mf__layer_norm_params(m, l, "ln2", &L->ln2_w, &L->ln2_b);
    mf__layer_linear(m, l, "ffn.fc1", D, c->d_ff, c->ffn_bias, &L->fc1_w, &L->fc1_b);
    mf__layer_linear(m, l, "ffn.fc2", c->d_ff, D, c->ffn_bias, &L->fc2_w, &L->fc2_b);
    L->np = mf_param_tensors(m->ctx) - L->p0;
}

MFDEF mf_model *mf_model_new(mf_ctx *ctx, const mf_model_config *cfg) {
    mf_model *m;
    int l, D, shape[2];
    if (mf_model_check(ctx, cfg) < 0) return NULL;
    m = (mf_model *)mf__xmalloc(sizeof(mf_model));
    if (!m) return (mf_model *)mf__fail(ctx, "out of memory: model");
    memset(m, 0, sizeof *m);
    m->ctx = ctx; m->cfg = *cfg;
    m->mixer = mf__mixer_row_of((int)cfg->mixer);
    m->fam = m->mixer->family;
    m->on_device = ctx->be != NULL;
    D = cfg->d_model;
    m->layers = (mf__layer *)mf__xmalloc((size_t)cfg->n_layers * sizeof(mf__layer));
    m->fam_layers = (char *)mf__xmalloc((size_t)cfg->n_layers * m->fam->layer_size + 1);
    if (!m->layers || !m->fam_layers) { MF_FREE(m->layers); MF_FREE(m->fam_layers); MF_FREE(m); return (mf_model *)mf__fail(ctx, "out of memory: model layers"); }
    memset(m->layers, 0, (size_t)cfg->n_layers * sizeof(mf__layer));
    memset(m->fam_layers, 0, (size_t)cfg->n_layers * m->fam->layer_size + 1);
    shape[0] = cfg->vocab; shape[1] = D;
    m->tok_emb = mf_param(ctx, "tok_emb", 2, shape);
    mf_init_normal(ctx, m->tok_emb, 0.0f, 1.0f);
    if (cfg->pos == MF_POS_LEARNED) {
        shape[0] = cfg->max_seq;
        m->pos_emb = mf_param(ctx, "pos_emb", 2, shape);
        mf_init_normal(ctx, m->pos_emb, 0.0f, 1.0f);
    }
    for (l = 0; l < cfg->n_layers; l++) mf__make_layer(m, l);
    if (cfg->clone_layers && mf_ok(ctx)) /* labml: one prototype, deep-copied (every parameter of the layer) */
        for (l = 1; l < cfg->n_layers; l++) {
            int i;
            for (i = 0; i < m->layers[0].np; i++) {
                const mf_tensor *src = mf_param_at(ctx, m->layers[0].p0 + i);
                mf__dcopy(ctx, mf_param_at(ctx, m->layers[l].p0 + i)->data, src->data, (size_t)src->ne * sizeof(float));
            }
        }
    if (m->fam->init && mf_ok(ctx)) m->fam->init(m);
    m->lnf_w = mf_param(ctx, "ln_f.weight", 1, &D);
    mf_init_const(ctx, m->lnf_w, 1.0f);
    m->lnf_b = mf_param(ctx, "ln_f.bias", 1, &D);
    if (cfg->n_classes > 0) { /* a classifier: Linear(D, n_classes) on the mean over positions, no LM head */
        mf_linear_layer cls = mf_linear_layer_new(ctx, "cls", D, cfg->n_classes, 1);
        m->cls_w = cls.weight; m->cls_b = cls.bias;
    } else {
        shape[0] = cfg->vocab; shape[1] = D;
        m->head_w = mf_param(ctx, "head.weight", 2, shape);
        mf_init_kaiming_uniform(ctx, m->head_w);
        m->head_b = mf_param(ctx, "head.bias", 1, &cfg->vocab);
        mf_init_bias(ctx, m->head_b, D);
    }
    if (mf_ok(ctx) && cfg->pos == MF_POS_SINUSOIDAL) {
        int t, i;
        size_t bytes = (size_t)cfg->max_seq * D * sizeof(float);
        float *s = (float *)mf__xmalloc(bytes);
        if (!s) mf__fail(ctx, "out of memory");
        for (t = 0; s && t < cfg->max_seq; t++)
            for (i = 0; i < D; i++) { /* PE[t][2j] = sin(t / 10000^(2j/D)), PE[t][2j+1] = cos(...) */
                double f = pow(10000.0, -(double)(i - i % 2) / D);
                s[(int64_t)t * D + i] = (float)(i % 2 ? cos(t * f) : sin(t * f));
            }
        m->sinusoid = mf__model_const(m, s, bytes);
    }
    if (!mf_ok(ctx)) { mf_model_free(m); return NULL; }
    return m;
}

MFDEF void mf_model_free(mf_model *m) {
    if (!m) return;
    if (m->fam && m->fam->free) m->fam->free(m); /* device buffers: a CUDA model must be freed before its context */
    mf__model_dfree(m, m->sinusoid);
    MF_FREE(m->layers);
    MF_FREE(m->fam_layers);
    MF_FREE(m);
}
MFDEF const mf_model_config *mf_model_get_config(const mf_model *m) { return m ? &m->cfg : NULL; }

/* a leaf tensor over memory the arena does not own (constants, caches); no gradient */
static mf_tensor *mf__wrap(mf_ctx *ctx, int ndim, const int *shape, float *data) {
    mf_tensor *t = mf__header(ctx, ndim, shape);
    if (t) t->data = data;
    return t;
}
/* [B, T, P*H*dk] -> the pack [B, T, P H, dk] of P token-major projections: a view, no copy */
static mf_tensor *mf__token_pack(mf_ctx *ctx, mf_tensor *x, int P, int H) {
    int shape[4];
    if (!x) return NULL;
    shape[0] = x->shape[0]; shape[1] = x->shape[1]; shape[2] = P * H; shape[3] = x->shape[2] / (P * H);
    return mf_reshape(ctx, x, 4, shape);
}
/* the rows of a, b (and c) as one tensor (NULL when a is: no biases): the weights [n D, D] of n
   projections, one GEMM for all; their parameters stay apart (names and checkpoints unchanged) */
static mf_tensor *mf__stack_rows(mf_ctx *ctx, mf_tensor *a, mf_tensor *b, mf_tensor *c) {
    mf_tensor *ab;
    if (!a) return NULL;
    ab = mf_concat(ctx, a, b, 0);
    return c ? mf_concat(ctx, ab, c, 0) : ab;
}
/* [B, T, H, dk] -> [B, T, H*dk]: a view */
static mf_tensor *mf__token_merge(mf_ctx *ctx, mf_tensor *o) {
    int shape[3];
    if (!o) return NULL;
    shape[0] = o->shape[0]; shape[1] = o->shape[1]; shape[2] = o->shape[2] * o->shape[3];
    return mf_reshape(ctx, o, 3, shape);
}

static mf_tensor *mf__activation(mf_ctx *ctx, mf_act_kind a, mf_tensor *x) {
    switch (a) {
    case MF_ACT_RELU: return mf_relu(ctx, x);
    case MF_ACT_GELU: return mf_gelu(ctx, x, 0);
    case MF_ACT_GELU_TANH: return mf_gelu(ctx, x, 1);
    default: return mf_silu(ctx, x);
    }
}

/* the FFN sub-block of a layer: x + drop(FFN(LN2(x))) */
static mf_tensor *mf__block_ffn(mf_model *m, const mf__layer *L, mf_tensor *x) {
    mf_ctx *ctx = m->ctx;
    const mf_model_config *c = &m->cfg;
    mf_tensor *h = mf__activation(ctx, c->ffn_act, mf_linear(ctx, mf_layernorm(ctx, x, L->ln2_w, L->ln2_b, c->ln_eps), L->fc1_w, L->fc1_b));
    h = mf_linear(ctx, mf_dropout(ctx, h, c->dropout), L->fc2_w, L->fc2_b);
    return mf_add(ctx, x, mf_dropout(ctx, h, c->dropout));
}

/* the final LayerNorm's output [B, T, D] for ids at positions pos0 .. pos0 + T - 1 */
static mf_tensor *mf__model_hidden(mf_model *m, const int32_t *ids, int B, int T, int pos0, int cache) {
    mf_ctx *ctx = m->ctx;
    const mf_model_config *c = &m->cfg;
    const mf__family *fam = m->fam;
    int idshape[2], l, D = c->d_model;
    float p = c->dropout;
    mf_tensor *x;
    if (!mf_ok(ctx)) return NULL;
    if (!ids) return (mf_tensor *)mf__fail(ctx, "model: ids is NULL");
    if (B < 1 || T < 1 || (mf__unbounded(m) ? T : pos0 + T) > c->max_seq)
        return (mf_tensor *)mf__fail(ctx, "model: batch %d x length %d (from position %d) does not fit; need B >= 1 and "
                                     "1 <= T <= max_seq = %d (raise max_seq in the config)", B, T, pos0, c->max_seq);
    idshape[0] = B; idshape[1] = T;
    x = mf_embedding(ctx, m->tok_emb, ids, 2, idshape);                 /* [B, T, D] */
    if (c->pos != MF_POS_NONE && x) {
        int pshape[2];
        mf_tensor *pos;
        pshape[0] = T; pshape[1] = D;
        if (c->pos == MF_POS_LEARNED) {
            int32_t *pid = (int32_t *)mf__alloc(ctx, (size_t)T * sizeof(int32_t));
            int t;
            if (!pid) return NULL;
            for (t = 0; t < T; t++) pid[t] = pos0 + t;
            pos = mf_embedding(ctx, m->pos_emb, pid, 1, &T);            /* [T, D] */
        } else pos = mf__wrap(ctx, 2, pshape, m->sinusoid + (int64_t)pos0 * D);
        x = mf_add(ctx, x, pos);
    }
    if (fam->run_stack) x = fam->run_stack(m, x, pos0, cache); /* the whole stack (feedback) */
    for (l = 0; l < c->n_layers && !fam->run_stack; l++) {
        mf__layer *L = &m->layers[l];
        mf_tensor *h;
        if (c->block == MF_BLOCK_STREAM_NORM) { /* the stream itself normalised (check: a PRE_LN mixer) */
            x = mf_layernorm(ctx, x, L->ln1_w, L->ln1_b, c->ln_eps);
            h = x ? fam->mixer(m, l, x, pos0, cache) : NULL;
            x = mf_layernorm(ctx, mf_add(ctx, x, mf_dropout(ctx, h, p)), L->lnm_w, L->lnm_b, c->ln_eps);
        } else if (!(m->mixer->flags & MF__MIX_SKIP)) {
            h = m->mixer->flags & MF__MIX_PRE_LN ? mf_layernorm(ctx, x, L->ln1_w, L->ln1_b, c->ln_eps) : x;
            h = h ? fam->mixer(m, l, h, pos0, cache) : NULL;
            x = mf_add(ctx, x, mf_dropout(ctx, h, p));
        }
        x = mf__block_ffn(m, L, x);
    }
    return mf_layernorm(ctx, x, m->lnf_w, m->lnf_b, c->ln_eps);
}
static int mf__layer_arg(mf_model *m, int l, const mf_tensor *x, const char *fn) {
    if (!m || !mf_ok(m->ctx)) return -1;
    if (l < 0 || l >= m->cfg.n_layers || !x || x->ndim != 3 || x->shape[2] != m->cfg.d_model)
        return (mf__fail(m->ctx, "%s: layer %d (need 0 .. %d) and x [B, T, %d]", fn, l, m->cfg.n_layers - 1, m->cfg.d_model), -1);
    return 0;
}
MFDEF mf_tensor *mf_model_ln1(mf_model *m, int l, mf_tensor *x) {
    if (mf__layer_arg(m, l, x, "mf_model_ln1") < 0) return NULL;
    if (!m->layers[l].ln1_w) return (mf_tensor *)mf__fail(m->ctx, "mf_model_ln1: the %s mixer's blocks have no LN1", m->mixer->name);
    return mf_layernorm(m->ctx, x, m->layers[l].ln1_w, m->layers[l].ln1_b, m->cfg.ln_eps);
}
MFDEF void *mf_model_layer_state(mf_model *m, int l) {
    return m && m->mixer->def && m->mixer->def->layer_size && l >= 0 && l < m->cfg.n_layers ? m->layers[l].mix : NULL;
}
MFDEF mf_tensor *mf_model_ffn(mf_model *m, int l, mf_tensor *x) {
    return mf__layer_arg(m, l, x, "mf_model_ffn") < 0 ? NULL : mf__block_ffn(m, &m->layers[l], x);
}
/* logits [B, T, V] for ids at positions pos0 .. pos0 + T - 1 (a language model) */
static mf_tensor *mf__model_run(mf_model *m, const int32_t *ids, int B, int T, int pos0, int cache) {
    if (m->cfg.n_classes > 0 && mf_ok(m->ctx))
        return (mf_tensor *)mf__fail(m->ctx, "model: n_classes = %d: this model classifies sequences and has no "
                                     "language-model head; use mf_model_classify_logits / mf_model_classify_loss",
                                     m->cfg.n_classes);
    return mf_linear(m->ctx, mf__model_hidden(m, ids, B, T, pos0, cache), m->head_w, m->head_b);
}

MFDEF mf_tensor *mf_model_forward(mf_model *m, const int32_t *ids, int B, int T) {
    return m ? mf__model_run(m, ids, B, T, 0, 0) : NULL;
}

/* the cross-entropy of the next-token predictions times w_ce, plus the family's auxiliary loss times
   w_aux (a weight of exactly 1 adds no op) */
static mf_tensor *mf__lm_loss(mf_model *m, const int32_t *ids, const int32_t *targets, int B, int T, float w_ce,
                              float w_aux) {
    mf_tensor *loss = mf_cross_entropy(m->ctx, mf__model_run(m, ids, B, T, 0, 0), targets, -1), *aux;
    if (w_ce != 1.0f) loss = mf_scale(m->ctx, loss, w_ce);
    if (m->fam->aux_loss && (aux = m->fam->aux_loss(m)) != NULL)
        loss = mf_add(m->ctx, loss, w_aux != 1.0f ? mf_scale(m->ctx, aux, w_aux) : aux);
    return loss;
}

MFDEF mf_tensor *mf_model_loss(mf_model *m, const int32_t *ids, const int32_t *targets, int B, int T) {
    return m ? mf__lm_loss(m, ids, targets, B, T, 1.0f, 1.0f) : NULL;
}

MFDEF mf_tensor *mf_model_loss_part(mf_model *m, const int32_t *ids, const int32_t *targets, int B, int T,
                                    int64_t total_targets, int64_t total_rows) {
    int64_t counted = 0, i;
    if (!m || !mf_ok(m->ctx)) return NULL;
    if (targets && B > 0 && T > 0)
        for (i = 0; i < (int64_t)B * T; i++) counted += targets[i] != -1;
    if (total_targets < counted || total_rows < B)
        return (mf_tensor *)mf__fail(m->ctx, "mf_model_loss_part: total_targets %lld and total_rows %lld must be at least "
                                     "this micro-batch's %lld counted targets and %d rows (they count the whole batch)",
                                     (long long)total_targets, (long long)total_rows, (long long)counted, B);
    return mf__lm_loss(m, ids, targets, B, T, total_targets > 0 ? (float)((double)counted / (double)total_targets) : 0.0f,
                       (float)((double)B / (double)total_rows));
}

/* ---- sequence classification (docs/math.md §20.3) ---------------------------------------------
   Rows of different lengths never see padding: the rows of each distinct length run as one batch of
   that length (no mixer, no mask, no position is shared with padding), each row's final-LN output is
   averaged over its own positions, and the pooled rows are put back in the caller's order. */
static int mf__classify_args(mf_model *m, const int32_t *ids, const int32_t *lengths, int B, int T) {
    int b;
    if (!mf_ok(m->ctx)) return -1;
    if (m->cfg.n_classes < 1)
        return (mf__fail(m->ctx, "classify: the model is a language model (n_classes = 0); make it with n_classes > 0 "
                         "to classify sequences"), -1);
    if (!ids) return (mf__fail(m->ctx, "classify: ids is NULL; pass B * T token ids"), -1);
    if (B < 1 || T < 1 || T > m->cfg.max_seq)
        return (mf__fail(m->ctx, "classify: batch %d x length %d does not fit; need B >= 1 and 1 <= T <= max_seq = %d "
                         "(raise max_seq in the config)", B, T, m->cfg.max_seq), -1);
    for (b = 0; lengths && b < B; b++)
        if (lengths[b] < 1 || lengths[b] > T)
            return (mf__fail(m->ctx, "classify: lengths[%d] = %d is outside [1, T = %d]; a row holds 1 to T tokens, "
                             "the rest of the row is padding that is never read", b, (int)lengths[b], T), -1);
    return 0;
}
/* the mean over each row's positions of the final LN's output -> [B, D], rows in the caller's order */
static mf_tensor *mf__classify_pool(mf_model *m, const int32_t *ids, const int32_t *lengths, int B, int T) {
    mf_ctx *ctx = m->ctx;
    mf_tensor *pooled = NULL;
    int32_t *gids = (int32_t *)mf__alloc(ctx, (size_t)B * T * sizeof(int32_t));
    int32_t *where = (int32_t *)mf__alloc(ctx, (size_t)B * sizeof(int32_t)); /* row b's place in the pooled rows */
    int len, b, done = 0, groups = 0;
    if (!gids || !where) return NULL;
    for (len = 1; len <= T; len++) { /* ascending lengths: one forward per length present */
        mf_tensor *h;
        int nb = 0;
        for (b = 0; b < B; b++)
            if ((lengths ? lengths[b] : T) == len) {
                memcpy(gids + (int64_t)nb * len, ids + (int64_t)b * T, (size_t)len * sizeof(int32_t));
                where[b] = done + nb++;
            }
        if (!nb) continue;
        h = mf__model_hidden(m, gids, nb, len, 0, 0);                     /* [nb, len, D] */
        h = mf_scale(ctx, mf_sum_axis(ctx, h, 1), 1.0f / (float)len);     /* [nb, D] */
        pooled = pooled ? mf_concat(ctx, pooled, h, 0) : h;
        done += nb;
        groups++;
        if (!mf_ok(ctx)) return NULL;
    }
    return groups > 1 ? mf_embedding(ctx, pooled, where, 1, &B) : pooled; /* back in the caller's order */
}
MFDEF mf_tensor *mf_model_classify_logits(mf_model *m, const int32_t *ids, const int32_t *lengths, int B, int T) {
    if (!m || mf__classify_args(m, ids, lengths, B, T) < 0) return NULL;
    return mf_linear(m->ctx, mf__classify_pool(m, ids, lengths, B, T), m->cls_w, m->cls_b);
}
MFDEF mf_tensor *mf_model_classify_loss(mf_model *m, const int32_t *ids, const int32_t *lengths, const int32_t *labels,
                                        int B, int T) {
    int b;
    if (!m || mf__classify_args(m, ids, lengths, B, T) < 0) return NULL;
    if (!labels) return (mf_tensor *)mf__fail(m->ctx, "classify loss: labels is NULL; pass one class id per row");
    for (b = 0; b < B; b++)
        if (labels[b] < 0 || labels[b] >= m->cfg.n_classes)
            return (mf_tensor *)mf__fail(m->ctx, "classify loss: labels[%d] = %d is outside [0, n_classes = %d)", b,
                                         (int)labels[b], m->cfg.n_classes);
    return mf_cross_entropy(m->ctx, mf_model_classify_logits(m, ids, lengths, B, T), labels, -1);
}

/* index of the sampled token from logits[V] */
static int mf__sample(const float *logits, int V, const mf_sampler *s, uint64_t draw, float *scratch) {
    int i, best = 0;
    float mx, sum = 0, thresh = -INFINITY, u;
    for (i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
    if (!s || s->temperature <= 0) return best;
    if (s->top_k > 0 && s->top_k < V) { /* the k-th largest logit: partial selection on a copy */
        int k, j;
        memcpy(scratch, logits, (size_t)V * sizeof(float));
        for (k = 0; k < s->top_k; k++) {
            int arg = k;
            for (j = k + 1; j < V; j++) if (scratch[j] > scratch[arg]) arg = j;
            mx = scratch[k]; scratch[k] = scratch[arg]; scratch[arg] = mx;
        }
        thresh = scratch[s->top_k - 1];
    }
    mx = logits[best];
    for (i = 0; i < V; i++) sum += scratch[i] = logits[i] >= thresh ? expf((logits[i] - mx) / s->temperature) : 0.0f;
    u = mf__uniform(s->seed, 0x5a3b1eULL, draw) * sum;
    for (i = 0; i < V; i++) { u -= scratch[i]; if (u < 0 && scratch[i] > 0) return i; }
    return best;
}

/* the memories of the models that have some: the family's (0 and nothing to do for the others) */
MFDEF int mf_model_memory_slot(mf_model *m, int slot) {
    if (!m || slot < 0 || slot > 1) return -1;
    return m->fam->memory_slot ? m->fam->memory_slot(m, slot) : 0;
}
MFDEF void mf_model_reset_memory(mf_model *m) {
    if (m && m->fam->reset_memory) m->fam->reset_memory(m);
}
MFDEF int mf_model_memory_slot_now(const mf_model *m) { return !m ? -1 : m->generating ? 2 : m->mem_slot; }
MFDEF int mf_model_memory_rows(mf_model *m, int row0, int rows) {
    if (!m) return -1;
    if (rows < 0 || row0 < 0 || (rows == 0 && row0 != 0) || (rows > 0 && row0 >= rows))
        return (mf__fail(m->ctx, "mf_model_memory_rows: row0 %d, rows %d: need 0 <= row0 < rows (or 0, 0: the rows of "
                         "each call)", row0, rows), -1);
    if (m->fam->memory_rows) m->fam->memory_rows(m, row0, rows);
    else { m->mem_row0 = row0; m->mem_rows = rows; }
    return 0;
}
MFDEF int mf_model_memory_rows_now(const mf_model *m, int *row0) {
    if (row0) *row0 = m ? m->mem_row0 : 0;
    return m ? m->mem_rows : 0;
}

MFDEF int mf_model_generate(mf_model *m, const int32_t *prompt, int n_prompt, int n_new,
                            const mf_sampler *s, int32_t *out) {
    mf_ctx *ctx;
    const mf_model_config *c;
    int32_t *hist;
    float *scratch;
    int n_hist, i, grad, training, use_cache, V, ok = 0;
    if (!m || !mf_ok(m->ctx)) return -1;
    ctx = m->ctx; c = &m->cfg; V = c->vocab;
    if (!prompt || n_prompt < 1 || n_new < 0 || (n_new > 0 && !out))
        return (mf__fail(ctx, "generate: need a prompt of >= 1 tokens, n_new >= 0 and an output array"), -1);
    for (i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return (mf__fail(ctx, "generate: prompt token %d at position %d is outside [0, %d)", (int)prompt[i], i, V), -1);
    if (!c->causal || c->n_classes > 0)
        return (mf__fail(ctx, "generate: the model is %s; generation needs a causal language model (causal = 1, "
                         "n_classes = 0)", c->n_classes > 0 ? "a sequence classifier (n_classes > 0)"
                         : "non-causal (causal = 0: every position sees later ones, not generated yet)"), -1);
    use_cache = m->fam->gen_begin ? m->fam->gen_begin(m) : 1; /* the family's caches / state */
    if (use_cache < 0) return -1;
    hist = (int32_t *)mf__xmalloc((size_t)(n_prompt + n_new) * sizeof(int32_t));
    scratch = (float *)mf__xmalloc((size_t)V * 2 * sizeof(float)); /* + the last logits row (CUDA) */
    if (!hist || !scratch) { MF_FREE(hist); MF_FREE(scratch); return (mf__fail(ctx, "out of memory: generation"), -1); }
    memcpy(hist, prompt, (size_t)n_prompt * sizeof(int32_t));
    n_hist = n_prompt;
    grad = mf_set_grad(ctx, 0);
    training = mf_set_training(ctx, 0);
    m->cache_len = 0;
    m->generating = 1;
    for (i = 0; i < n_new; i++) {
        mf_tensor *logits;
        int start, len;
        mf_reset(ctx);
        if (!use_cache || m->cache_len == 0 || (m->cache_len + 1 > c->max_seq && !mf__unbounded(m))) {
            /* (re)prime: the whole window, or its last half when the window is full */
            len = n_hist <= c->max_seq ? n_hist : (use_cache ? c->max_seq / 2 : c->max_seq);
            if (len < 1) len = 1;
            start = n_hist - len;
            logits = mf__model_run(m, hist + start, 1, len, 0, use_cache);
            m->cache_len = len;
        } else {
            logits = mf__model_run(m, hist + n_hist - 1, 1, 1, m->cache_len, 1);
            m->cache_len++;
            len = 1;
        }
        if (!logits) goto done;
        {
            const float *row = logits->data + (int64_t)(len - 1) * V;
            if (ctx->be) { /* the row the sampler reads, copied to the host */
                if (mf__ddownload(ctx, scratch + V, row, (size_t)V * sizeof(float)) < 0) goto done;
                row = scratch + V;
            }
            out[i] = hist[n_hist++] = mf__sample(row, V, s, (uint64_t)i, scratch);
        }
    }
    ok = 1;
done:
    m->generating = 0;
    mf_reset(ctx);
    mf_set_grad(ctx, grad);
    mf_set_training(ctx, training);
    MF_FREE(hist); MF_FREE(scratch);
    return ok ? 0 : -1;
}


/* ---- attention inspection (mf_model_attention, docs/math.md §19) ---------------------------------
   While m->probe is set, the softmax mixers attend through mf__probe_attend (the feedback recurrence
   through mf__fb_probe): plain loops over host copies of q, k, v that write the scores and
   probabilities of layer l into the caller's buffers and make the attention output from those very
   probabilities, so the logits of the pass show that the maps are the ones the model uses. The fused
   kernels are not involved. */
typedef struct mf__probe {
    int B, T, Tk, H;
    float *scores, *probs; /* [n_layers][B][H][T][Tk] each (the caller's), or NULL */
    float *row, *sc;       /* [Tk] each: one query's probabilities when probs is NULL, its scores */
} mf__probe;

/* the row of query i of (layer l, batch b, head h) in a probe buffer, or NULL */
static float *mf__probe_row(const mf__probe *p, float *buf, int l, int b, int h, int i) {
    return buf ? buf + ((((int64_t)l * p->B + b) * p->H + h) * p->T + i) * p->Tk : NULL;
}

/* Query i of (l, b, h): sc[0 .. n) are the scores of the keys at columns off .. off + n - 1 (the other
   columns do not exist for this layer or step: score -inf, probability 0), of which the first vis
   are visible. Writes the row's scores and probabilities; returns the probabilities of the n keys. */
static const float *mf__probe_softmax(const mf__probe *p, int l, int b, int h, int i, int off, int n, int vis) {
    float *srow = mf__probe_row(p, p->scores, l, b, h, i), *prow = p->probs ? mf__probe_row(p, p->probs, l, b, h, i) : p->row;
    double mx = -INFINITY, sum = 0;
    int j;
    for (j = 0; j < p->Tk; j++) {
        prow[j] = 0.0f;
        if (srow) srow[j] = j >= off && j < off + n ? p->sc[j - off] : -INFINITY;
    }
    for (j = 0; j < vis; j++) if (p->sc[j] > mx) mx = p->sc[j];
    for (j = 0; j < vis; j++) sum += exp((double)p->sc[j] - mx);
    for (j = 0; j < vis; j++) prow[off + j] = (float)(exp((double)p->sc[j] - mx) / sum);
    return prow + off;
}

/* mf_attention (u == NULL) or mf_rel_attention (u, R, S: the relative tables) of layer l, unfused:
   q [B, H, T, dk], k [B, H, n, dk], v [B, H, n, dv], the first n - T keys memories -> [B, H, T, dv] */
static mf_tensor *mf__probe_attend(mf_model *m, int l, mf_tensor *q, mf_tensor *k, mf_tensor *v, float scale,
                                   mf_tensor *u, mf_tensor *R, mf_tensor *S) {
    mf_ctx *ctx = m->ctx;
    mf__probe *p = m->probe;
    int B, H, T, n, dk, dv, P = 0, b, h, i, j, c, shape[4];
    size_t nq, nk, nv, nt = 0;
    float *buf, *hq, *hk, *hv, *hu = NULL, *hR = NULL, *hS = NULL, *out;
    mf_tensor *o = NULL;
    if (!q || !k || !v || !mf_ok(ctx)) return NULL;
    B = q->shape[0]; H = q->shape[1]; T = q->shape[2]; dk = q->shape[3]; n = k->shape[2]; dv = v->shape[3];
    if (B != p->B || H != p->H || T != p->T || n > p->Tk || n < T)
        return (mf_tensor *)mf__fail(ctx, "attention inspection: layer %d attends %d x %d x %d queries to %d keys but the "
                                     "maps were sized for %d x %d x %d queries and %d keys (mf_model_attention_keys "
                                     "disagrees with the mixer: a bug)", l, B, H, T, n, p->B, p->H, p->T, p->Tk);
    nq = (size_t)B * H * T * dk; nk = (size_t)B * H * n * dk; nv = (size_t)B * H * n * dv;
    if (R) { P = R->shape[0] / 2; nt = (size_t)H * dk + (size_t)2 * P * H * dk + (size_t)2 * P * H; }
    if (!(buf = (float *)mf__xmalloc((nq + nk + nv + nt + (size_t)B * H * T * dv) * sizeof(float))))
        return (mf_tensor *)mf__fail(ctx, "out of memory: attention inspection of layer %d", l);
    hq = buf; hk = hq + nq; hv = hk + nk; out = hv + nv + nt;
    if (R) { hu = hv + nv; hR = hu + (size_t)H * dk; hS = hR + (size_t)2 * P * H * dk; }
    if (mf_to_host(ctx, q, hq) == 0 && mf_to_host(ctx, k, hk) == 0 && mf_to_host(ctx, v, hv) == 0 &&
        (!R || (mf_to_host(ctx, u, hu) == 0 && mf_to_host(ctx, R, hR) == 0 && mf_to_host(ctx, S, hS) == 0))) {
        for (b = 0; b < B; b++)
            for (h = 0; h < H; h++)
                for (i = 0; i < T; i++) {
                    const float *qi = hq + (((int64_t)b * H + h) * T + i) * dk, *pr;
                    float *oi = out + (((int64_t)b * H + h) * T + i) * dv;
                    for (j = 0; j < n; j++) {
                        const float *kj = hk + (((int64_t)b * H + h) * n + j) * dk;
                        double s = 0;
                        for (c = 0; c < dk; c++) s += ((double)qi[c] + (hu ? hu[h * dk + c] : 0.0f)) * kj[c];
                        if (hR) { /* rho = P + j - i - M: row P is distance 0 (docs/math.md §5.2) */
                            int64_t rho = (int64_t)P + j - i - (n - T);
                            for (c = 0; c < dk; c++) s += (double)qi[c] * hR[(rho * H + h) * dk + c];
                            s += hS[rho * H + h];
                        }
                        p->sc[j] = (float)(scale * s);
                    }
                    pr = mf__probe_softmax(p, l, b, h, i, p->Tk - n, n, m->cfg.causal ? i + n - T + 1 : n);
                    for (c = 0; c < dv; c++) oi[c] = 0.0f;
                    for (j = 0; j < n; j++)
                        for (c = 0; c < dv; c++) oi[c] += pr[j] * hv[(((int64_t)b * H + h) * n + j) * dv + c];
                }
        shape[0] = B; shape[1] = H; shape[2] = T; shape[3] = dv;
        o = mf_from(ctx, 4, shape, out);
    }
    MF_FREE(buf);
    return o;
}

/* operand x of mf__attention_of, heads-major [B, H, T, d] for the inspection: a copy */
static mf_tensor *mf__attn_heads_copy(mf_ctx *ctx, mf_tensor *t, int parts, int x, int H) {
    int perm[4] = {0, 2, 1, 3}, part = mf__attn_part(parts, x);
    if (t && t->shape[2] != H) t = mf_slice(ctx, t, 2, part * H, H); /* part p of a pack [B, T, P H, d] */
    return mf_permute(ctx, t, perm);
}

MFDEF int mf_model_attention_keys(mf_model *m, int T) {
    if (!m || !mf_ok(m->ctx)) return -1;
    if (!(m->mixer->flags & MF__MIX_MAPS))
    {
        char which[256];
        mf__mixer_list(MF__MIX_MAPS, 0, " or ", which, sizeof which);
        return (mf__fail(m->ctx, "attention inspection: the %s mixer has no attention probabilities to show (inspect "
                         "%s)", m->mixer->name, which), -1);
    }
    if (T < 1 || T > m->cfg.max_seq)
        return (mf__fail(m->ctx, "attention inspection: length %d must be in [1, max_seq = %d]", T, m->cfg.max_seq), -1);
    if (m->fam->run_stack && m->on_device)
        return (mf__fail(m->ctx, "attention inspection: the %s mixer is inspected on CPU contexts only (on the GPU its "
                         "recurrence is one kernel); load its weights into a CPU context (mf_save, mf_load)", m->mixer->name), -1);
    return T + (m->fam->held_keys ? m->fam->held_keys(m) : 0);
}

MFDEF mf_tensor *mf_model_attention(mf_model *m, const int32_t *ids, int B, int T, float *scores, float *probs) {
    mf_ctx *ctx;
    mf__probe p;
    mf_tensor *logits;
    int Tk, grad, training;
    int64_t e, n;
    if (!m || (Tk = mf_model_attention_keys(m, T)) < 0) return NULL;
    ctx = m->ctx;
    if (B < 1) return (mf_tensor *)mf__fail(ctx, "attention inspection: batch %d must be >= 1", B);
    memset(&p, 0, sizeof p);
    p.B = B; p.T = T; p.Tk = Tk; p.H = m->cfg.n_heads; p.scores = scores; p.probs = probs;
    if (!(p.row = (float *)mf__xmalloc(2 * (size_t)Tk * sizeof(float))))
        return (mf_tensor *)mf__fail(ctx, "out of memory: attention inspection");
    p.sc = p.row + Tk;
    n = (int64_t)m->cfg.n_layers * B * p.H * T * Tk; /* rows no query fills (feedback's first step) stay empty */
    for (e = 0; e < n; e++) {
        if (scores) scores[e] = -INFINITY;
        if (probs) probs[e] = 0.0f;
    }
    grad = mf_set_grad(ctx, 0);
    training = mf_set_training(ctx, 0);
    m->probe = &p;
    logits = mf__model_run(m, ids, B, T, 0, 0);
    m->probe = NULL;
    mf_set_grad(ctx, grad);
    mf_set_training(ctx, training);
    MF_FREE(p.row);
    return logits;
}

/* ==== [mf:config] =========================================================================== */
/* The model config: the one table of the optional fields (which mixer reads which: the rows of
   [mf:mixers]), the names of the config's enums, the defaults and mf_model_check. The generic
   checks are here; each family checks its own fields (its check hook). */
/* The table of the mixers' fields is MF_MODEL_FIELDS (the API); MF__F(ID) is a field's bit in a
   mixer row's list of the fields its mixer reads. */
#define MF__F(ID) (1u << MF_FIELD_##ID)

/* the names of the other enums of the config (the mixers' are in the table of [mf:mixers]) */
static const char *const mf__pos_names[] = {"none", "learned", "sinusoidal"};
static const char *const mf__act_names[] = {"relu", "gelu", "gelu_tanh", "silu"};
static const char *const mf__feature_names[] = {"dpfp", "elu1"};
static const char *const mf__metric_form_names[] = {"symmetric", "cholesky", "softmax_tril"};
static const char *const mf__block_names[] = {"pre_norm", "stream_norm"};
static int mf__name_index(const char *const *names, int n, const char *name) {
    int i;
    for (i = 0; name && i < n; i++) if (strcmp(name, names[i]) == 0) return i;
    return -1;
}
#define MF__NAMES(tab) tab, (int)(sizeof tab / sizeof tab[0])
static const char *mf__name_of(const char *const *names, int n, int k) { return k >= 0 && k < n ? names[k] : "unknown"; }
MFDEF const char *mf_pos_name(mf_pos_kind k) { return mf__name_of(MF__NAMES(mf__pos_names), (int)k); }
MFDEF int mf_pos_from_name(const char *name) { return mf__name_index(MF__NAMES(mf__pos_names), name); }
MFDEF const char *mf_act_name(mf_act_kind k) { return mf__name_of(MF__NAMES(mf__act_names), (int)k); }
MFDEF int mf_act_from_name(const char *name) { return mf__name_index(MF__NAMES(mf__act_names), name); }
MFDEF const char *mf_feature_name(mf_feature_kind k) { return mf__name_of(MF__NAMES(mf__feature_names), (int)k); }
MFDEF int mf_feature_from_name(const char *name) { return mf__name_index(MF__NAMES(mf__feature_names), name); }
MFDEF const char *mf_metric_form_name(mf_metric_form f) { return mf__name_of(MF__NAMES(mf__metric_form_names), (int)f); }
MFDEF int mf_metric_form_from_name(const char *name) { return mf__name_index(MF__NAMES(mf__metric_form_names), name); }
MFDEF const char *mf_block_name(mf_block_kind k) { return mf__name_of(MF__NAMES(mf__block_names), (int)k); }
MFDEF int mf_block_from_name(const char *name) { return mf__name_index(MF__NAMES(mf__block_names), name); }
static const char *const mf__bf16_kernel_names[] = {"none", "portable", "avx512-bf16", "amx", "amx-emulated", "fp32-fma"};
MFDEF const char *mf_bf16_kernel_name(mf_bf16_kernel k) { return mf__name_of(MF__NAMES(mf__bf16_kernel_names), (int)k); }
MFDEF int mf_bf16_kernel_from_name(const char *name) { return mf__name_index(MF__NAMES(mf__bf16_kernel_names), name); }
static const char *const mf__precision_names[] = {"fp32", "tf32", "bf16"};
MFDEF const char *mf_precision_name(mf_precision p) { return mf__name_of(MF__NAMES(mf__precision_names), (int)p); }
MFDEF int mf_precision_from_name(const char *name) { return mf__name_index(MF__NAMES(mf__precision_names), name); }
/* The CPU's precision: fp32, or bf16 products ([mf:bf16]) on the context's bf16 kernel */
static int mf__precision_on_cpu(mf_ctx *ctx, mf_precision p) {
    if (!mf_ok(ctx)) return -1;
    if (p == MF_PREC_FP32) { ctx->prec = p; return 0; }
    if (p == MF_PREC_BF16) {
        ctx->bf16_kernel = ctx->bf16_kernel ? ctx->bf16_kernel : mf_cpu_bf16_kernel();
        ctx->prec = p;
        return 0;
    }
    if (p == MF_PREC_TF32)
        return (mf__fail(ctx, "mf_ctx_set_precision: tf32 is a format of NVIDIA's tensor cores; a CPU context computes "
                         "in MF_PREC_FP32 or MF_PREC_BF16 (or call mf_ctx_set_device(ctx, MF_DEVICE_CUDA) first)"), -1);
    return (mf__fail(ctx, "mf_ctx_set_precision: unknown precision %d (MF_PREC_FP32, MF_PREC_TF32 or MF_PREC_BF16)",
                     (int)p), -1);
}
MFDEF int mf_ctx_set_bf16_kernel(mf_ctx *ctx, mf_bf16_kernel k) {
    if (!mf_ok(ctx)) return -1;
    if ((int)k < (int)MF_BF16_NONE || (int)k > (int)MF_BF16_FMA)
        return (mf__fail(ctx, "mf_ctx_set_bf16_kernel: unknown kernel %d (MF_BF16_NONE for the fastest, MF_BF16_AMX, "
                         "MF_BF16_FMA, MF_BF16_AVX512, MF_BF16_PORTABLE or MF_BF16_AMX_EMU)", (int)k), -1);
    if (k && !mf__bf16_kernel_usable(k))
        return (mf__fail(ctx, "mf_ctx_set_bf16_kernel: this CPU cannot run the %s kernel (%s); MF_BF16_FMA runs "
                         "anywhere", mf_bf16_kernel_name(k), mf_cpu_features()), -1);
    if (!k && ctx->prec == MF_PREC_BF16) k = mf_cpu_bf16_kernel();
    ctx->bf16_kernel = k;
    return 0;
}
MFDEF mf_bf16_kernel mf_ctx_bf16_kernel(const mf_ctx *ctx) { return ctx ? mf__ctx_bf16(ctx) : MF_BF16_NONE; }

/* the table at run time, and the names of its ENUM fields */
#define MF__FIELD_ROW(A, ID, member, ctype, KIND, def, lo, hi, option, STORE, ROLE, help) \
    {#member, option, help, MF_CFG_##KIND, MF_CFG_##STORE, MF_CFG_##ROLE, def, lo, hi, \
     offsetof(mf_model_config, member), sizeof(ctype)},
static const mf_config_field mf__config_fields[MF_FIELD_COUNT] = {MF_MODEL_FIELDS(MF__FIELD_ROW, ~)};
static const struct { int field; const char *const *names; int n; } mf__field_choices[] = {
    {MF_FIELD_LINEAR_FEATURE, MF__NAMES(mf__feature_names)}, {MF_FIELD_METRIC_FORM, MF__NAMES(mf__metric_form_names)}};
MFDEF const mf_config_field *mf_config_field_at(int i) { return i >= 0 && i < MF_FIELD_COUNT ? &mf__config_fields[i] : NULL; }
MFDEF const char *mf_config_field_choice(int i, int k) {
    size_t j;
    for (j = 0; j < sizeof mf__field_choices / sizeof mf__field_choices[0]; j++)
        if (mf__field_choices[j].field == i) return k >= 0 && k < mf__field_choices[j].n ? mf__field_choices[j].names[k] : NULL;
    return NULL;
}
/* the member's value as a double, and back (an ENUM through its integer) */
#define MF__SET_INT(lv, ctype, v) lv = (ctype)(int)(v)
#define MF__SET_FLAG MF__SET_INT
#define MF__SET_ENUM MF__SET_INT
#define MF__SET_FLOAT(lv, ctype, v) lv = (float)(v)
#define MF__FIELD_GET(c, ID, member, ...) case MF_FIELD_##ID: return (double)(c)->member;
#define MF__FIELD_SET(c, ID, member, ctype, KIND, ...) case MF_FIELD_##ID: MF__SET_##KIND((c)->member, ctype, v); return 0;
MFDEF double mf_config_field_get(const mf_model_config *c, int i) {
    if (c) switch (i) { MF_MODEL_FIELDS(MF__FIELD_GET, c) default: break; }
    return NAN;
}
MFDEF int mf_config_field_set(mf_model_config *c, int i, double v) {
    if (c) switch (i) { MF_MODEL_FIELDS(MF__FIELD_SET, c) default: break; }
    return -1;
}

MFDEF mf_model_config mf_model_config_default(void) {
    mf_model_config c;
    memset(&c, 0, sizeof c);
    c.d_model = 128; c.n_heads = 4; c.n_layers = 4; c.d_ff = 512; c.max_seq = 256;
    c.mixer = MF_MIXER_SDPA; c.pos = MF_POS_LEARNED; c.ffn_act = MF_ACT_GELU;
    c.ffn_bias = 1; c.ln_eps = 1e-5f; c.causal = 1;
#define MF__FIELD_DEFAULT(A, ID, member, ctype, KIND, def, ...) MF__SET_##KIND(c.member, ctype, def);
    MF_MODEL_FIELDS(MF__FIELD_DEFAULT, ~)
#undef MF__FIELD_DEFAULT
    return c;
}

MFDEF int mf_mixer_reads(mf_mixer_kind kind, int i) {
    const mf__mixer_row *row = mf__mixer_row_of((int)kind);
    return row && i >= 0 && i < MF_FIELD_COUNT && (row->fields >> i & 1u);
}

MFDEF void mf_model_config_reset_unread(mf_model_config *c) {
    mf_model_config d = mf_model_config_default();
    int i;
    if (!c || !mf__mixer_row_of((int)c->mixer)) return;
    for (i = 0; i < MF_FIELD_COUNT; i++)
        if (!mf_mixer_reads(c->mixer, i)) mf_config_field_set(c, i, mf_config_field_get(&d, i));
}

/* "the relative mixer" / "the fast_weights and linear mixers" (which), or "mixer relative" /
   "mixer fast_weights or linear" (choose): the mixers that read field f */
static void mf__readers(int f, int choose, char *buf, size_t size) {
    int n = snprintf(buf, size, "%s", choose ? "mixer " : "the "), count;
    count = mf__mixer_list(0, 1u << f, choose ? " or " : " and ", buf + n, size - (size_t)n);
    n += (int)strlen(buf + n);
    if (!choose && n < (int)size) snprintf(buf + n, size - (size_t)n, count > 1 ? " mixers" : " mixer");
}
MFDEF int mf_config_field_readers(int i, char *buf, size_t size) {
    if (!buf || !size) return 0;
    buf[0] = '\0';
    return i >= 0 && i < MF_FIELD_COUNT ? mf__mixer_list(0, 1u << i, ", ", buf, size) : 0;
}

/* causal and n_classes (docs/math.md §20): 0, or -1 with the reason in ctx */
static int mf__check_noncausal(mf_ctx *ctx, const mf_model_config *c, const mf__mixer_row *row) {
    if (c->causal != 0 && c->causal != 1)
        return (mf__fail(ctx, "model config: causal %d must be 1 (a language model: position t sees positions <= t) or 0 "
                         "(every position sees the whole sequence, e.g. for classification)", c->causal), -1);
    char which[256];
    if (!c->causal && !(row->flags & MF__MIX_NONCAUSAL)) {
        mf__mixer_list(MF__MIX_NONCAUSAL, 0, " or ", which, sizeof which);
        return (mf__fail(ctx, "model config: causal = 0: the %s mixer %s has no non-causal form; choose %s, or keep "
                         "causal = 1", row->name, mf__registered(row) ? "(registered without MF_MIXER_NONCAUSAL)"
                         : "is a recurrence over the positions (its state runs left to right) and", which), -1);
    }
    if (c->n_classes < 0)
        return (mf__fail(ctx, "model config: n_classes %d must be 0 (a language model) or the number of classes of a "
                         "sequence classifier", c->n_classes), -1);
    return 0;
}

MFDEF int mf_model_check(mf_ctx *ctx, const mf_model_config *c) {
    const mf__mixer_row *row;
    mf_model_config d = mf_model_config_default();
    int f;
    if (!mf_ok(ctx)) return -1;
#define MF__BAD(...) return (mf__fail(ctx, __VA_ARGS__), -1)
    if (!c) MF__BAD("model config is NULL (start from mf_model_config_default())");
    if (c->vocab < 1) MF__BAD("model config: vocab %d must be >= 1 (the number of distinct tokens)", c->vocab);
    if (c->d_model < 1 || c->n_layers < 1 || c->d_ff < 1 || c->max_seq < 1)
        MF__BAD("model config: d_model %d, n_layers %d, d_ff %d and max_seq %d must all be >= 1",
                c->d_model, c->n_layers, c->d_ff, c->max_seq);
    if (!(row = mf__mixer_row_of((int)c->mixer))) MF__BAD("model config: unknown mixer %d", (int)c->mixer);
    if (!row->family)
        MF__BAD("model config: mixer %s is not compiled in: the implementation was compiled with %s (compile it "
                "without that switch, or choose another mixer)", row->name, row->off);
    if ((int)c->pos < MF_POS_NONE || c->pos > MF_POS_SINUSOIDAL) MF__BAD("model config: unknown positional encoding %d", (int)c->pos);
    if ((int)c->ffn_act < MF_ACT_RELU || c->ffn_act > MF_ACT_SILU) MF__BAD("model config: unknown FFN activation %d", (int)c->ffn_act);
    if ((int)c->block < MF_BLOCK_PRE_NORM || c->block > MF_BLOCK_STREAM_NORM)
        MF__BAD("model config: unknown block layout %d (pre_norm or stream_norm)", (int)c->block);
    if (c->block == MF_BLOCK_STREAM_NORM && !(row->flags & MF__MIX_PRE_LN)) {
        char which[256];
        mf__mixer_list(MF__MIX_PRE_LN, 0, " or ", which, sizeof which);
        MF__BAD("model config: block layout stream_norm needs a mixer whose block applies ln1 before it (%s); the %s "
                "mixer %s (use block pre_norm)", which, row->name,
                row->flags & MF__MIX_SKIP ? "has no mixer sub-block" : "normalises its own input");
    }
    if ((row->flags & MF__MIX_HEADS) && (c->n_heads < 1 || c->d_model % c->n_heads != 0))
        MF__BAD("model config: d_model %d is not divisible by n_heads %d; pick a head count that divides "
                "d_model (the %s mixer splits d_model into heads)", c->d_model, c->n_heads, row->name);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f)) MF__BAD("model config: dropout %g must be in [0, 1)", (double)c->dropout);
    if (!(c->ln_eps > 0.0f)) MF__BAD("model config: ln_eps %g must be > 0 (1e-5 is PyTorch's)", (double)c->ln_eps);
    if (!(c->attn_dropout >= 0.0f && c->attn_dropout < 1.0f))
        MF__BAD("model config: attn_dropout %g must be in [0, 1) (0: none)", (double)c->attn_dropout);
    if (c->attn_dropout != 0.0f && !(row->fields & MF__F(ATTN_DROPOUT))) {
        char which[160];
        mf__readers(MF_FIELD_ATTN_DROPOUT, 0, which, sizeof which);
        MF__BAD("model config: attn_dropout = %g applies only to %s (the softmax attention: set it to 0, or use "
                "dropout); the %s mixer has no attention probabilities", (double)c->attn_dropout, which, row->name);
    }
    if (mf__check_noncausal(ctx, c, row) < 0) return -1;
    if (!row->def && c->mixer_field_set)
        MF__BAD("model config: mixer_field_set is 0x%x, but the %s mixer is built in and has no registered fields "
                "(mf_model_config_set names the fields of registered mixers only)", c->mixer_field_set, row->name);
    for (f = 0; f < MF_FIELD_COUNT; f++) {
        const mf_config_field *fd = &mf__config_fields[f];
        double v = mf_config_field_get(c, f), dv = mf_config_field_get(&d, f);
        if (!(row->fields >> f & 1u) && v != dv) {
            char which[160], choose[160];
            mf__readers(f, 0, which, sizeof which);
            mf__readers(f, 1, choose, sizeof choose);
            MF__BAD("model config: %s = %g applies only to %s (set it to %g, or choose %s); the %s mixer does not read it",
                    fd->name, v, which, dv, choose, row->name);
        }
    }
    if (row->family->check && row->family->check(ctx, c) < 0) return -1;
    for (f = 0; f < MF_FIELD_COUNT; f++) { /* what the family's check left: the table's range */
        const mf_config_field *fd = &mf__config_fields[f];
        double v = mf_config_field_get(c, f);
        if (!(v >= fd->lo && v <= fd->hi)) MF__BAD("model config: %s %g must be in [%g, %g] (%s)", fd->name, v, fd->lo, fd->hi, fd->help);
    }
#undef MF__BAD
    return 0;
}

MFDEF double mf_model_flops(const mf_model_config *c, int T, int full_attention) {
    const mf__mixer_row *row = c ? mf__mixer_row_of((int)c->mixer) : NULL;
    double D, out;
    if (!row || !row->family || T < 1 || c->d_model < 1 || c->n_heads < 1 || c->n_layers < 1) return -1;
    D = c->d_model;
    out = c->n_classes > 0 ? c->n_classes : c->vocab;
    return row->family->flops(c, T, full_attention ? T : (T + 1) / 2.0) + c->n_layers * 2.0 * 2.0 * D * c->d_ff + 2.0 * D * out;
}

/* ==== [mf:attention] ======================================================================== */
/* The softmax attention family: sdpa (causal multi-head attention, labml MHA), metric (per head
   p = x Wp, a symmetric M from its upper triangle Mbar, softmax(p M p^T / sqrt(dk)) p, E) and
   quadratic (the same with an unconstrained M). Generation: a KV cache per layer (metric and
   quadratic cache p, which is both their key and value). */
typedef struct mf__attn_layer {
    mf_tensor *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo; /* sdpa */
    mf_tensor *wp, *mform, *we;                       /* metric (mform = Mbar) / quadratic (M) */
    float *cache_k, *cache_v; /* generation: [max_seq][H][dk] keys / values (metric, quadratic: p in cache_k) */
} mf__attn_layer;
typedef struct mf__attn_state {
    int32_t *m_ids; /* metric: [H][dk][dk], the entry h L + l of Mbar [H L] that M_h[k][k'] reads (L = dk (dk + 1) / 2) */
    float *tril;    /* metric, cholesky: [dk][dk], 1 on and below the diagonal (the model's device) */
} mf__attn_state;
#define MF__ATTN_L(m, l) ((mf__attn_layer *)(m)->layers[l].mix)

/* the fused attention of a softmax mixer's layer l on token-major q, k, v [B, T, H, d] or parts of
   packs [B, T, P H, d] (the linear layers' outputs, reshaped: no head copies; parts as
   MF__ARG_ATTN_PARTS) -> [B, T, H, dv], or its inspection (which reads heads-major operands:
   copies, only while inspecting) */
static mf_tensor *mf__attention_of(mf_model *m, int l, mf_tensor *q, mf_tensor *k, mf_tensor *v, int parts,
                                   float scale) {
    mf_ctx *ctx = m->ctx;
    int perm[4] = {0, 2, 1, 3}, H = m->cfg.n_heads;
    if (m->probe)
        return mf_permute(ctx, mf__probe_attend(m, l, mf__attn_heads_copy(ctx, q, parts, 0, H),
                                                mf__attn_heads_copy(ctx, k, parts, 1, H),
                                                mf__attn_heads_copy(ctx, v, parts, 2, H), scale, NULL, NULL, NULL), perm);
    return mf__attention_make(ctx, q, k, v, scale, m->cfg.causal, m->cfg.attn_dropout, 1, parts);
}

static int mf__attn_check(mf_ctx *ctx, const mf_model_config *c) {
    if ((int)c->metric_form < MF_METRIC_SYMMETRIC || c->metric_form > MF_METRIC_SOFTMAX_TRIL)
        return (mf__fail(ctx, "model config: unknown metric_form %d; use MF_METRIC_SYMMETRIC (%d), MF_METRIC_CHOLESKY (%d) "
                         "or MF_METRIC_SOFTMAX_TRIL (%d)", (int)c->metric_form, (int)MF_METRIC_SYMMETRIC,
                         (int)MF_METRIC_CHOLESKY, (int)MF_METRIC_SOFTMAX_TRIL), -1);
    return 0;
}

static void mf__attn_make_layer(mf_model *m, int l) {
    const mf_model_config *c = &m->cfg;
    mf__attn_layer *A = MF__ATTN_L(m, l);
    int D = c->d_model, H = c->n_heads, dk = D / H;
    mf_tensor *unused;
    if (c->mixer == MF_MIXER_SDPA) {
        mf__layer_linear(m, l, "attn.q", D, D, c->attn_bias, &A->wq, &A->bq);
        mf__layer_linear(m, l, "attn.k", D, D, c->attn_bias, &A->wk, &A->bk);
        mf__layer_linear(m, l, "attn.v", D, D, c->attn_bias, &A->wv, &A->bv);
        mf__layer_linear(m, l, "attn.out", D, D, c->attn_bias, &A->wo, &A->bo);
    } else {
        float b = 1.0f / sqrtf((float)dk);
        mf__layer_linear(m, l, "attn.p", D, D, 0, &A->wp, &unused);
        if (c->mixer == MF_MIXER_METRIC && c->metric_form != MF_METRIC_SYMMETRIC) { /* the seed's: N(0, 1) + 0.01 I */
            float *host = (float *)mf__xmalloc((size_t)H * dk * dk * sizeof(float));
            int h, k;
            A->mform = mf__layer_param(m, l, c->metric_form == MF_METRIC_CHOLESKY ? "attn.metric_l" : "attn.metric_p", 2, H, dk * dk);
            mf_init_normal(m->ctx, A->mform, 0.0f, 1.0f);
            if (!host) { mf__fail(m->ctx, "out of memory: metric form"); return; }
            if (mf_to_host(m->ctx, A->mform, host) == 0) {
                for (h = 0; h < H; h++) for (k = 0; k < dk; k++) host[((int64_t)h * dk + k) * dk + k] += 0.01f;
                mf_set_data(m->ctx, A->mform, host);
            }
            MF_FREE(host);
        } else {
            if (c->mixer == MF_MIXER_METRIC) A->mform = mf__layer_param(m, l, "attn.metric", 2, H, dk * (dk + 1) / 2);
            else A->mform = mf__layer_param(m, l, "attn.quad", 2, H, dk * dk);
            mf_init_uniform(m->ctx, A->mform, -b, b);
        }
        mf__layer_linear(m, l, "attn.e", D, D, 0, &A->we, &unused);
    }
}

/* metric: the Mbar entry of each M entry (both (k, k') and (k', k) read entry l(min, max)) */
static void mf__attn_init(mf_model *m) {
    mf__attn_state *s;
    int H = m->cfg.n_heads, dk = m->cfg.d_model / H, L = dk * (dk + 1) / 2, h, k, k2;
    if (m->cfg.mixer != MF_MIXER_METRIC) return;
    if (!(s = (mf__attn_state *)mf__xmalloc(sizeof *s))) { mf__fail(m->ctx, "out of memory"); return; }
    memset(s, 0, sizeof *s);
    m->fam_state = s;
    if (m->cfg.metric_form == MF_METRIC_CHOLESKY) {
        float *t = (float *)mf__xmalloc((size_t)dk * dk * sizeof(float));
        for (k = 0; t && k < dk; k++) for (k2 = 0; k2 < dk; k2++) t[k * dk + k2] = k2 <= k ? 1.0f : 0.0f;
        if (!(s->tril = mf__model_const(m, t, (size_t)dk * dk * sizeof(float)))) mf__fail(m->ctx, "out of memory: metric form");
        return;
    }
    if (m->cfg.metric_form != MF_METRIC_SYMMETRIC) return;
    if (!(s->m_ids = (int32_t *)mf__xmalloc((size_t)H * dk * dk * sizeof(int32_t)))) { mf__fail(m->ctx, "out of memory"); return; }
    for (h = 0; h < H; h++)
        for (k = 0; k < dk; k++) /* row-major upper triangle: l(k, k') = k dk - k (k - 1) / 2 + k' - k */
            for (k2 = k; k2 < dk; k2++) {
                int32_t id = h * L + k * dk - k * (k - 1) / 2 + k2 - k;
                s->m_ids[((int64_t)h * dk + k) * dk + k2] = s->m_ids[((int64_t)h * dk + k2) * dk + k] = id;
            }
}

static void mf__attn_free(mf_model *m) {
    int l;
    mf__attn_state *s = (mf__attn_state *)m->fam_state;
    for (l = 0; l < m->cfg.n_layers; l++) {
        mf__attn_layer *A = MF__ATTN_L(m, l);
        if (!A) continue;
        mf__model_dfree(m, A->cache_k); mf__model_dfree(m, A->cache_v);
    }
    if (s) { MF_FREE(s->m_ids); mf__model_dfree(m, s->tril); }
    MF_FREE(s);
    m->fam_state = NULL;
}

/* the KV caches of every layer: [max_seq][H][dk] each (token-major, as the attention reads them) */
static int mf__attn_gen_begin(mf_model *m) {
    size_t per_layer = (size_t)m->cfg.max_seq * m->cfg.d_model * sizeof(float);
    int l;
    for (l = 0; l < m->cfg.n_layers; l++) {
        mf__attn_layer *A = MF__ATTN_L(m, l);
        if (!A->cache_k) A->cache_k = (float *)mf__dmalloc(m->ctx, per_layer, "generation cache");
        if (!A->cache_v) A->cache_v = (float *)mf__dmalloc(m->ctx, per_layer, "generation cache");
        if (!A->cache_k || !A->cache_v) return (mf__fail(m->ctx, "out of memory: generation cache"), -1);
    }
    return 1;
}

/* Append the new tokens x [1, Tn, H, dk] to a cache [max_seq][H][dk] at position pos0
   and return all cached tokens [1, pos0 + Tn, H, dk] as an arena tensor. */
static mf_tensor *mf__cache_heads(mf_model *m, float *cache, mf_tensor *x, int pos0) {
    int Tn, H = m->cfg.n_heads, dk = m->cfg.d_model / H, shape[4];
    int64_t row = (int64_t)H * dk;
    mf_tensor *all;
    if (!x) return NULL;
    Tn = x->shape[1];
    mf__dcopy(m->ctx, cache + pos0 * row, x->data, (size_t)(Tn * row) * sizeof(float));
    shape[0] = 1; shape[1] = pos0 + Tn; shape[2] = H; shape[3] = dk;
    if (!(all = mf_new(m->ctx, 4, shape))) return NULL;
    mf__dcopy(m->ctx, all->data, cache, (size_t)((pos0 + Tn) * row) * sizeof(float));
    return all;
}

/* the mixer of layer l on xn = ln1(x) [B, T, D]; cache: generation mode (B = 1, positions from pos0) */
static mf_tensor *mf__attn_mixer(mf_model *m, int l, mf_tensor *xn, int pos0, int cache) {
    mf_ctx *ctx = m->ctx;
    const mf_model_config *c = &m->cfg;
    mf__attn_layer *A = MF__ATTN_L(m, l);
    int H = c->n_heads, D = c->d_model, dk = D / H;
    float scale = 1.0f / sqrtf((float)dk);
    if (c->mixer == MF_MIXER_SDPA) { /* q, k, v: one GEMM into the pack [B, T, 3 H, dk] */
        mf_tensor *qkv = mf__token_pack(ctx, mf_linear(ctx, xn, mf__stack_rows(ctx, A->wq, A->wk, A->wv),
                                                       mf__stack_rows(ctx, A->bq, A->bk, A->bv)), 3, H);
        mf_tensor *k = qkv, *v = qkv;
        int parts = MF__ATTN_PACKS(0, 3, 1, 3, 2, 3);
        if (cache && qkv) { /* k, v: the caches [1, pos0 + Tn, H, dk] */
            k = mf__cache_heads(m, A->cache_k, mf_slice(ctx, qkv, 2, H, H), pos0);
            v = mf__cache_heads(m, A->cache_v, mf_slice(ctx, qkv, 2, 2 * H, H), pos0);
            parts = MF__ATTN_PACKS(0, 3, 0, 1, 0, 1);
        }
        return mf_linear(ctx, mf__token_merge(ctx, mf__attention_of(m, l, qkv, k, v, parts, scale)), A->wo, A->bo);
    } else {
        /* p = xn Wp^T [B, T, H, dk], q = p M_h per head; k = v = p (generation: the cache of p) */
        int mshape[3], tshape[2];
        mf_tensor *M, *p, *q, *kv;
        mshape[0] = H; mshape[1] = dk; mshape[2] = dk;
        if (c->mixer == MF_MIXER_METRIC && c->metric_form == MF_METRIC_SYMMETRIC) {
            /* M gathers its entries from Mbar [H L] viewed as a table of 1-float rows: symmetric, and the
               gradient folds by itself */
            tshape[0] = H * (dk * (dk + 1) / 2); tshape[1] = 1;
            M = mf_reshape(ctx, mf_embedding(ctx, mf_reshape(ctx, A->mform, 2, tshape),
                                             ((mf__attn_state *)m->fam_state)->m_ids, 3, mshape), 3, mshape);
        } else if (c->mixer == MF_MIXER_METRIC) { /* M = X X^T, X = L (cholesky) or S (softmax_tril) [H, dk, dk] */
            mf_tensor *X = mf_reshape(ctx, A->mform, 3, mshape);
            tshape[0] = dk; tshape[1] = dk;
            if (c->metric_form == MF_METRIC_CHOLESKY) X = mf_mul(ctx, X, mf__wrap(ctx, 2, tshape, ((mf__attn_state *)m->fam_state)->tril));
            else X = mf_softmax(ctx, mf_scale(ctx, X, scale), 1); /* the causal mask of a [dk, dk] table: the lower triangle */
            M = mf_matmul(ctx, X, X, 0, 1);
        } else M = mf_reshape(ctx, A->mform, 3, mshape);
        p = mf__token_pack(ctx, mf_linear(ctx, xn, A->wp, NULL), 1, H);
        q = mf_head_matmul(ctx, p, M);
        kv = cache ? mf__cache_heads(m, A->cache_k, p, pos0) : p;
        return mf_linear(ctx, mf__token_merge(ctx, mf__attention_of(m, l, q, kv, kv, 0, scale)), A->we, NULL);
    }
}

/* sdpa: four D x D projections; metric, quadratic: two, and q = p M per head; QK^T and PV */
static double mf__attn_flops(const mf_model_config *c, int T, double keys) {
    double D = c->d_model, H = c->n_heads, dk = D / H;
    double proj;
    (void)T;
    proj = c->mixer == MF_MIXER_SDPA ? 4 * 2.0 * D * D : 2 * 2.0 * D * D + H * 2.0 * dk * dk;
    return c->n_layers * (proj + 2.0 * 2.0 * D * keys);
}
static const mf__family mf__fam_attention = {
    "attention", sizeof(mf__attn_layer), MF__F(ATTN_BIAS) | MF__F(ATTN_DROPOUT) | MF__F(METRIC_FORM),
    mf__attn_check, mf__attn_make_layer, mf__attn_init, mf__attn_free, mf__attn_mixer, NULL, mf__attn_gen_begin, NULL, NULL, NULL,
    NULL, NULL, NULL, mf__attn_flops
};

MFDEF int mf_model_attention_form(mf_model *m, int layer, int form, float *out) {
    mf_ctx *ctx;
    const mf_model_config *c;
    const mf__attn_layer *A;
    int D, H, dk, h, a, b, d, e, ok;
    float *w1, *w2, *M, *tri;
    if (!m || !mf_ok(m->ctx)) return -1;
    ctx = m->ctx; c = &m->cfg;
    if (m->fam != &mf__fam_attention)
        return (mf__fail(ctx, "attention form: the %s mixer has no per-head bilinear form (sdpa, metric and quadratic "
                         "have one)", m->mixer->name), -1);
    if (layer < 0 || layer >= c->n_layers || (form != MF_ATTN_FORM_HEAD && form != MF_ATTN_FORM_MODEL) || !out)
        return (mf__fail(ctx, "attention form: layer %d (need 0 .. %d), form %d (MF_ATTN_FORM_HEAD or _MODEL) and out "
                         "%s (need a buffer)", layer, c->n_layers - 1, form, out ? "given" : "NULL"), -1);
    A = MF__ATTN_L(m, layer);
    D = c->d_model; H = c->n_heads; dk = D / H;
    if (!(w1 = (float *)mf__xmalloc((2 * (size_t)D * D + 2 * (size_t)H * dk * dk) * sizeof(float))))
        return (mf__fail(ctx, "out of memory: attention form"), -1);
    w2 = w1 + (size_t)D * D; M = w2 + (size_t)D * D; tri = M + (size_t)H * dk * dk;
    if (c->mixer == MF_MIXER_SDPA) ok = mf_to_host(ctx, A->wq, w1) == 0 && mf_to_host(ctx, A->wk, w2) == 0;
    else ok = mf_to_host(ctx, A->wp, w1) == 0 && mf_to_host(ctx, A->mform, c->mixer == MF_MIXER_METRIC ? tri : M) == 0;
    if (ok && c->mixer == MF_MIXER_METRIC && c->metric_form != MF_METRIC_SYMMETRIC) { /* M = X X^T (docs/math.md §9.10) */
        for (h = 0; h < H; h++) {
            float *X = tri + (int64_t)h * dk * dk;
            for (a = 0; a < dk; a++) {
                double mx = -INFINITY, z = 0;
                for (b = 0; b < dk; b++) if (b > a) X[a * dk + b] = 0.0f; /* the lower triangle (L, or S's support) */
                if (c->metric_form == MF_METRIC_CHOLESKY) continue;
                for (b = 0; b <= a; b++) if (X[a * dk + b] > mx) mx = X[a * dk + b];
                for (b = 0; b <= a; b++) z += exp(((double)X[a * dk + b] - mx) / sqrt((double)dk));
                for (b = 0; b <= a; b++) X[a * dk + b] = (float)(exp(((double)X[a * dk + b] - mx) / sqrt((double)dk)) / z);
            }
            for (a = 0; a < dk; a++)
                for (b = 0; b < dk; b++) {
                    double sum = 0;
                    for (d = 0; d < dk; d++) sum += (double)X[a * dk + d] * X[b * dk + d];
                    M[((int64_t)h * dk + a) * dk + b] = (float)sum;
                }
        }
    } else if (ok && c->mixer == MF_MIXER_METRIC) /* the row-major upper triangle, mirrored (docs/math.md §9.1) */
        for (h = 0; h < H; h++) {
            const float *t = tri + (int64_t)h * dk * (dk + 1) / 2;
            for (a = 0; a < dk; a++)
                for (b = a; b < dk; b++, t++) M[((int64_t)h * dk + a) * dk + b] = M[((int64_t)h * dk + b) * dk + a] = *t;
        }
    for (h = 0; ok && h < H; h++) {
        const float *q = w1 + (int64_t)h * dk * D, *k = (c->mixer == MF_MIXER_SDPA ? w2 : w1) + (int64_t)h * dk * D;
        const float *Mh = M + (int64_t)h * dk * dk;
        if (form == MF_ATTN_FORM_HEAD) {
            for (a = 0; a < dk; a++)
                for (b = 0; b < dk; b++) {
                    double s = 0;
                    if (c->mixer == MF_MIXER_SDPA) for (d = 0; d < D; d++) s += (double)q[a * D + d] * k[b * D + d];
                    else s = Mh[a * dk + b];
                    out[((int64_t)h * dk + a) * dk + b] = (float)s;
                }
        } else
            for (d = 0; d < D; d++)
                for (e = 0; e < D; e++) { /* sum_ab Wq[a][d] A[a][b] Wk[b][e], A = I (sdpa) or M_h */
                    double s = 0;
                    for (a = 0; a < dk; a++)
                        if (c->mixer == MF_MIXER_SDPA) s += (double)q[a * D + d] * k[a * D + e];
                        else for (b = 0; b < dk; b++) s += (double)q[a * D + d] * Mh[a * dk + b] * k[b * D + e];
                    out[((int64_t)h * D + d) * D + e] = (float)s;
                }
    }
    MF_FREE(w1);
    return ok ? 0 : -1;
}

/* ==== [mf:pool] ============================================================================= */
/* The token-mixing-free family: pool (the mean over a window of pool_size tokens minus x,
   count_include_pad = false; PoolFormer), written as a mixer definition (mf_mixer_def, the public
   interface of docs/math.md §23) and built into its descriptor as a registered mixer's is, and
   identity (no mixer sub-block: its row has MF__MIX_SKIP). Generation: pool keeps the normalised rows
   of the window (a centred window sees the future: every step reruns the window). */
typedef struct mf__pool_layer {
    float *cache; /* generation: xn rows [max_seq][D] */
} mf__pool_layer;

/* the window: [t - k + 1, t] only in a causal model with pool_causal = 1, else centred */
static int mf__pool_is_causal(const mf_model_config *c) { return c->causal && c->pool_causal; }
static int mf__pool_check(mf_ctx *ctx, const mf_model_config *c) {
    if (!c->causal && c->pool_causal != 1)
        return (mf__fail(ctx, "model config: pool_causal = 0 with causal = 0: a non-causal model always pools the centred "
                         "window and does not read pool_causal; leave it at its default 1"), -1);
    if (c->pool_size < 1 || (!mf__pool_is_causal(c) && c->pool_size % 2 == 0))
        return (mf__fail(ctx, "model config: pool_size %d must be >= 1 (and odd for a centred window)", c->pool_size), -1);
    return 0;
}
static void mf__pool_make_layer(mf_model *m, int l, void *st) { (void)m; (void)l; (void)st; } /* no parameters */
static mf_tensor *mf__pool_forward(mf_model *m, int l, void *st, mf_tensor *xn) {
    (void)l; (void)st;
    return mf__avg_pool_sub(m->ctx, xn, m->cfg.pool_size, mf__pool_is_causal(&m->cfg));
}
static int mf__pool_gen_begin(mf_model *m, int l, void *st) {
    mf__pool_layer *P = (mf__pool_layer *)st;
    (void)l;
    if (!mf__pool_is_causal(&m->cfg)) return 1; /* no state: every step reruns the window */
    if (!P->cache && !(P->cache = (float *)mf__dmalloc(m->ctx, (size_t)m->cfg.max_seq * m->cfg.d_model * sizeof(float),
                                                      "generation cache")))
        return (mf__fail(m->ctx, "out of memory: generation cache"), -1);
    return 0;
}
/* the rows pos0 .. pos0 + T - 1 into the cache; the window needs up to pool_size - 1 earlier rows */
static mf_tensor *mf__pool_gen_step(mf_model *m, int l, void *st, mf_tensor *xn, int pos0) {
    mf_ctx *ctx = m->ctx;
    const mf_model_config *c = &m->cfg;
    float *rows = ((mf__pool_layer *)st)->cache;
    int T = xn->shape[1], D = c->d_model, keep = c->pool_size - 1, start = pos0 - keep < 0 ? 0 : pos0 - keep, shape[3];
    mf_tensor *win;
    (void)l;
    mf__dcopy(ctx, rows + (int64_t)pos0 * D, xn->data, (size_t)T * D * sizeof(float));
    shape[0] = 1; shape[1] = pos0 + T - start; shape[2] = D;
    win = mf__wrap(ctx, 3, shape, rows + (int64_t)start * D);
    win = mf_slice(ctx, mf_avg_pool_seq(ctx, win, c->pool_size, 1), 1, pos0 - start, T);
    return mf_sub(ctx, win, xn);
}
static void mf__pool_free_layer(mf_model *m, int l, void *st) { (void)l; mf__model_dfree(m, ((mf__pool_layer *)st)->cache); }
static const mf_mixer_def mf__pool_def = {
    "pool", "mean over a window of pool_size tokens minus x (PoolFormer)", MF_MIXER_NONCAUSAL, 0, NULL,
    sizeof(mf__pool_layer), mf__pool_make_layer, mf__pool_forward, mf__pool_check, mf__pool_gen_begin, mf__pool_gen_step,
    NULL, mf__pool_free_layer, NULL, NULL, NULL, NULL, MF__F(POOL_SIZE) | MF__F(POOL_CAUSAL)
};

static double mf__no_flops(const mf_model_config *c, int T, double keys) { (void)c; (void)T; (void)keys; return 0; } /* no product */
static const mf__family mf__fam_identity = {
    "identity", 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, mf__no_flops
};

/* ==== [mf:xl] =============================================================================== */
#ifndef METAFORMER_NO_XL /* the whole section: its ops, the family, its row in [mf:mixers] */
/* [B, T, H*dk] -> [B, H, T, dk]: mf_rel_attention takes heads-major operands */
static mf_tensor *mf__split_heads(mf_ctx *ctx, mf_tensor *x, int H) {
    int shape[4], perm[4] = {0, 2, 1, 3};
    if (!x) return NULL;
    shape[0] = x->shape[0]; shape[1] = x->shape[1]; shape[2] = H; shape[3] = x->shape[2] / H;
    return mf_permute(ctx, mf_reshape(ctx, x, 4, shape), perm);
}
/* [B, H, T, dk] -> [B, T, H*dk] */
static mf_tensor *mf__merge_heads(mf_ctx *ctx, mf_tensor *o) {
    int shape[3], perm[4] = {0, 2, 1, 3};
    if (!o) return NULL;
    shape[0] = o->shape[0]; shape[1] = o->shape[2]; shape[2] = o->shape[1] * o->shape[3];
    return mf_reshape(ctx, mf_permute(ctx, o, perm), 3, shape);
}
/* Transformer-XL relative attention with segment memory and the compressive transformer
   (docs/math.md §5, §6).

   ---- mf_rel_attention: the fused kernel -----------------------------------------------------------
   src: 0 q [B, H, Tq, dk], 1 k [B, H, Tk, dk], 2 v [B, H, Tk, dv], 3 u [H, dk], 4 R [2P, H, dk],
   5 S [2P, H]; the scale in MF__FARG_ATTN_SCALE; saved: the row log-sum-exp (B*H*Tq floats), as mf_attention.
   The tiles, the transposed score layout st[key][query] and the online softmax are mf_attention's
   (see its comment); only the scores differ. For a pair of a query tile (i0, bq queries) and a key
   tile (j0, bk keys), query i and key j use the table row rho = P + j - i - M, so the pair needs
   the nc = bk + bq - 1 consecutive rows rho0 = P + j0 - (i0 + bq - 1) - M ... rho0 + nc - 1, and
   query lane ii uses row c = jj - ii + bq - 1 of them for key jj. One small product
       gt[c][ii] = scale * R[rho0 + c][h] . q_ii + scale * S[rho0 + c][h]      (nc x 64, like st)
   gives every positional term; st[jj][ii] += gt[jj - ii + bq - 1][ii] picks them (a strided
   gather along a diagonal: the pad-shift of labml, per tile). The content term uses
   scale * (q + u)^T. About 2x the products of mf_attention's forward, no T x Tk tensor.
   Backward: with dS the score gradient times scale (as in mf_attention),
       dQ += dS K + dG^T R_rows,  dK += dS^T (Q + u),  du += sum_i (dS K)_i,
       dR_rows += dG Q,  dS_rows += rowsum(dG),  with dG[c][ii] = dS[c + ii - bq + 1][ii]
   (the same diagonal, scattered back). dR, dS and du go to per-(b, h) partial buffers (each (b, h)
   is one thread's, its pairs in a fixed order) that are summed over b in order at the end:
   deterministic for any thread count, and only the visible rows (P - Tk + 1 .. P) are added. */
#define MF__RA_GT (2 * MF__AT_BQ) /* rows of the positional tile: bk + bq - 1 <= 127 */

/* The scores st[jj][ii] of a pair of head bh (content + position + causal mask); qu, qs: the
   query tile's scale * (Q + u)^T and scale * Q^T, [dk][ldq]; gt: MF__RA_GT x 64 scratch.
   rk: NULL, or scratch for the bf16 copies of the key tile and the table rows (64 + MF__RA_GT) dk
   floats (bf16 products: qu and qs hold bf16 values) */
static void mf__rel_scores(const mf_tensor *out, int64_t bh, int i0, int bq, int j0, int bk,
                           const float *qu, const float *qs, int ldq, float *st, float *gt, float *rk) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *R = out->src[4], *S = out->src[5];
    int Tq = Q->shape[2], Tk = K->shape[2], dk = Q->shape[3], H = Q->shape[1], h = (int)(bh % H);
    int M = Tk - Tq, nc = bk + bq - 1, rho0 = R->shape[0] / 2 + j0 - (i0 + bq - 1) - M, c, jj, ii, ldr = H * dk;
    float scale = out->farg[MF__FARG_ATTN_SCALE];
    const float *k = K->data + (bh * Tk + j0) * dk, *r = R->data + ((int64_t)rho0 * H + h) * dk;
    if (rk) {
        k = mf__bf16_rows(rk, k, dk, bk, dk);
        r = mf__bf16_rows(rk + (int64_t)MF__AT_BK * dk, r, ldr, nc, dk);
        ldr = dk;
    }
    mf__tile_mm(bk, MF__AT_BQ, dk, k, dk, 1, qu, ldq, st, MF__AT_BQ, 0);
    mf__tile_mm(nc, MF__AT_BQ, dk, r, ldr, 1, qs, ldq, gt, MF__AT_BQ, 0);
    for (c = 0; c < nc; c++) {
        mf__av s = mf__av_set1(scale * S->data[(int64_t)(rho0 + c) * H + h]);
        float *g = gt + c * MF__AT_BQ;
        for (ii = 0; ii < MF__AT_BQ; ii += MF__AW) mf__av_store(g + ii, mf__av_add(mf__av_load(g + ii), s));
    }
    for (jj = 0; jj < bk; jj++) { /* lane ii reads gt[jj - ii + bq - 1][ii]: stride 1 - 64 */
        float *s = st + jj * MF__AT_BQ;
        for (ii = 0; ii + MF__AW <= bq; ii += MF__AW)
            mf__av_store(s + ii, mf__av_add(mf__av_load(s + ii),
                         mf__av_gather(gt + (jj + bq - 1 - ii) * MF__AT_BQ + ii, 1 - MF__AT_BQ)));
        for (; ii < bq; ii++) s[ii] += gt[(jj + bq - 1 - ii) * MF__AT_BQ + ii];
    }
    if (j0 + bk - 1 > i0 + M) mf__attn_mask(st, j0, bk, i0, M);
}

/* dst [dk][ld] = scale * (q + u)^T of bq query rows from qs = scale * q^T (padding lanes 0) */
static void mf__rel_add_u(const float *qs, int ld, int bq, int dk, const float *u, float scale, float *dst) {
    int c, i;
    for (c = 0; c < dk; c++)
        for (i = 0; i < ld; i++) dst[(int64_t)c * ld + i] = qs[(int64_t)c * ld + i] + (i < bq ? scale * u[c] : 0.0f);
}

static int mf__rel_attention_shape(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *q = out->src[0], *k = out->src[1], *v = out->src[2], *u = out->src[3], *R = out->src[4];
    mf_tensor *S = out->src[5];
    char sq[64], sk[64], sv[64];
    int H, dk, P;
    if (mf__attention_shape(ctx, out) < 0) return -1; /* q, k, v and scale as mf_attention */
    mf_shape_str(q, sq, 64); mf_shape_str(k, sk, 64);
    H = q->shape[1]; dk = q->shape[3];
    if (u->ndim != 2 || u->shape[0] != H || u->shape[1] != dk)
        return MF__SHAPE_FAIL("rel_attention: u %s must be [H, dk] = [%d, %d] (q is %s)", mf_shape_str(u, sv, 64), H, dk, sq);
    if (R->ndim != 3 || R->shape[0] < 2 || R->shape[0] % 2 || R->shape[1] != H || R->shape[2] != dk)
        return MF__SHAPE_FAIL("rel_attention: R %s must be [2P, H, dk] with H = %d, dk = %d (an even number of rows)",
                              mf_shape_str(R, sv, 64), H, dk);
    P = R->shape[0] / 2;
    if (S->ndim != 2 || S->shape[0] != 2 * P || S->shape[1] != H)
        return MF__SHAPE_FAIL("rel_attention: S %s must be [2P, H] = [%d, %d] (R is [%d, %d, %d])", mf_shape_str(S, sv, 64),
                              2 * P, H, 2 * P, H, dk);
    if (k->shape[2] < q->shape[2])
        return MF__SHAPE_FAIL("rel_attention: q %s has more positions than k %s; the keys are [memory; the queries' "
                              "own positions], so Tk >= Tq", sq, sk);
    if (k->shape[2] > P)
        return MF__SHAPE_FAIL("rel_attention: %d keys exceed the P = %d relative positions of the tables; use "
                              "fewer keys (shorter segments or memory) or larger tables", k->shape[2], P);
    (void)v;
    return 0;
}

/* work: (2 dk + 64 + MF__RA_GT + dv + 3) 64 floats, and with bf16 (64 + MF__RA_GT) dk + 64 dv more
   for the rounded key, table and value tiles */
static void mf__rel_fwd_tile(mf_tensor *out, const mf__attn_drop *d, int64_t bh, int qt, float *work, int bf16) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2], *U = out->src[3];
    int Tq = Q->shape[2], Tk = K->shape[2], dk = Q->shape[3], dv = V->shape[3], H = Q->shape[1];
    int M = Tk - Tq, i0 = qt * MF__AT_BQ, bq = Tq - i0 < MF__AT_BQ ? Tq - i0 : MF__AT_BQ, kend, j0;
    float scale = out->farg[MF__FARG_ATTN_SCALE];
    const float *v = V->data + bh * Tk * dv;
    float *o = out->data + (bh * Tq + i0) * dv, *lse = out->saved + bh * Tq + i0;
    float *qs = work, *qu = qs + (int64_t)dk * MF__AT_BQ, *st = qu + (int64_t)dk * MF__AT_BQ;
    float *gt = st + MF__AT_BK * MF__AT_BQ, *acc = gt + MF__RA_GT * MF__AT_BQ;
    float *m = acc + (int64_t)MF__AT_BQ * dv, *l = m + MF__AT_BQ, *al = l + MF__AT_BQ;
    float *rk = bf16 ? al + MF__AT_BQ : NULL, *rv = al + MF__AT_BQ + (int64_t)(MF__AT_BK + MF__RA_GT) * dk;
    kend = i0 + bq + M < Tk ? i0 + bq + M : Tk; /* later keys are hidden from the whole tile */
    mf__attn_transpose(Q->data + (bh * Tq + i0) * dk, dk, bq, MF__AT_BQ, dk, scale, qs, MF__AT_BQ);
    mf__rel_add_u(qs, MF__AT_BQ, bq, dk, U->data + (int64_t)(bh % H) * dk, scale, qu);
    if (bf16) mf__bf16_rows(qs, qs, MF__AT_BQ, 2 * dk, MF__AT_BQ); /* scale Q^T and scale (Q + u)^T, after the sum */
    mf__attn_online_init(m, l, acc, dv);
    for (j0 = 0; j0 < kend; j0 += MF__AT_BK) {
        int bk = kend - j0 < MF__AT_BK ? kend - j0 : MF__AT_BK;
        const float *vb = v + (int64_t)j0 * dv;
        mf__rel_scores(out, bh, i0, bq, j0, bk, qu, qs, MF__AT_BQ, st, gt, rk);
        if (bf16) vb = mf__bf16_rows(rv, vb, dv, bk, dv);
        mf__attn_online_block(st, bk, bq, dv, vb, dv, m, l, al, acc, j0 + bk - 1 > i0 + M, j0 - M - i0,
                              d, (bh * Tq + i0) * Tk + j0, Tk, bf16);
    }
    mf__attn_online_finish(acc, m, l, bq, dv, o, dv, lse);
}

static void mf__rel_attention_forward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2];
    int Tq = Q->shape[2], Tk = K->shape[2], dk = Q->shape[3], dv = V->shape[3];
    int64_t BH = (int64_t)Q->shape[0] * Q->shape[1];
    int64_t per = (int64_t)(2 * dk + MF__AT_BK + MF__RA_GT + dv + 3) * MF__AT_BQ;
    if (mf__attn_bf16(ctx)) per += (int64_t)(MF__AT_BK + MF__RA_GT) * dk + (int64_t)MF__AT_BK * dv;
    mf__attn_tiles_fwd(ctx, out, (per + 15) & ~(int64_t)15, 0, 2.0 * (double)BH * Tq * Tk * (2 * dk + dv),
                       mf__rel_fwd_tile);
}

/* Backward of the pair (key tile kt, query tile qt) of head bh. hd: the head's scale * Q^T,
   scale * (Q + u)^T [dk][Tqp] each, dO^T [dv][Tqp], lse [Tqp], D [Tqp]; part: the head's partial
   dR [Tq + Tk - 1][dk], dS [Tq + Tk - 1], du [dk] (row g <-> table row P - Tk + 1 + g);
   st, dp: 64 x 64 tiles, gt: MF__RA_GT x 64; pd: a third 64 x 64 tile for the dropped P~ (dropout
   as in mf__attn_bwd_pair, over the memories too). rt: NULL, or scratch (mf__rel_bf16_floats) for the
   bf16 copies of the tile products' operands (bf16 products: hd's transposes hold bf16 values): P~
   and dS, the key, table, value, query and dO tiles; dS's sums (du, dS_table) stay fp32. */
static void mf__rel_bwd_pair(mf_tensor *out, const mf__attn_drop *d, int64_t bh, int kt, int qt, const float *hd,
                             float *part, float *st, float *dp, float *gt, float *pd, float *rt) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2], *U = out->src[3], *R = out->src[4];
    int Tq = Q->shape[2], Tk = K->shape[2], dk = Q->shape[3], dv = V->shape[3], H = Q->shape[1];
    int Tqp = (Tq + MF__AT_BQ - 1) / MF__AT_BQ * MF__AT_BQ, M = Tk - Tq, jj, ii, c;
    int i0 = qt * MF__AT_BQ, j0 = kt * MF__AT_BK, h = (int)(bh % H);
    int bq = Tq - i0 < MF__AT_BQ ? Tq - i0 : MF__AT_BQ, bk = Tk - j0 < MF__AT_BK ? Tk - j0 : MF__AT_BK;
    int nc = bk + bq - 1, rho0 = R->shape[0] / 2 + j0 - (i0 + bq - 1) - M, g0 = j0 - i0 - bq + Tq;
    float scale = out->farg[MF__FARG_ATTN_SCALE];
    float *gq = mf__g(Q), *gk = mf__g(K), *gv = mf__g(V), *gu = mf__g(U), *gR = mf__g(R), *gS = mf__g(out->src[5]);
    const float *q = Q->data + (bh * Tq + i0) * dk, *k = K->data + (bh * Tk + j0) * dk;
    const float *v = V->data + (bh * Tk + j0) * dv, *dO = out->grad + (bh * Tq + i0) * dv;
    const float *qs = hd + i0, *qu = hd + (int64_t)dk * Tqp + i0, *dot = hd + (int64_t)2 * dk * Tqp + i0;
    const float *lse = hd + (int64_t)(2 * dk + dv) * Tqp + i0, *D = lse + Tqp, *u = U->data + (int64_t)h * dk;
    float *pR = part, *pS = part + (int64_t)(Tq + Tk - 1) * dk, *pu = pS + (Tq + Tk - 1);
    /* bf16: rt holds P~ / dS, the key tile, the table rows (as mf__rel_scores stages them), v, q, dO */
    float *rk = rt ? rt + MF__AT_BK * MF__AT_BQ : NULL, *rr = rk ? rk + (int64_t)MF__AT_BK * dk : NULL;
    const float *kr = k, *rrow = R->data + ((int64_t)rho0 * H + h) * dk;
    int ldr = H * dk;
    if (j0 > i0 + bq - 1 + M) return; /* every key of the tile is hidden */
    mf__rel_scores(out, bh, i0, bq, j0, bk, qu, qs, Tqp, st, gt, rk);
    if (rt) { /* the rounded key and table rows mf__rel_scores staged; v, q, dO */
        float *x = rr + (int64_t)MF__RA_GT * dk;
        kr = rk; rrow = rr; ldr = dk;
        v = mf__bf16_rows(x, v, dv, bk, dv);
        q = mf__bf16_rows(x + (int64_t)MF__AT_BK * dv, q, dk, bq, dk);
        dO = mf__bf16_rows(x + (int64_t)MF__AT_BK * dv + (int64_t)MF__AT_BQ * dk, dO, dv, bq, dv);
    }
    for (jj = 0; jj < bk; jj++) /* P^T = exp(st - lse) */
        for (ii = 0; ii < MF__AT_BQ; ii += MF__AW) {
            float *s = st + jj * MF__AT_BQ + ii;
            mf__av_store(s, mf__av_exp(mf__av_sub(mf__av_load(s), mf__av_load(lse + ii))));
        }
    if (d->p > 0.0f) mf__attn_drop_tile(d, pd, st, bk, bq, (bh * Tq + i0) * Tk + j0, Tk);
    if (gv) {
        const float *pv = d->p > 0.0f ? pd : st;
        if (rt) pv = mf__bf16_rows(rt, pv, MF__AT_BQ, bk, MF__AT_BQ);
        mf__tile_mm(bk, dv, bq, pv, MF__AT_BQ, 1, dO, dv, gv + (bh * Tk + j0) * dv, dv, 1);
    }
    if (!gq && !gk && !gu && !gR && !gS) return;
    /* dS^T = scale * P^T * (V dO^T - D); with dropout scale * (P~^T * V dO^T - P^T * D) */
    mf__tile_mm(bk, MF__AT_BQ, dv, v, dv, 1, dot, Tqp, dp, MF__AT_BQ, 0);
    for (jj = 0; jj < bk; jj++)
        for (ii = 0; ii < MF__AT_BQ; ii += MF__AW) {
            float *g = dp + jj * MF__AT_BQ + ii;
            mf__av p = mf__av_load(st + jj * MF__AT_BQ + ii), ds;
            if (d->p > 0.0f)
                ds = mf__av_sub(mf__av_mul(mf__av_load(pd + jj * MF__AT_BQ + ii), mf__av_load(g)),
                                mf__av_mul(p, mf__av_load(D + ii)));
            else ds = mf__av_mul(p, mf__av_sub(mf__av_load(g), mf__av_load(D + ii)));
            mf__av_store(g, mf__av_mul(ds, mf__av_set1(scale)));
        }
    {
        const float *ds = rt ? mf__bf16_rows(rt, dp, MF__AT_BQ, bk, MF__AT_BQ) : dp;
        if (gq) mf__tile_mm(bq, dk, bk, ds, 1, MF__AT_BQ, kr, dk, gq + (bh * Tq + i0) * dk, dk, 1);
        if (gk) mf__tile_mm(bk, dk, bq, ds, MF__AT_BQ, 1, q, dk, gk + (bh * Tk + j0) * dk, dk, 1);
    }
    if (gk || gu)
        for (jj = 0; jj < bk; jj++) { /* the u term: dK += rowsum(dS^T) u, du += rowsum(dS^T) k */
            float cs = 0;
            for (ii = 0; ii < bq; ii++) cs += dp[jj * MF__AT_BQ + ii];
            for (c = 0; gk && c < dk; c++) gk[(bh * Tk + j0 + jj) * dk + c] += cs * u[c];
            for (c = 0; gu && c < dk; c++) pu[c] += cs * k[(int64_t)jj * dk + c];
        }
    if (!gq && !gR && !gS) return;
    memset(gt, 0, (size_t)nc * MF__AT_BQ * sizeof(float)); /* dG: the diagonal scattered back */
    for (jj = 0; jj < bk; jj++)
        for (ii = 0; ii < bq; ii++) gt[(jj - ii + bq - 1) * MF__AT_BQ + ii] = dp[jj * MF__AT_BQ + ii];
    if (gS) /* (from the fp32 dG, before bf16 rounds it) */
        for (c = 0; c < nc; c++) {
            mf__av s = mf__av_zero();
            for (ii = 0; ii < MF__AT_BQ; ii += MF__AW) s = mf__av_add(s, mf__av_load(gt + c * MF__AT_BQ + ii));
            pS[g0 + c] += mf__av_hsum(s);
        }
    if (rt && (gq || gR)) mf__bf16_rows(gt, gt, MF__AT_BQ, nc, MF__AT_BQ);
    if (gq) mf__tile_mm(bq, dk, nc, gt, 1, MF__AT_BQ, rrow, ldr, gq + (bh * Tq + i0) * dk, dk, 1);
    if (gR) mf__tile_mm(nc, dk, bq, gt, MF__AT_BQ, 1, q, dk, pR + (int64_t)g0 * dk, dk, 1);
}
/* floats of mf__rel_bwd_pair's bf16 scratch rt */
static int64_t mf__rel_bf16_floats(int dk, int dv) {
    return (int64_t)MF__AT_BK * MF__AT_BQ + (int64_t)(MF__AT_BK + MF__RA_GT + MF__AT_BQ) * dk
           + (int64_t)(MF__AT_BK + MF__AT_BQ) * dv;
}

static void mf__rel_attention_backward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2], *U = out->src[3];
    int Tq = Q->shape[2], Tk = K->shape[2], dk = Q->shape[3], dv = V->shape[3], H = Q->shape[1], B = Q->shape[0];
    int nqt = (Tq + MF__AT_BQ - 1) / MF__AT_BQ, nkt = (Tk + MF__AT_BK - 1) / MF__AT_BK, P = out->src[4]->shape[0] / 2;
    int Tqp = nqt * MF__AT_BQ, nt, ng = Tq + Tk - 1;
    int64_t BH = (int64_t)B * H, hs = (int64_t)(2 * dk + dv + 2) * Tqp, ps = (int64_t)ng * (dk + 1) + dk, t;
    mf__attn_drop d = mf__attn_drop_of(ctx, out);
    const mf__attn_geo ge = mf__attn_geo_of(out);
    int64_t tile = MF__AT_BK * MF__AT_BQ, per = (d.p > 0.0f ? 3 : 2) * tile + MF__RA_GT * MF__AT_BQ, rtf = 0;
    float scale = out->farg[MF__FARG_ATTN_SCALE], *head, *part, *work;
    int bf16 = mf__attn_bf16(ctx);
    float *gu = mf__g(U), *gR = mf__g(out->src[4]), *gS = mf__g(out->src[5]);
    int i;
    for (i = 0; i < 6 && !mf__g(out->src[i]); i++) {}
    if (i == 6) return;
    nt = mf__attn_threads(ctx, 4.0 * (double)BH * Tq * Tk * (2 * dk + dv));
    if (nt > BH) nt = (int)BH;
    if (bf16) { rtf = per; per += mf__rel_bf16_floats(dk, dv); } /* rt: the bf16 operand copies */
    head = (float *)mf__alloc(ctx, (size_t)(BH * hs) * sizeof(float));
    part = (float *)mf__alloc(ctx, (size_t)(BH * ps) * sizeof(float));
    work = (float *)mf__alloc(ctx, (size_t)(per * nt) * sizeof(float));
    if (!head || !part || !work) return;
#if MF__OMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (t = 0; t < BH; t++) { /* per head: scale Q^T, scale (Q + u)^T, dO^T, lse, D; zero partials */
        float *qs = head + t * hs, *qu = qs + (int64_t)dk * Tqp, *dot = qu + (int64_t)dk * Tqp;
        float *lse = dot + (int64_t)dv * Tqp;
        mf__attn_transpose(Q->data + t * Tq * dk, dk, Tq, Tqp, dk, scale, qs, Tqp);
        mf__rel_add_u(qs, Tqp, Tq, dk, U->data + (t % H) * dk, scale, qu);
        mf__attn_bwd_head(out, &ge, t, NULL, 0, Tqp, dot, lse, lse + Tqp);
        if (bf16) mf__bf16_rows(qs, qs, Tqp, 2 * dk + dv, Tqp); /* the transposes: operands of tile products */
        memset(part + t * ps, 0, (size_t)ps * sizeof(float));
    }
#if MF__OMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for (t = 0; t < BH; t++) { /* one thread per head: its pairs in order */
        float *st = work + per * mf__attn_thread_num();
        int kt, qt;
        for (kt = 0; kt < nkt; kt++)
            for (qt = 0; qt < nqt; qt++)
                mf__rel_bwd_pair(out, &d, t, kt, qt, head + t * hs, part + t * ps, st, st + tile, st + 2 * tile,
                                 st + 2 * tile + MF__RA_GT * MF__AT_BQ, bf16 ? st + rtf : NULL);
    }
    /* the partials summed over b in order; table row P - Tk + 1 + g for the visible g < Tk */
#if MF__OMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (t = 0; t < H; t++) {
        int b, g, c;
        for (b = 0; b < B; b++) {
            const float *p = part + ((int64_t)b * H + t) * ps;
            for (g = 0; g < Tk; g++) {
                int64_t row = P - Tk + 1 + g;
                for (c = 0; gR && c < dk; c++) gR[(row * H + t) * dk + c] += p[(int64_t)g * dk + c];
                if (gS) gS[row * H + t] += p[(int64_t)ng * dk + g];
            }
            for (c = 0; gu && c < dk; c++) gu[t * dk + c] += p[(int64_t)ng * (dk + 1) + c];
        }
    }
}
static const mf__op mf__op_rel_attention = { "rel_attention", 6, mf__rel_attention_shape, mf__rel_attention_forward,
                                            mf__rel_attention_backward, MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_rel_attention(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, mf_tensor *u,
                                  mf_tensor *R, mf_tensor *S, float scale, float dropout) {
    mf_tensor *t;
    if (!mf_ok(ctx) || mf__attn_drop_check(ctx, "rel_attention", dropout) < 0) return NULL;
    t = mf__begin(ctx, &mf__op_rel_attention, q, k, v, u);
    if (t) {
        t->src[4] = R; t->src[5] = S;
        t->farg[MF__FARG_ATTN_SCALE] = scale;
        t->iarg[MF__ARG_ATTN_CAUSAL] = 1; /* for mf__attention_shape */
        mf__attn_drop_set(ctx, t, dropout);
    }
    return mf__finish(ctx, t);
}

/* ---- the relative mixer: Transformer-XL and compressive transformer layers ----------------------
   mf__xl_mixer(x) for layer l, with x the layer input [B, T, D] (docs/math.md §5.3, 6.2):
       kv = [c_mem ; mem ; x]  (memories: constants)      xn = LN1(kv)  (ln1 also learns from memories)
       out = Linear_out(rel_attention(q(xn[Mm:]), k(xn), v(xn), u, R, S))   Mm = |c_mem| + |mem|
   then the memory of layer l is updated with x (docs/math.md §5.5, 6.3): the detached input of each layer,
   the last mem_len rows of [mem ; x]; compressive: when that exceeds mem_len, the oldest
   ceil((len - mem_len) / c) * c rows are compressed by the layer's conv1d (kernel = stride = c)
   and appended to c_mem (the last c_mem_len kept), and the attention-reconstruction loss of the
   layer (docs/math.md §6.4, mf__xl_ar_loss) is added to the step's auxiliary loss.
   Memories live in buffers owned by the model on its device (host memory on the CPU, device
   memory from the context's backend on CUDA; they survive mf_reset), in three slots:
   0 training, 1 validation (mf_model_memory_slot), 2 generation (reset when generation restarts at
   position 0). The generation slot keeps mem_len memories like training (docs/math.md §5.6 / 6.3: the
   prompt with an empty memory, then one token at a time); with mem_len = 0 it keeps up to
   max_seq - 1 tokens instead, so that generation equals the full forward over the window.
   The memories are read and rebuilt with ops on constants (mf_concat / mf_slice of tensors over the
   slot buffers, mf__wrap): one kernel each on CUDA, then one contiguous copy back per buffer. */
typedef struct mf__xl_slot {
    int B;              /* batch rows of the stored memories (0: none allocated) */
    int cap;            /* memories kept per layer */
    int *len, *clen;    /* per layer: memories and compressed memories held */
    float *mem, *cmem;  /* per layer l a block of B * cap (c_mem_len) rows of D floats at l * B * cap * D
                           (l * B * c_mem_len * D), holding [B][len][D] ([B][clen][D]) densely, oldest first */
    /* memory rows (mf_model_memory_rows): a call of b < B rows reads rows [row0, row0 + b) of mem and
       writes their new memories to the same place of next; once a layer's B rows are all written (a
       round: the micro-batches of one step) next becomes mem. The layouts stay dense per layer. */
    int row0, rows;     /* the setting: rows 0 = the batch of each call */
    float *nmem, *ncmem;         /* the round's new memories, laid out as mem, cmem */
    int *nlen, *nclen, *nrows;   /* per layer: their lengths, and the rows written so far */
    unsigned char *wrote;        /* [layer][B]: row written in this round */
} mf__xl_slot;
/* the part of a slot's layer that one call reads (mem, cmem at row0) and writes (mem_out, cmem_out at
   row0 in the new lengths' layout): in place for a call on every row */
typedef struct mf__xl_view { float *mem, *cmem, *mem_out, *cmem_out; int row0, round; } mf__xl_view;
typedef struct mf__xl_layer {
    mf_tensor *wq, *wk, *wv, *bv, *wo, *bo; /* q, k without bias (docs/math.md §5.1) */
    mf_tensor *rel_u, *rel_r, *rel_s;       /* u [H][dk], R [2P][H][dk], S [2P][H] */
    mf_tensor *cmp_w, *cmp_b;               /* compressive: conv1d compressor [D][D][c], [D] */
} mf__xl_layer;
#define MF__XL_L(m, l) ((mf__xl_layer *)(m)->layers[l].mix)
struct mf__xl_state {
    mf__xl_slot slot[3];
    int cur;            /* the slot of mf_model_forward / mf_model_loss */
    mf_tensor *aux;     /* the AR loss of the last forward (activation arena) or NULL */
    float aux_value;
};

static int mf__xl_check(mf_ctx *ctx, const mf_model_config *c) {
    int64_t keys = (int64_t)c->max_seq + c->mem_len + (c->compressive ? c->c_mem_len : 0);
#define MF__BAD(...) return (mf__fail(ctx, __VA_ARGS__), -1)
    if (c->n_classes > 0)
        MF__BAD("model config: n_classes = %d with the relative mixer: its memories continue batch rows across calls, "
                "which a classifier of independent texts does not have; choose another mixer", c->n_classes);
    if (c->mem_len < 0) MF__BAD("model config: mem_len %d must be >= 0 (memories kept per layer; 0 = none)", c->mem_len);
    if (c->c_mem_len < 0) MF__BAD("model config: c_mem_len %d must be >= 0 (compressed memories kept per layer)", c->c_mem_len);
    if (c->compressive) {
        if (c->compression_rate < 1)
            MF__BAD("model config: compression_rate %d must be >= 1 (the compressor's kernel size and stride)", c->compression_rate);
        if (c->mem_len == 0)
            MF__BAD("model config: compressive with mem_len 0 has nothing to compress (only memories older than the "
                    "last mem_len get compressed); set mem_len > 0, or compressive = 0");
        if (c->mem_len < c->compression_rate - 1)
            MF__BAD("model config: compressive with mem_len %d < compression_rate %d - 1: the ceil((len - mem_len) / c) * c "
                    "oldest memories to compress can outnumber the memories held; set mem_len >= compression_rate - 1",
                    c->mem_len, c->compression_rate);
        if (c->c_mem_len == 0)
            MF__BAD("model config: compressive with c_mem_len 0 keeps no compressed memory; set c_mem_len > 0, or "
                    "compressive = 0 for a plain Transformer-XL");
    }
    if (keys > MF_XL_P)
        MF__BAD("model config: max_seq %d + mem_len %d + c_mem_len %d = %lld keys exceed the P = %d relative positions "
                "of the relative mixer; lower max_seq, mem_len or c_mem_len", c->max_seq, c->mem_len,
                c->compressive ? c->c_mem_len : 0, (long long)keys, MF_XL_P);
#undef MF__BAD
    return 0;
}

/* a parameter of layer l with a 3-D shape (the generic helper makes 1-D and 2-D ones) */
static mf_tensor *mf__xl_param3(mf_model *m, int l, const char *name, int d0, int d1, int d2) {
    mf_tensor *t = mf__layer_param(m, l, name, 2, d0, d1 * d2);
    int shape[3];
    shape[0] = d0; shape[1] = d1; shape[2] = d2;
    if (t) mf__set_shape(t, 3, shape);
    return t;
}

static void mf__xl_make_layer(mf_model *m, int l) {
    const mf_model_config *c = &m->cfg;
    mf__xl_layer *L = MF__XL_L(m, l);
    int D = c->d_model, H = c->n_heads, dk = D / H;
    mf_tensor *unused;
    mf__layer_linear(m, l, "attn.q", D, D, 0, &L->wq, &unused); /* docs/math.md §5.1: q, k without bias */
    mf__layer_linear(m, l, "attn.k", D, D, 0, &L->wk, &unused);
    mf__layer_linear(m, l, "attn.v", D, D, 1, &L->wv, &L->bv);
    mf__layer_linear(m, l, "attn.out", D, D, 1, &L->wo, &L->bo);
    L->rel_u = mf__layer_param(m, l, "attn.u", 2, H, dk); /* u, R, S: zeros */
    L->rel_r = mf__xl_param3(m, l, "attn.r", 2 * MF_XL_P, H, dk);
    L->rel_s = mf__layer_param(m, l, "attn.s", 2, 2 * MF_XL_P, H);
    if (c->compressive) { /* Conv1d(D, D, kernel c, stride c): PyTorch init, fan_in = D * c */
        L->cmp_w = mf__xl_param3(m, l, "compress.weight", D, D, c->compression_rate);
        mf_init_kaiming_uniform(m->ctx, L->cmp_w);
        L->cmp_b = mf__layer_param(m, l, "compress.bias", 1, D, 0);
        mf_init_bias(m->ctx, L->cmp_b, D * c->compression_rate);
    }
}

/* the round's buffers of memory rows (allocated by the first call on part of the rows) */
static void mf__xl_free_round(mf_model *m, mf__xl_slot *s) {
    mf__model_dfree(m, s->nmem); mf__model_dfree(m, s->ncmem);
    MF_FREE(s->nlen); MF_FREE(s->nclen); MF_FREE(s->nrows); MF_FREE(s->wrote);
    s->nmem = s->ncmem = NULL;
    s->nlen = s->nclen = s->nrows = NULL;
    s->wrote = NULL;
}

static void mf__xl_free(mf_model *m) {
    struct mf__xl_state *xl = (struct mf__xl_state *)m->fam_state;
    int i;
    if (!xl) return;
    for (i = 0; i < 3; i++) { /* mem, cmem: on the model's device (only a CUDA model needs its context alive) */
        MF_FREE(xl->slot[i].len); MF_FREE(xl->slot[i].clen);
        mf__model_dfree(m, xl->slot[i].mem); mf__model_dfree(m, xl->slot[i].cmem);
        mf__xl_free_round(m, &xl->slot[i]);
    }
    MF_FREE(xl);
    m->fam_state = NULL;
}

static void mf__xl_init(mf_model *m) {
    const mf_model_config *c = &m->cfg;
    struct mf__xl_state *xl;
    int i;
    if (!mf_ok(m->ctx)) return;
    if (!(xl = (struct mf__xl_state *)mf__xmalloc(sizeof(struct mf__xl_state)))) { mf__fail(m->ctx, "out of memory: model memories"); return; }
    memset(xl, 0, sizeof *xl);
    m->fam_state = xl;
    for (i = 0; i < 3; i++) {
        mf__xl_slot *s = &xl->slot[i];
        s->cap = i < 2 || c->mem_len > 0 ? c->mem_len : c->max_seq - 1;
        s->len = (int *)mf__xmalloc((size_t)c->n_layers * sizeof(int));
        s->clen = (int *)mf__xmalloc((size_t)c->n_layers * sizeof(int));
        if (!s->len || !s->clen) { mf__fail(m->ctx, "out of memory: model memories"); return; }
        memset(s->len, 0, (size_t)c->n_layers * sizeof(int));
        memset(s->clen, 0, (size_t)c->n_layers * sizeof(int));
    }
}

static void mf__xl_clear(const mf_model *m, mf__xl_slot *s) {
    memset(s->len, 0, (size_t)m->cfg.n_layers * sizeof(int));
    memset(s->clen, 0, (size_t)m->cfg.n_layers * sizeof(int));
    if (s->nrows) memset(s->nrows, 0, (size_t)m->cfg.n_layers * sizeof(int));
    if (s->wrote) memset(s->wrote, 0, (size_t)m->cfg.n_layers * s->B);
}
/* rows of the slot's layer l written in the current round (0 outside one) */
static int mf__xl_pending(const mf__xl_slot *s, int l) { return s->nrows ? s->nrows[l] : 0; }

/* the slot's buffers for B batch rows; a slot holding memories of another batch size is an error */
static int mf__xl_prepare(mf_model *m, mf__xl_slot *s, int B) {
    const mf_model_config *c = &m->cfg;
    int l, held = 0;
    size_t n, nc;
    if (s->B == B) return 0;
    for (l = 0; l < c->n_layers; l++) held |= s->len[l] | s->clen[l];
    if (held)
        return (mf__fail(m->ctx, "relative mixer: this call has batch %d but the memories (slot %d) hold %d rows from "
                         "the previous call, and row b must continue row b; keep the batch size, or call "
                         "mf_model_reset_memory first", B, (int)(s - ((struct mf__xl_state *)m->fam_state)->slot), s->B), -1);
    n = (size_t)c->n_layers * B * s->cap * c->d_model;
    nc = c->compressive ? (size_t)c->n_layers * B * c->c_mem_len * c->d_model : 0;
    mf__dfree(m->ctx, s->mem); mf__dfree(m->ctx, s->cmem);
    mf__xl_free_round(m, s);
    s->mem = s->cmem = NULL;
    s->B = 0;
    if (n && !(s->mem = (float *)mf__dmalloc(m->ctx, n * sizeof(float), "model memories"))) return -1;
    if (nc && !(s->cmem = (float *)mf__dmalloc(m->ctx, nc * sizeof(float), "model compressed memories"))) return -1;
    s->B = B;
    return 0;
}

/* the round's buffers for calls on part of the slot's rows (once per slot size) */
static int mf__xl_prepare_round(mf_model *m, mf__xl_slot *s) {
    const mf_model_config *c = &m->cfg;
    size_t L = (size_t)c->n_layers, n = L * s->B * s->cap * c->d_model;
    size_t nc = c->compressive ? L * s->B * c->c_mem_len * c->d_model : 0;
    if (s->nrows) return 0;
    s->nlen = (int *)mf__xmalloc(L * sizeof(int));
    s->nclen = (int *)mf__xmalloc(L * sizeof(int));
    s->wrote = (unsigned char *)mf__xmalloc(L * s->B);
    if (!s->nlen || !s->nclen || !s->wrote) return (mf__xl_free_round(m, s), mf__fail(m->ctx, "out of memory: model memories"), -1);
    if ((n && !(s->nmem = (float *)mf__dmalloc(m->ctx, n * sizeof(float), "model memories (memory rows)"))) ||
        (nc && !(s->ncmem = (float *)mf__dmalloc(m->ctx, nc * sizeof(float), "model compressed memories (memory rows)"))))
        return (mf__xl_free_round(m, s), -1);
    memset(s->wrote, 0, L * s->B);
    if (!(s->nrows = (int *)mf__xmalloc(L * sizeof(int)))) return (mf__xl_free_round(m, s), mf__fail(m->ctx, "out of memory: model memories"), -1);
    memset(s->nrows, 0, L * sizeof(int));
    return 0;
}

/* The view of layer l for a call of b rows: the whole slot in place, or (memory rows) rows
   [row0, row0 + b), which must not be written yet in this round. 0 or -1 (error in ctx). */
static int mf__xl_view_of(mf_model *m, mf__xl_slot *s, int l, int b, mf__xl_view *v) {
    const mf_model_config *c = &m->cfg;
    int64_t D = c->d_model, mbase = (int64_t)l * s->B * s->cap * D, cbase = (int64_t)l * s->B * c->c_mem_len * D;
    int r;
    memset(v, 0, sizeof *v);
    v->round = b < s->B;
    v->row0 = v->round ? s->row0 : 0;
    if (s->cap > 0) v->mem = s->mem + mbase + (int64_t)v->row0 * s->len[l] * D;
    if (s->cmem) v->cmem = s->cmem + cbase + (int64_t)v->row0 * s->clen[l] * D;
    if (!v->round) {
        if (mf__xl_pending(s, l))
            return (mf__fail(m->ctx, "relative mixer: a call on all %d memory rows while %d of them are already updated "
                             "in this step (mf_model_memory_rows); finish the step's micro-batches, or call "
                             "mf_model_reset_memory", s->B, s->nrows[l]), -1);
        v->mem_out = s->cap > 0 ? s->mem + mbase : NULL;
        v->cmem_out = s->cmem ? s->cmem + cbase : NULL;
        return 0;
    }
    if (mf__xl_prepare_round(m, s) < 0) return -1;
    for (r = v->row0; r < v->row0 + b; r++)
        if (s->wrote[(int64_t)l * s->B + r])
            return (mf__fail(m->ctx, "relative mixer: memory row %d was already updated in this step (mf_model_memory_rows "
                             "%d, %d): each row once per step; set the next micro-batch's row0", r, s->row0, s->B), -1);
    v->mem_out = s->cap > 0 ? s->nmem + mbase : NULL;
    v->cmem_out = s->ncmem ? s->ncmem + cbase : NULL;
    return 0;
}

/* after a call on part of the rows wrote lengths len, clen of layer l: the rows are marked, and once
   every row is written the new memories replace the old ones. 0 or -1 (lengths that differ within
   a round: the micro-batches of one step must have the same length). */
static int mf__xl_round_done(mf_model *m, mf__xl_slot *s, int l, int row0, int b, int len, int clen) {
    const mf_model_config *c = &m->cfg;
    int64_t D = c->d_model;
    if (s->nrows[l] && (s->nlen[l] != len || s->nclen[l] != clen))
        return (mf__fail(m->ctx, "relative mixer: the micro-batches of one step must have the same length T (layer %d "
                         "would hold %d memories in some rows and %d in others); give each the same T", l, s->nlen[l], len), -1);
    s->nlen[l] = len; s->nclen[l] = clen;
    memset(s->wrote + (int64_t)l * s->B + row0, 1, (size_t)b);
    if ((s->nrows[l] += b) < s->B) return 0;
    if (len > 0 && mf__dcopy(m->ctx, s->mem + (int64_t)l * s->B * s->cap * D, s->nmem + (int64_t)l * s->B * s->cap * D,
                             (size_t)s->B * len * D * sizeof(float)) < 0) return -1;
    if (clen > 0 && mf__dcopy(m->ctx, s->cmem + (int64_t)l * s->B * c->c_mem_len * D, s->ncmem + (int64_t)l * s->B * c->c_mem_len * D,
                              (size_t)s->B * clen * D * sizeof(float)) < 0) return -1;
    s->len[l] = len; s->clen[l] = clen;
    s->nrows[l] = 0;
    memset(s->wrote + (int64_t)l * s->B, 0, (size_t)s->B);
    return 0;
}

/* n rows per batch row held densely at buf as a constant tensor [B, n, D] (NULL when n = 0) */
static mf_tensor *mf__xl_wrap(mf_ctx *ctx, float *buf, int B, int n, int D) {
    int shape[3];
    shape[0] = B; shape[1] = n; shape[2] = D;
    return n > 0 && mf_ok(ctx) ? mf__wrap(ctx, 3, shape, buf) : NULL;
}
/* [a ; b] along the sequence axis; either may be NULL (empty) */
static mf_tensor *mf__xl_cat(mf_ctx *ctx, mf_tensor *a, mf_tensor *b) { return !a ? b : !b ? a : mf_concat(ctx, a, b, 1); }
/* buf (dense [B, keep, D]) = the last keep rows of the constant x [B, n, D]; 0 or -1 */
static int mf__xl_store(mf_ctx *ctx, float *buf, mf_tensor *x, int keep) {
    mf_tensor *t;
    if (!x) return -1;
    t = keep < x->shape[1] ? mf_slice(ctx, x, 1, x->shape[1] - keep, keep) : x;
    return t ? mf__dcopy(ctx, buf, t->data, (size_t)t->ne * sizeof(float)) : -1;
}

/* docs/math.md §6.4: the attention-reconstruction loss of layer l, mean((A(h', cm') - A(h', m'))^2) with
   h' = LN(h), m' = LN(mc), cm' = LN(cm) under the layer's LN_att, and A the layer's q/k/v
   projections + softmax(Q K^T / sqrt(dk)) V (no mask, positions, dropout or output projection).
   Every parameter is detached; h and mc must be constants: only cm (the compressor's output)
   carries gradient. */
static mf_tensor *mf__xl_ar_loss(mf_model *m, int l, mf_tensor *h, mf_tensor *mc, mf_tensor *cm) {
    mf_ctx *ctx = m->ctx;
    const mf_model_config *c = &m->cfg;
    const mf__layer *B = &m->layers[l];
    const mf__xl_layer *L = MF__XL_L(m, l);
    int H = c->n_heads, grad;
    float scale = 1.0f / sqrtf((float)(c->d_model / H)), eps = c->ln_eps;
    mf_tensor *g = mf_detach(ctx, B->ln1_w), *be = mf_detach(ctx, B->ln1_b), *wq = mf_detach(ctx, L->wq);
    mf_tensor *wk = mf_detach(ctx, L->wk), *wv = mf_detach(ctx, L->wv), *bv = mf_detach(ctx, L->bv);
    mf_tensor *q, *mn, *target, *cn;
    grad = mf_set_grad(ctx, 0); /* the query and the target: constants */
    q = mf__token_pack(ctx, mf_linear(ctx, mf_layernorm(ctx, h, g, be, eps), wq, NULL), 1, H);
    mn = mf_layernorm(ctx, mc, g, be, eps);
    target = mf_attention_layout(ctx, q, mf__token_pack(ctx, mf_linear(ctx, mn, wk, NULL), 1, H),
                                 mf__token_pack(ctx, mf_linear(ctx, mn, wv, bv), 1, H), scale, 0, 0.0f,
                                 MF_ATTN_TOKENS_MAJOR);
    mf_set_grad(ctx, grad);
    cn = mf_layernorm(ctx, cm, g, be, eps);
    return mf_mse(ctx, mf_attention_layout(ctx, q, mf__token_pack(ctx, mf_linear(ctx, cn, wk, NULL), 1, H),
                                           mf__token_pack(ctx, mf_linear(ctx, cn, wv, bv), 1, H), scale, 0, 0.0f,
                                           MF_ATTN_TOKENS_MAJOR), target);
}

/* after layer l's attention: its memories continue with x [B, T, D] (docs/math.md §5.5, 6.3), read
   and written where the view says */
static void mf__xl_update(mf_model *m, mf__xl_slot *s, int l, mf_tensor *x, int gen, const mf__xl_view *v) {
    mf_ctx *ctx = m->ctx;
    const mf_model_config *c = &m->cfg;
    const mf__xl_layer *L = MF__XL_L(m, l);
    struct mf__xl_state *xl = (struct mf__xl_state *)m->fam_state;
    int B = x->shape[0], T = x->shape[1], D = c->d_model, cap = s->cap, rate = c->compression_rate;
    int len = s->len[l], n = len + T, keep, cl = s->clen[l], ckeep = cl;
    mf_tensor *all; /* [mem ; x] [B, n, D], a constant in the arena (or x itself) */
    if (cap == 0) return; /* no memories: s->mem is NULL, no offset may be added to it */
    if (!(all = mf__xl_cat(ctx, mf__xl_wrap(ctx, v->mem, B, len, D), mf_detach(ctx, x)))) return;
    if (c->compressive && n > cap) {
        int nc = (n - cap + rate - 1) / rate, nold = nc * rate;
        mf_tensor *old = mf_slice(ctx, all, 1, 0, nold), *cm;                  /* the oldest nold rows */
        if (!old || !(cm = mf_conv1d(ctx, old, L->cmp_w, L->cmp_b, rate, 0))) return; /* [B, nc, D] */
        ckeep = cl + nc < c->c_mem_len ? cl + nc : c->c_mem_len; /* the last c_mem_len of [c_mem ; cm] */
        if (mf__xl_store(ctx, v->cmem_out + (int64_t)v->row0 * ckeep * D,
                         mf__xl_cat(ctx, mf__xl_wrap(ctx, v->cmem, B, cl, D), mf_detach(ctx, cm)), ckeep) < 0) return;
        if (!gen) {
            mf_tensor *ar = mf__xl_ar_loss(m, l, mf_detach(ctx, x), old, cm);
            if (!ar) return;
            xl->aux = xl->aux ? mf_add(ctx, xl->aux, ar) : ar;
            xl->aux_value += mf_item(ctx, ar); /* the host waits here on CUDA: one float per layer */
        }
        keep = n - nold; /* can be 0 when mem_len = compression_rate - 1 */
    } else {
        keep = n < cap ? n : cap;
        if (v->round && cl > 0 && /* the compressed memories stay: the round's copy of these rows too */
            mf__dcopy(ctx, v->cmem_out + (int64_t)v->row0 * cl * D, v->cmem, (size_t)B * cl * D * sizeof(float)) < 0) return;
    }
    /* the last keep rows of [mem ; x] */
    if (keep > 0 && mf__xl_store(ctx, v->mem_out + (int64_t)v->row0 * keep * D, all, keep) < 0) return;
    if (v->round) { mf__xl_round_done(m, s, l, v->row0, B, keep, ckeep); return; }
    s->len[l] = keep;
    s->clen[l] = ckeep;
}

static mf_tensor *mf__xl_mixer(mf_model *m, int l, mf_tensor *x, int pos0, int gen) {
    mf_ctx *ctx = m->ctx;
    const mf_model_config *c = &m->cfg;
    const mf__layer *BL = &m->layers[l];
    const mf__xl_layer *L = MF__XL_L(m, l);
    struct mf__xl_state *xl = (struct mf__xl_state *)m->fam_state;
    mf__xl_slot *s;
    mf__xl_view view;
    int B, T, D = c->d_model, H = c->n_heads, Mm, rows;
    mf_tensor *kv, *xn, *zq, *q, *k, *v, *o;
    if (!x || !xl) return NULL;
    B = x->shape[0]; T = x->shape[1];
    s = &xl->slot[gen ? 2 : xl->cur];
    if (!gen && l == 0) { xl->aux = NULL; xl->aux_value = 0; }
    if (gen && pos0 == 0 && l == 0) mf__xl_clear(m, s); /* a new generation */
    rows = s->rows ? s->rows : B;
    if (s->row0 + B > rows)
        return (mf_tensor *)mf__fail(ctx, "relative mixer: a call of %d rows at memory row %d of %d (mf_model_memory_rows) "
                                     "runs past the memory; the micro-batches must fit in its rows", B, s->row0, rows);
    if (mf__xl_prepare(m, s, rows) < 0 || mf__xl_view_of(m, s, l, B, &view) < 0) return NULL;
    kv = x;
    Mm = (c->compressive ? s->clen[l] : 0) + s->len[l];
    if (Mm > 0) { /* [c_mem ; mem ; x]: the memories are constants over the slot buffers */
        mf_tensor *cmem = c->compressive ? mf__xl_wrap(ctx, view.cmem, B, s->clen[l], D) : NULL;
        kv = mf_concat(ctx, mf__xl_cat(ctx, cmem, mf__xl_wrap(ctx, view.mem, B, s->len[l], D)), x, 1);
    }
    xn = mf_layernorm(ctx, kv, BL->ln1_w, BL->ln1_b, c->ln_eps);
    zq = Mm > 0 ? mf_slice(ctx, xn, 1, Mm, T) : xn;
    q = mf__split_heads(ctx, mf_linear(ctx, zq, L->wq, NULL), H);
    k = mf__split_heads(ctx, mf_linear(ctx, xn, L->wk, NULL), H);
    v = mf__split_heads(ctx, mf_linear(ctx, xn, L->wv, L->bv), H);
    o = m->probe ? mf__probe_attend(m, l, q, k, v, 1.0f / sqrtf((float)(D / H)), L->rel_u, L->rel_r, L->rel_s)
                 : mf_rel_attention(ctx, q, k, v, L->rel_u, L->rel_r, L->rel_s, 1.0f / sqrtf((float)(D / H)), c->attn_dropout);
    o = mf_linear(ctx, mf__merge_heads(ctx, o), L->wo, L->bo);
    if (o) mf__xl_update(m, s, l, x, gen, &view);
    return mf_ok(ctx) ? o : NULL;
}

static int mf__xl_held(const mf_model *m) {
    const struct mf__xl_state *xl = (const struct mf__xl_state *)m->fam_state;
    const mf__xl_slot *s = xl ? &xl->slot[xl->cur] : NULL;
    int l, held, most = 0;
    for (l = 0; s && s->B > 0 && l < m->cfg.n_layers; l++) {
        held = (m->cfg.compressive ? s->clen[l] : 0) + s->len[l];
        if (held > most) most = held;
    }
    return most;
}

static mf_tensor *mf__xl_aux_loss(mf_model *m) {
    struct mf__xl_state *xl = (struct mf__xl_state *)m->fam_state;
    return xl && mf_ok(m->ctx) ? xl->aux : NULL;
}

/* the memories of slots 0 and 1 (training, validation) and the selected slot, for checkpoints:
   "__state__.memory.slot" [1], and per slot s "__state__.memory.<s>.lengths" [1 + 2 L] (batch rows,
   len[l], clen[l]), "__state__.memory.<s>.mem.<l>" [B, len, D] and ".cmem.<l>" [B, clen, D] for the
   layers that hold some. The generation slot is not saved: generation empties it when it starts. */
static int mf__xl_state(mf_model *m, mf__state_io *io) {
    struct mf__xl_state *xl = (struct mf__xl_state *)m->fam_state;
    const mf_model_config *c = &m->cfg;
    int L = c->n_layers, D = c->d_model, mode = mf__state_mode(io), s, l, rc = 0;
    int32_t cur, *v = (int32_t *)mf__xmalloc((size_t)(1 + 2 * L) * sizeof(int32_t));
    char name[96];
    if (!xl || !v) { MF_FREE(v); return (mf__fail(m->ctx, "out of memory: model memories"), -1); }
    cur = xl->cur;
    for (s = 0; s < 2 && mode == MF__STATE_SAVE; s++)
        for (l = 0; l < L; l++)
            if (mf__xl_pending(&xl->slot[s], l)) {
                MF_FREE(v);
                return (mf__fail(m->ctx, "mf_model_save: the memories of slot %d are in the middle of a step (%d of %d rows "
                                 "updated: mf_model_memory_rows); save after the step's last micro-batch", s,
                                 xl->slot[s].nrows[l], xl->slot[s].B), -1);
            }
    if (mf__state_ints(io, "__state__.memory.slot", &cur, 1) < 0) rc = -1;
    else if (cur < 0 || cur > 1) rc = (mf__fail(m->ctx, "mf_model_load: memory slot %d is not 0 or 1 (a corrupt checkpoint)", (int)cur), -1);
    for (s = 0; s < 2 && rc == 0; s++) {
        mf__xl_slot *sl = &xl->slot[s];
        int B, bad = 0;
        v[0] = sl->B;
        for (l = 0; l < L; l++) { v[1 + l] = sl->len[l]; v[1 + L + l] = sl->clen[l]; }
        snprintf(name, sizeof name, "__state__.memory.%d.lengths", s);
        if (mf__state_ints(io, name, v, 1 + 2 * L) < 0) { rc = -1; break; }
        B = v[0];
        for (l = 0; l < L; l++)
            bad |= v[1 + l] < 0 || v[1 + l] > sl->cap || v[1 + L + l] < 0 || v[1 + L + l] > (c->compressive ? c->c_mem_len : 0) ||
                   ((v[1 + l] | v[1 + L + l]) && B < 1);
        if (B < 0 || bad) {
            rc = (mf__fail(m->ctx, "mf_model_load: the memories of slot %d do not fit this model (mem_len %d, c_mem_len %d): "
                           "a checkpoint of another config, or corrupt", s, c->mem_len, c->compressive ? c->c_mem_len : 0), -1);
            break;
        }
        if (mode == MF__STATE_APPLY) {
            mf__xl_clear(m, sl);
            if (B > 0 && mf__xl_prepare(m, sl, B) < 0) { rc = -1; break; }
        }
        for (l = 0; l < L && rc == 0; l++) {
            int shape[3];
            shape[0] = B; shape[2] = D;
            if ((shape[1] = v[1 + l]) > 0) {
                snprintf(name, sizeof name, "__state__.memory.%d.mem.%d", s, l);
                rc = mf__state_floats(io, name, mode == MF__STATE_CHECK ? NULL : sl->mem + (int64_t)l * B * sl->cap * D, 3, shape);
            }
            if (rc == 0 && (shape[1] = v[1 + L + l]) > 0) {
                snprintf(name, sizeof name, "__state__.memory.%d.cmem.%d", s, l);
                rc = mf__state_floats(io, name, mode == MF__STATE_CHECK ? NULL : sl->cmem + (int64_t)l * B * c->c_mem_len * D, 3, shape);
            }
        }
        if (rc == 0 && mode == MF__STATE_APPLY)
            for (l = 0; l < L; l++) { sl->len[l] = v[1 + l]; sl->clen[l] = v[1 + L + l]; }
    }
    if (rc == 0 && mode == MF__STATE_APPLY) xl->cur = cur;
    MF_FREE(v);
    return rc;
}

static int mf__xl_memory_slot(mf_model *m, int slot);
static void mf__xl_reset_memory(mf_model *m);
static void mf__xl_memory_rows(mf_model *m, int row0, int rows);
/* four projections; the three score terms and PV over [memories; x]; compressive: the compressor
   and the reconstruction loss's q(h), k/v(m), k/v(cm) and two attentions */
static double mf__xl_flops(const mf_model_config *c, int T, double keys) {
    double D = c->d_model, mem = c->mem_len, extra = 0;
    if (c->compressive) {
        mem += c->c_mem_len;
        extra = 2.0 * D * D + 2.0 * D * D + 4.0 * D * D * (1 + 1.0 / c->compression_rate) +
                2.0 * 2.0 * D * (T + (double)T / c->compression_rate);
    }
    return c->n_layers * (4 * 2.0 * D * D + 3.0 / 2.0 * 2.0 * 2.0 * D * (mem + keys) + extra);
}
static const mf__family mf__fam_xl = {
    "xl", sizeof(mf__xl_layer), MF__F(MEM_LEN) | MF__F(COMPRESSIVE) | MF__F(C_MEM_LEN) | MF__F(COMPRESSION_RATE) |
                                MF__F(ATTN_DROPOUT),
    mf__xl_check, mf__xl_make_layer, mf__xl_init, mf__xl_free, mf__xl_mixer, NULL, NULL, mf__xl_aux_loss, mf__xl_state,
    mf__xl_held, mf__xl_memory_slot, mf__xl_reset_memory, mf__xl_memory_rows, mf__xl_flops
};
/* the memories of a relative model, NULL for the other mixers */
static struct mf__xl_state *mf__xl_state_of(const mf_model *m) {
    return m && m->cfg.mixer == MF_MIXER_RELATIVE ? (struct mf__xl_state *)m->fam_state : NULL;
}
static int mf__xl_memory_slot(mf_model *m, int slot) {
    struct mf__xl_state *xl = mf__xl_state_of(m);
    int old;
    if (!xl) return 0;
    old = xl->cur;
    xl->cur = slot;
    return old;
}
static void mf__xl_reset_memory(mf_model *m) {
    struct mf__xl_state *xl = mf__xl_state_of(m);
    if (xl) mf__xl_clear(m, &xl->slot[xl->cur]);
}
static void mf__xl_memory_rows(mf_model *m, int row0, int rows) {
    struct mf__xl_state *xl = mf__xl_state_of(m);
    if (xl) { xl->slot[xl->cur].row0 = row0; xl->slot[xl->cur].rows = rows; }
}

MFDEF float mf_model_aux_loss(const mf_model *m) {
    struct mf__xl_state *xl = mf__xl_state_of(m);
    return xl ? xl->aux_value : 0.0f;
}
#else /* METAFORMER_NO_XL */
MFDEF float mf_model_aux_loss(const mf_model *m) { (void)m; return 0.0f; }
#endif /* METAFORMER_NO_XL */

/* ==== [mf:fastweights] ====================================================================== */
#ifndef METAFORMER_NO_FASTWEIGHTS /* the whole section: its ops, the family, its rows in [mf:mixers] */
/* Fast weights (DPFP features, delta rule) and linear attention (docs/math.md §7).

   Ops: mf_dpfp and mf_elu1 (the feature maps), mf_fast_weights and mf_linear_attention (the
   recurrences). Both recurrences are one kernel ("the core") over per-head state S:
       fast weights (delta):  u_t = beta_t (v_t - S_{t-1} k_t);  S_t = S_{t-1} + u_t k_t^T;  y_t = S_t q_t
       linear:                u_t = v_t;                          S_t = S_{t-1} + u_t k_t^T;  y_t = S_t q_t
   Normalised linear attention (elu + 1 features; DPFP's are sum-normalised already and skip this)
   also needs z_t = sum k and the denominator z_t . q_t: the core runs it with one more value column that is constant 1 (dvp = dv + 1), whose row of S is z and whose output is the
   denominator; y = num / (den + eps) happens after the core. The state is stored transposed,
   S^T [dd][dvp] (row j = feature j), so every per-token product is a broadcast-FMA along the value
   axis (no horizontal sums in the forward).

   Two exact forms of the core, both parallel over the B*H heads (MF__PARFOR-style OpenMP loop with
   per-thread scratch), reading the token-major [B, T, H, d] inputs in place:
   - recurrent (the oracle; generation): token by token, O(dd * dvp) per token; rows of S whose
     feature is 0 are skipped (DPFP: about 3/4 of them). The backward needs S_{t-1} at every step;
     running the recurrence backwards (S_{t-1} = S_t - u_t k_t^T with u_t depending on S_{t-1}) is
     not stable, so the forward keeps the state every MF__FW_CK tokens and the backward recomputes
     the states of one segment at a time. Memory: kept ceil(T / MF__FW_CK) * dd * dvp floats per
     head; scratch (MF__FW_CK + 4) * dd * dvp floats per thread.
   - chunkwise (training; DeltaNet, Yang et al. 2024, the WY / UT form): within a chunk of C tokens
     (rows), state S at its start,
         A = tril(diag(beta) K K^T, -1),  (I + A) [W, U_] = diag(beta) [K, V]   (forward substitution)
         U = U_ - W S^T,  Y = Q S^T + tril(Q K^T) U,  S <- S + U^T K
     (linear: U = V). Every product is a small dense product (mf__tile_mm register tiles: packing
     mf__sgemm_ws would cost more than it saves on 16 x 64 tiles); the only sequential part is the
     C x C triangular solve. Memory: kept the state at every chunk start in both layouts
     (2 ceil(T / C) * dd * dvp floats per head: the backward needs S and S^T) and [W, U_]
     (T * (dd + dvp)); the backward walks the chunks in reverse.
   Both give the same values up to float rounding (tests/test_fastweights.c: 1e-5 relative).
   On a CUDA context the ops run the GPU twins of both forms ([cu:fastweights] in
   metaformer_cuda.cuh: same form selection, same checkpoint interval MF__FW_CK, own layout of
   out->saved); the generation state (mf__rec_state) is then device memory. */

#define MF__FW_CK 32 /* recurrent backward: tokens between state checkpoints */
/* chunk_size 0 (automatic): chunkwise with chunks of MF__FW_AUTO_C from MF__FW_AUTO_T tokens on,
   recurrent below. Measured with bench/bench_fw_sweep.c (forward + backward of the op alone, one
   thread, AVX-512): both forms are O(T), so the ratio hardly moves with the length. With the bench
   model's heads (dk 32, DPFP d_dot 64) they are within +-10% of each other at every T >= 16 and
   the recurrent one wins below (T = 4: 1.4x, T = 8: 1.15x); with dk 64 (d_dot 128) chunks of 16
   are 1.3x faster from T = 8 and 1.45x from T = 16 on, linear attention's chunkwise form 1.25x
   from T = 8. Chunks of 16 beat 32 and 64 everywhere (the triangular solve and the masked halves
   of the chunk products grow with C). */
#define MF__FW_AUTO_C 16
#define MF__FW_AUTO_T 16

/* The row products of this family (dot products and axpys over rows of n floats) are mf__vdot and
   mf__vaxpy of [mf:platform], always called with the MF__TAIL_VEC tail order. */
/* ---- DPFP: x [..., dk] -> [..., 2 dk nu] ----------------------------------------------------------
   a = relu(concat(x, -x)); phi[(r-1) 2dk + j] = a[j] a[(j - r) mod 2dk]
   (labml's roll by +r; docs/math.md §7.1); out = phi / (sum phi + eps). saved: 1 / (sum phi + eps) per row;
   the backward rebuilds a from x. */
enum { MF__ARG_DPFP_NU };   /* iarg */
enum { MF__FARG_DPFP_EPS }; /* farg */
static float mf__dpfp_a(const float *x, int dk, int j) { /* relu(concat(x, -x))[j] */
    float v = j < dk ? x[j] : -x[j - dk];
    return v > 0 ? v : 0.0f;
}
static int mf__dpfp_shape(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *x = out->src[0];
    int dk = mf__last(x), nu = out->iarg[MF__ARG_DPFP_NU], shape[MF_MAX_DIMS], i;
    char s[64];
    if (nu < 1 || nu > 2 * dk - 1)
        return MF__SHAPE_FAIL("dpfp: nu %d must be in [1, 2 * dk - 1] = [1, %d] for x %s (a roll by 2 dk "
                              "repeats the roll by 0)", nu, 2 * dk - 1, mf_shape_str(x, s, 64));
    if ((int64_t)2 * dk * nu > 1 << 24)
        return MF__SHAPE_FAIL("dpfp: 2 * dk * nu = %lld features is too many (dk %d, nu %d)", (long long)2 * dk * nu, dk, nu);
    if (!(out->farg[MF__FARG_DPFP_EPS] >= 0.0f && out->farg[MF__FARG_DPFP_EPS] < 1.0f))
        return MF__SHAPE_FAIL("dpfp: eps %g must be in [0, 1) (labml: 1e-6)", (double)out->farg[MF__FARG_DPFP_EPS]);
    for (i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = 2 * dk * nu;
    mf__set_shape(out, x->ndim, shape);
    return 0;
}
static void mf__dpfp_forward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *X = out->src[0];
    int dk = mf__last(X), nu = out->iarg[MF__ARG_DPFP_NU], n2 = 2 * dk, dd = n2 * nu;
    int64_t rows = mf__rows(X), r;
    float eps = out->farg[MF__FARG_DPFP_EPS], *one = (float *)mf__alloc(ctx, (size_t)dd * sizeof(float));
    if (!one) return;
    for (r = 0; r < dd; r++) one[r] = 1.0f;
    out->saved = out->requires_grad ? (float *)mf__alloc(ctx, (size_t)rows * sizeof(float)) : NULL;
    if (out->requires_grad && !out->saved) return;
    MF__PARFOR(ctx, rows, 3.0 * dd)
    for (r = 0; r < rows; r++) {
        const float *x = X->data + r * dk;
        float *y = out->data + r * dd, sum = 0, inv, last;
        int s, j;
        for (j = 0; j < dk; j++) { y[j] = x[j] > 0 ? x[j] : 0.0f; y[dk + j] = x[j] < 0 ? -x[j] : 0.0f; } /* a in block 1 */
        for (s = nu; s >= 2; s--) /* the blocks r >= 2 read a from block 1 */
            for (j = 0; j < n2; j++) y[(s - 1) * n2 + j] = y[j] * y[j >= s ? j - s : j - s + n2];
        last = y[n2 - 1]; /* block 1 in place, from the top: a[j - 1] is still intact */
        for (j = n2 - 1; j >= 1; j--) y[j] *= y[j - 1];
        y[0] *= last;
        sum = mf__vdot(dd, y, one, MF__TAIL_VEC);
        inv = 1.0f / (sum + eps);
        if (out->saved) out->saved[r] = inv;
        for (j = 0; j < dd; j++) y[j] *= inv;
    }
}
/* one row of the backward for very wide rows (2 dk > MF__DPFP_ROW): a recomputed on the fly */
static void mf__dpfp_backward_row(const float *x, const float *y, const float *g, float *dx, int dk, int nu, float eps) {
    int n2 = 2 * dk, dd = n2 * nu, s, j, m;
    float sum = 0, gy = 0, inv;
    for (s = 1; s <= nu; s++)
        for (j = 0; j < n2; j++) sum += mf__dpfp_a(x, dk, j) * mf__dpfp_a(x, dk, j >= s ? j - s : j - s + n2);
    for (m = 0; m < dd; m++) gy += g[m] * y[m];
    inv = 1.0f / (sum + eps);
    for (j = 0; j < n2; j++) {
        float da = 0;
        if (mf__dpfp_a(x, dk, j) == 0.0f) continue; /* relu off (or x = 0): no gradient */
        for (s = 1; s <= nu; s++) {
            int jm = j >= s ? j - s : j - s + n2, jp = j + s < n2 ? j + s : j + s - n2;
            da += (g[(s - 1) * n2 + j] - gy) * mf__dpfp_a(x, dk, jm) + (g[(s - 1) * n2 + jp] - gy) * mf__dpfp_a(x, dk, jp);
        }
        if (j < dk) dx[j] += da * inv; else dx[j - dk] -= da * inv;
    }
}
#define MF__DPFP_ROW 512 /* 2 dk up to this: the backward keeps a row of a and da on the stack */
static void mf__dpfp_backward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *X = out->src[0];
    float *DX = mf__g(X), eps = out->farg[MF__FARG_DPFP_EPS];
    int dk = mf__last(X), nu = out->iarg[MF__ARG_DPFP_NU], n2 = 2 * dk, dd = n2 * nu;
    int64_t rows = mf__rows(X), r;
    if (!DX) return;
    MF__PARFOR(ctx, rows, 8.0 * dd)
    for (r = 0; r < rows; r++) {
        const float *x = X->data + r * dk, *y = out->data + r * dd, *g = out->grad + r * dd;
        float *dx = DX + r * dk, gy, inv;
        float a[MF__DPFP_ROW], da[MF__DPFP_ROW], p[MF__DPFP_ROW]; /* a = relu(concat(x, -x)), its gradient, dphi */
        int s, j;
        if (n2 > MF__DPFP_ROW) { mf__dpfp_backward_row(x, y, g, dx, dk, nu, eps); continue; }
        for (j = 0; j < dk; j++) { a[j] = x[j] > 0 ? x[j] : 0.0f; a[dk + j] = x[j] < 0 ? -x[j] : 0.0f; }
        gy = mf__vdot(dd, g, y, MF__TAIL_VEC);
        inv = out->saved[r]; /* 1 / (sum phi + eps) of the forward */
        for (j = 0; j < n2; j++) da[j] = 0.0f;
        /* out = phi / (S + eps): dphi_m = (g_m - sum_n g_n out_n) / (S + eps) (the 1 / (S + eps) comes
           last); phi[s][j] = a[j] a[j - s]: da[j] += dphi[s][j] a[j - s], da[j - s] += dphi[s][j] a[j] */
        for (s = 1; s <= nu; s++) { /* each loop on its own vectorises (no overlap inside one) */
            const float *gs = g + (s - 1) * n2;
            for (j = 0; j < n2; j++) p[j] = gs[j] - gy;
            for (j = s; j < n2; j++) da[j] += p[j] * a[j - s];
            for (j = 0; j < s; j++) da[j] += p[j] * a[j - s + n2];
            for (j = 0; j < n2 - s; j++) da[j] += p[j + s] * a[j + s];
            for (j = n2 - s; j < n2; j++) da[j] += p[j + s - n2] * a[j + s - n2];
        }
        for (j = 0; j < dk; j++) dx[j] += ((x[j] > 0 ? da[j] : 0.0f) - (x[j] < 0 ? da[dk + j] : 0.0f)) * inv;
    }
}
static const mf__op mf__op_dpfp = { "dpfp", 1, mf__dpfp_shape, mf__dpfp_forward, mf__dpfp_backward, MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_dpfp(mf_ctx *ctx, mf_tensor *x, int nu, float eps) {
    mf_tensor *t = mf__begin(ctx, &mf__op_dpfp, x, NULL, NULL, NULL);
    if (t) { t->iarg[MF__ARG_DPFP_NU] = nu; t->farg[MF__FARG_DPFP_EPS] = eps; }
    return mf__finish(ctx, t);
}


/* Token-major inputs put the rows of one head H * d floats apart: beyond what the hardware
   prefetcher follows, so the kernels ask for the rows MF__FW_PF tokens ahead themselves
   (mf__prefetch_row). */
#define MF__FW_PF 4
/* the j < m with w[j] != 0, into idx (m + 16 ints; DPFP features are mostly zeros: a product of
   two relus); returns their number. AVX-512: 16 at a time with a compress. */
static int mf__fw_nonzero(int m, const float *w, int *idx) {
    int j = 0, n = 0;
#if MF__AW == 16
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (; j + 16 <= m; j += 16) {
        __mmask16 nz = _mm512_cmp_ps_mask(_mm512_loadu_ps(w + j), _mm512_setzero_ps(), _CMP_NEQ_UQ);
        unsigned bits = nz;
        /* compress in a register, store all 16 (idx has 16 ints of slack): a compressing store to
           memory is microcoded and slow on Intel */
        _mm512_storeu_si512((void *)(idx + n), _mm512_maskz_compress_epi32(nz, _mm512_add_epi32(iota, _mm512_set1_epi32(j))));
        bits = bits - ((bits >> 1) & 0x5555u); /* popcount of 16 bits */
        bits = (bits & 0x3333u) + ((bits >> 2) & 0x3333u);
        bits = (bits + (bits >> 4)) & 0x0f0fu;
        n += (int)((bits + (bits >> 8)) & 0x1fu);
    }
#endif
    for (; j < m; j++) { /* on the bits: +-0 -> 0 (cheaper than a float compare) */
        uint32_t b;
        memcpy(&b, w + j, sizeof b);
        idx[n] = j;
        n += (b << 1) != 0;
    }
    return n;
}
/* Rows j of M [.][n] listed in idx (nz of them), in blocks of up to 4 vectors of columns kept in
   registers (the last one masked): acc (+)= sum_j w[j] M[j] (mf__fw_rows_sum), or M[j] += w[j] u
   (mf__fw_rows_axpy). One loop per block width, so the row loop has no branches. */
#define MF__FW_LDM(p, v, nv, mk) ((v) == (nv) - 1 ? mf__av_loadm((p) + (v) * MF__AW, mk) : mf__av_load((p) + (v) * MF__AW))
#define MF__FW_STM(p, v, nv, mk, x) \
    do { if ((v) == (nv) - 1) mf__av_storem((p) + (v) * MF__AW, mk, x); else mf__av_store((p) + (v) * MF__AW, x); } while (0)
#define MF__FW_SUM_LOOP(NV) \
    for (i = 0; i < nz; i++) { \
        const float *r = M + (size_t)idx[i] * n + c0; \
        mf__av x = mf__av_set1(w[idx[i]]); \
        a0 = mf__av_fma(x, MF__FW_LDM(r, 0, NV, mk), a0); \
        if (NV > 1) a1 = mf__av_fma(x, MF__FW_LDM(r, 1, NV, mk), a1); \
        if (NV > 2) a2 = mf__av_fma(x, MF__FW_LDM(r, 2, NV, mk), a2); \
        if (NV > 3) a3 = mf__av_fma(x, MF__FW_LDM(r, 3, NV, mk), a3); \
    }
#define MF__FW_AXPY_LOOP(NV) \
    for (i = 0; i < nz; i++) { \
        float *r = M + (size_t)idx[i] * n + c0; \
        mf__av x = mf__av_set1(w[idx[i]]); \
        MF__FW_STM(r, 0, NV, mk, mf__av_fma(x, u0, MF__FW_LDM(r, 0, NV, mk))); \
        if (NV > 1) MF__FW_STM(r, 1, NV, mk, mf__av_fma(x, u1, MF__FW_LDM(r, 1, NV, mk))); \
        if (NV > 2) MF__FW_STM(r, 2, NV, mk, mf__av_fma(x, u2, MF__FW_LDM(r, 2, NV, mk))); \
        if (NV > 3) MF__FW_STM(r, 3, NV, mk, mf__av_fma(x, u3, MF__FW_LDM(r, 3, NV, mk))); \
    }
static void mf__fw_rows_sum(int nz, const int *idx, const float *w, const float *M, int n, float *acc, int add) {
    int c0, i;
    for (c0 = 0; c0 < n; c0 += 4 * MF__AW) {
        int wdt = n - c0 < 4 * MF__AW ? n - c0 : 4 * MF__AW, nv = (wdt + MF__AW - 1) / MF__AW;
        mf__am mk = mf__av_mask(wdt - (nv - 1) * MF__AW);
        mf__av a0 = mf__av_zero(), a1 = a0, a2 = a0, a3 = a0;
        float *o = acc + c0;
        switch (nv) {
        case 1: MF__FW_SUM_LOOP(1) break;
        case 2: MF__FW_SUM_LOOP(2) break;
        case 3: MF__FW_SUM_LOOP(3) break;
        default: MF__FW_SUM_LOOP(4) break;
        }
        if (add) {
            a0 = mf__av_add(a0, MF__FW_LDM(o, 0, nv, mk));
            if (nv > 1) a1 = mf__av_add(a1, MF__FW_LDM(o, 1, nv, mk));
            if (nv > 2) a2 = mf__av_add(a2, MF__FW_LDM(o, 2, nv, mk));
            if (nv > 3) a3 = mf__av_add(a3, MF__FW_LDM(o, 3, nv, mk));
        }
        MF__FW_STM(o, 0, nv, mk, a0);
        if (nv > 1) MF__FW_STM(o, 1, nv, mk, a1);
        if (nv > 2) MF__FW_STM(o, 2, nv, mk, a2);
        if (nv > 3) MF__FW_STM(o, 3, nv, mk, a3);
    }
}
static void mf__fw_rows_axpy(int nz, const int *idx, const float *w, const float *u, float *M, int n) {
    int c0, i;
    for (c0 = 0; c0 < n; c0 += 4 * MF__AW) {
        int wdt = n - c0 < 4 * MF__AW ? n - c0 : 4 * MF__AW, nv = (wdt + MF__AW - 1) / MF__AW;
        mf__am mk = mf__av_mask(wdt - (nv - 1) * MF__AW);
        mf__av u0 = MF__FW_LDM(u + c0, 0, nv, mk), u1 = mf__av_zero(), u2 = u1, u3 = u1;
        if (nv > 1) u1 = MF__FW_LDM(u + c0, 1, nv, mk);
        if (nv > 2) u2 = MF__FW_LDM(u + c0, 2, nv, mk);
        if (nv > 3) u3 = MF__FW_LDM(u + c0, 3, nv, mk);
        switch (nv) {
        case 1: MF__FW_AXPY_LOOP(1) break;
        case 2: MF__FW_AXPY_LOOP(2) break;
        case 3: MF__FW_AXPY_LOOP(3) break;
        default: MF__FW_AXPY_LOOP(4) break;
        }
    }
}
#undef MF__FW_LDM
#undef MF__FW_STM
#undef MF__FW_SUM_LOOP
#undef MF__FW_AXPY_LOOP
/* dst[c][r] = src[r][c] for r < rows, c < cols (row strides lds, ldd) */
static void mf__fw_transpose(const float *src, int64_t lds, int rows, int cols, float *dst, int ldd) {
    int r, c;
    for (r = 0; r < rows; r++)
        for (c = 0; c < cols; c++) dst[(int64_t)c * ldd + r] = src[r * lds + c];
}

/* ---- the core, one head ---------------------------------------------------------------------------
   Token t of the head: q, k rows q + t lq, k + t lq ([dd]); v + t lv ([dv]); beta[t lb] (delta
   rule) or beta NULL (linear). The core sees dvp = dv or dv + 1 value columns (the ones column of
   linear); its outputs y and their gradients dy have dvp columns (row strides ldy, ldg). The
   gradients dq, dk, dv, dbeta have the inputs' strides. */
typedef struct mf__fwh {
    int T, dd, dv, dvp;
    int bf16; /* the chunkwise form's products on bf16 operands (mf__attn_bf16: MF_PREC_BF16 on a CPU) */
    int64_t lq, lv, lb;
    const float *q, *k, *v, *beta;
} mf__fwh;

static void mf__fw_prefetch_token(const mf__fwh *h, int t) {
    mf__prefetch_row(h->q + t * h->lq, h->dd);
    mf__prefetch_row(h->k + t * h->lq, h->dd);
    mf__prefetch_row(h->v + t * h->lv, h->dv);
    if (h->beta) MF__PREFETCH(h->beta + t * h->lb);
}
static void mf__fw_load_v(const mf__fwh *h, int t, float *row) { /* v_t, then 1 for linear */
    memcpy(row, h->v + t * h->lv, (size_t)h->dv * sizeof(float));
    if (h->dvp > h->dv) row[h->dv] = 1.0f;
}

/* Recurrent forward: S [dd][dvp] holds the state (in: start, out: end); ck (NULL: none) gets the
   state before tokens 0, MF__FW_CK, 2 MF__FW_CK, ...; y rows of ldy; work: dvp floats + 2 dd + 32 ints. */
static void mf__fw_rec_fwd(const mf__fwh *h, float *S, float *ck, float *y, int64_t ldy, float *work) {
    int t, c, dd = h->dd, dvp = h->dvp, *ik = (int *)(work + dvp), *iq = ik + dd + 16;
    size_t ss = (size_t)dd * dvp;
    float *u = work;
    for (t = 0; t < h->T; t++) {
        const float *kt = h->k + t * h->lq, *qt = h->q + t * h->lq;
        float *yt = y + t * ldy;
        int nk, nq;
        if (t + MF__FW_PF < h->T) mf__fw_prefetch_token(h, t + MF__FW_PF);
        nk = mf__fw_nonzero(dd, kt, ik);
        nq = mf__fw_nonzero(dd, qt, iq);
        if (ck && t % MF__FW_CK == 0) memcpy(ck + (size_t)(t / MF__FW_CK) * ss, S, ss * sizeof(float));
        mf__fw_load_v(h, t, u);
        if (h->beta) { /* u = beta (v - S k), the value to write; yt holds S k meanwhile */
            float b = h->beta[t * h->lb];
            mf__fw_rows_sum(nk, ik, kt, S, dvp, yt, 0);
            for (c = 0; c < dvp; c++) u[c] = b * (u[c] - yt[c]);
        }
        mf__fw_rows_axpy(nk, ik, kt, u, S, dvp);   /* write first */
        mf__fw_rows_sum(nq, iq, qt, S, dvp, yt, 0); /* then read */
    }
}
static size_t mf__fw_rec_work(int dd, int dvp) { /* floats of scratch per thread of mf__fw_rec_bwd */
    return (size_t)(MF__FW_CK + 4) * dd * dvp + (size_t)(2 * MF__FW_CK + 2) * dvp + 2 * (size_t)dd + dvp + 64;
}
/* Recurrent backward from the checkpoints ck: dy rows of ldg; ADDS dq, dk, dv and dbeta (each may
   be NULL). Per segment of MF__FW_CK tokens, from the last: recompute the states S_{t-1} of the
   segment from its checkpoint, then walk it backwards carrying dS = dL/dS_t:
       dq_t = S_t^T dy_t,  dS += dy_t q_t^T,  du = dS k_t,  dk_t = dS^T u_t
       delta: dvbar = -beta du;  dk_t += S_{t-1}^T dvbar;  dS += dvbar k_t^T (-> dL/dS_{t-1});
              dv_t = beta du;  dbeta_t = du . (v_t - S_{t-1} k_t)
       linear: dv_t = du
   dq and dk reduce over the value axis, du and S k over the feature axis, so the states are kept
   in both layouts: S^T [dd][dvp] (sparse rows: the zero features of DPFP are skipped) for S k and
   du, S [dvp][dd] for dq and dk (broadcast-FMA along d_dot, no horizontal sums). The segment's
   S_{t-1} are stored as [dvp][dd]. */
static void mf__fw_rec_bwd(const mf__fwh *h, const float *ck, const float *dy, int64_t ldg, float *dq,
                           float *dk, float *dv, float *db, float *work) {
    int dd = h->dd, dvp = h->dvp, T = h->T, nseg = (T + MF__FW_CK - 1) / MF__FW_CK, seg, t, c;
    size_t ss = (size_t)dd * dvp;
    float *dS = work, *dSn = dS + ss, *Sr = dSn + ss, *Snr = Sr + ss, *Snp = Snr + ss;
    float *U = Snp + MF__FW_CK * ss, *R = U + (size_t)MF__FW_CK * dvp, *du = R + (size_t)MF__FW_CK * dvp;
    float *dvb = du + dvp;
    int *ik = (int *)(dvb + dvp), *iq = ik + dd + 16, *id = iq + dd + 16;
    for (c = 0; c < dvp; c++) id[c] = c; /* every row */
    memset(dS, 0, 2 * ss * sizeof(float));
    for (seg = nseg - 1; seg >= 0; seg--) {
        int t0 = seg * MF__FW_CK, t1 = t0 + MF__FW_CK < T ? t0 + MF__FW_CK : T;
        memcpy(Sr, ck + (size_t)seg * ss, ss * sizeof(float));
        mf__fw_transpose(Sr, dvp, dd, dvp, Snr, dd);
        for (t = t0; t < t1; t++) { /* Snp[i] = S_{t-1} ([dvp][dd]), U[i] = u_t, R[i] = v_t - S_{t-1} k_t */
            int i = t - t0, nk;
            const float *kt = h->k + t * h->lq;
            float *u = U + (size_t)i * dvp, *r = R + (size_t)i * dvp;
            if (t + MF__FW_PF < t1) mf__fw_prefetch_token(h, t + MF__FW_PF);
            nk = mf__fw_nonzero(dd, kt, ik);
            mf__fw_load_v(h, t, r);
            memcpy(Snp + i * ss, Snr, ss * sizeof(float));
            if (h->beta) {
                float b = h->beta[t * h->lb];
                mf__fw_rows_sum(nk, ik, kt, Sr, dvp, u, 0);
                for (c = 0; c < dvp; c++) { r[c] -= u[c]; u[c] = b * r[c]; }
            } else memcpy(u, r, (size_t)dvp * sizeof(float));
            if (t + 1 < t1) {
                mf__fw_rows_axpy(nk, ik, kt, u, Sr, dvp);
                mf__fw_rows_axpy(dvp, id, u, kt, Snr, dd);
            }
        }
        for (t = t1 - 1; t >= t0; t--) {
            int i = t - t0, nk, nq;
            const float *kt = h->k + t * h->lq, *qt = h->q + t * h->lq, *g = dy + t * ldg;
            const float *Sn = Snp + i * ss, *u = U + (size_t)i * dvp;
            float ug = mf__vdot(dvp, u, g, MF__TAIL_VEC), b = h->beta ? h->beta[t * h->lb] : 1.0f;
            nk = mf__fw_nonzero(dd, kt, ik);
            nq = mf__fw_nonzero(dd, qt, iq);
            if (dq) { /* S_t^T g = S_{t-1}^T g + k (u . g) */
                mf__fw_rows_sum(dvp, id, g, Sn, dd, dq + t * h->lq, 1);
                mf__vaxpy(dd, ug, kt, dq + t * h->lq, MF__TAIL_VEC);
            }
            mf__fw_rows_axpy(nq, iq, qt, g, dS, dvp);      /* dS = dL/dS_t, both layouts */
            mf__fw_rows_axpy(dvp, id, g, qt, dSn, dd);
            mf__fw_rows_sum(nk, ik, kt, dS, dvp, du, 0);
            if (dk) mf__fw_rows_sum(dvp, id, u, dSn, dd, dk + t * h->lq, 1);
            if (h->beta) {
                for (c = 0; c < dvp; c++) dvb[c] = -b * du[c];
                if (dk) mf__fw_rows_sum(dvp, id, dvb, Sn, dd, dk + t * h->lq, 1);
                mf__fw_rows_axpy(nk, ik, kt, dvb, dS, dvp); /* dS = dL/dS_{t-1} */
                mf__fw_rows_axpy(dvp, id, dvb, kt, dSn, dd);
                if (db) db[t * h->lb] += mf__vdot(dvp, du, R + (size_t)i * dvp, MF__TAIL_VEC);
            }
            if (dv) for (c = 0; c < h->dv; c++) dv[t * h->lv + c] += b * du[c];
        }
    }
}

/* floats of scratch per thread of the chunkwise forward / backward (chunk C); bf16: and the bf16
   copies of the chunk products' operands at its end (mf__fw_bf16_scratch) */
static size_t mf__fw_chunk_work(int C, int dd, int dvp, int bf16) {
    size_t ldx = (size_t)dd + dvp;
    return (size_t)dd * C + 4 * (size_t)C * C + 5 * (size_t)C * dvp + 2 * (size_t)C * dd + 2 * ldx * C
           + 2 * (size_t)dd * dvp + 2 * (size_t)C + 64
           + (bf16 ? 3 * (size_t)C * dd + 4 * (size_t)dd * dvp + (size_t)C * dvp + (size_t)C * ldx : 0);
}
/* The bf16 copies of a chunk's operands (Q, K, W rows [C][dd], the states S^T, S and dL/dS in both
   layouts, dY [C][dvp], G [C][dd + dvp]) in the scratch after the fp32 kernels' (docs/math.md §22.5:
   the operands rounded once per chunk where they are loaded, the states and every sum fp32) */
typedef struct mf__fw_rnd { float *q, *k, *w, *s, *sn, *ds, *dsn, *g, *gx; } mf__fw_rnd;
static mf__fw_rnd mf__fw_bf16_scratch(float *work, int C, int dd, int dvp) {
    mf__fw_rnd b;
    size_t ss = (size_t)dd * dvp;
    b.q = work + mf__fw_chunk_work(C, dd, dvp, 0); b.k = b.q + (size_t)C * dd; b.w = b.k + (size_t)C * dd;
    b.s = b.w + (size_t)C * dd; b.sn = b.s + ss; b.ds = b.sn + ss; b.dsn = b.ds + ss;
    b.g = b.dsn + ss; b.gx = b.g + (size_t)C * dvp;
    return b;
}
/* rows t0 .. t0 + n - 1 of v (+ the ones column) into Vb [n][dvp], K^T into Kt [dd][n] */
static void mf__fw_chunk_load(const mf__fwh *h, int t0, int n, float *Vb, float *Kt) {
    int i;
    for (i = 0; i < n; i++) mf__fw_load_v(h, t0 + i, Vb + (size_t)i * h->dvp);
    mf__fw_transpose(h->k + t0 * h->lq, h->lq, n, h->dd, Kt, n);
}
/* (I + A) X = diag(beta) [K, V] by forward substitution, A[i][j] = beta_i Gm[i][j] for j < i;
   X [n][dd + dvp]; w: n floats of scratch, id: 0 .. n-1 */
static void mf__fw_chunk_solve(const mf__fwh *h, int t0, int n, const float *Gm, const float *Vb, float *X,
                               float *w, const int *id) {
    int i, j, dd = h->dd, dvp = h->dvp, ldx = dd + dvp;
    for (i = 0; i < n; i++) {
        float b = h->beta[(t0 + i) * h->lb], *xi = X + (size_t)i * ldx;
        const float *ki = h->k + (t0 + i) * h->lq;
        for (j = 0; j < dd; j++) xi[j] = b * ki[j];
        for (j = 0; j < dvp; j++) xi[dd + j] = b * Vb[(size_t)i * dvp + j];
        for (j = 0; j < i; j++) w[j] = -b * Gm[(size_t)i * n + j];
        mf__fw_rows_sum(i, id, w, X, ldx, xi, 1);                    /* x_i -= sum_j A[i][j] x_j */
    }
}
/* U = U_ - W S^T for the chunk ([W, U_] = X rows, S^T [dd][dvp]; the product reads W's rows from W,
   ldw floats apart: X's, or their bf16 copy) */
static void mf__fw_chunk_u(int n, int dd, int dvp, const float *X, const float *W, int ldw, const float *S, float *U) {
    int i, c, ldx = dd + dvp;
    mf__tile_mm(n, dvp, dd, W, ldw, 1, S, dvp, U, dvp, 0);
    for (i = 0; i < n; i++)
        for (c = 0; c < dvp; c++) U[(size_t)i * dvp + c] = X[(size_t)i * ldx + dd + c] - U[(size_t)i * dvp + c];
}
static void mf__fw_tril(float *P, int n) { /* zero P[i][j] for j > i */
    int i, j;
    for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) P[(size_t)i * n + j] = 0.0f;
}

/* Chunkwise forward, chunks of C: S [dd][dvp] (S^T; in: start, out: end). For the backward (st not
   NULL): st gets S^T at every chunk start [nc][dd][dvp] and stn the same states as S [nc][dvp][dd]
   (kept up to date with one more product per chunk instead of transposing them there), X (delta)
   gets [W, U_] [T][dd + dvp]. */
static void mf__fw_chunk_fwd(const mf__fwh *h, int C, float *S, float *st, float *stn, float *X, float *y,
                             int64_t ldy, float *work) {
    int dd = h->dd, dvp = h->dvp, T = h->T, nc = (T + C - 1) / C, c, i, ldx = dd + dvp, lq = (int)h->lq;
    size_t ss = (size_t)dd * dvp;
    float *Kt = work, *P = Kt + (size_t)dd * C, *Vb = P + (size_t)C * C, *U = Vb + (size_t)C * dvp;
    float *Xs = U + (size_t)C * dvp, *Sn = Xs + (size_t)C * ldx, *w = Sn + ss;
    int *id = (int *)(w + C);
    mf__fw_rnd bf = mf__fw_bf16_scratch(work, C, dd, dvp);
    for (i = 0; i < C; i++) id[i] = i;
    if (st) mf__fw_transpose(S, dvp, dd, dvp, Sn, dd);
    for (c = 0; c < nc; c++) {
        int t0 = c * C, n = T - t0 < C ? T - t0 : C, lk = lq;
        const float *K = h->k + t0 * h->lq, *Q = h->q + t0 * h->lq, *Sb = S;
        float *Uc = Vb, *Y = y + t0 * ldy;
        if (st) {
            memcpy(st + (size_t)c * ss, S, ss * sizeof(float));
            memcpy(stn + (size_t)c * ss, Sn, ss * sizeof(float));
        }
        for (i = t0 + C; i < T && i < t0 + 2 * C; i++) mf__fw_prefetch_token(h, i); /* the next chunk */
        mf__fw_chunk_load(h, t0, n, Vb, Kt);
        if (h->bf16) { /* the operands in bf16 (the fp32 rows stay for the solve) */
            K = mf__bf16_rows(bf.k, K, lq, n, dd); Q = mf__bf16_rows(bf.q, Q, lq, n, dd); lk = dd;
            mf__bf16_rows(Kt, Kt, n, dd, n);
            Sb = mf__bf16_rows(bf.s, S, dvp, dd, dvp);
        }
        if (h->beta) {
            float *Xc = X ? X + (int64_t)t0 * ldx : Xs;
            mf__tile_mm(n, n, dd, K, lk, 1, Kt, n, P, n, 0);                  /* Gm = K K^T */
            mf__fw_chunk_solve(h, t0, n, P, Vb, Xc, w, id);
            if (h->bf16) mf__fw_chunk_u(n, dd, dvp, Xc, mf__bf16_rows(bf.w, Xc, ldx, n, dd), dd, Sb, U);
            else mf__fw_chunk_u(n, dd, dvp, Xc, Xc, ldx, S, U);
            Uc = U;
        }
        mf__tile_mm(n, dvp, dd, Q, lk, 1, Sb, dvp, Y, (int)ldy, 0);          /* Y = Q S^T */
        mf__tile_mm(n, n, dd, Q, lk, 1, Kt, n, P, n, 0);                      /* P = tril(Q K^T) */
        mf__fw_tril(P, n);
        if (h->bf16) { mf__bf16_rows(P, P, n, n, n); mf__bf16_rows(Uc, Uc, dvp, n, dvp); }
        mf__tile_mm(n, dvp, n, P, n, 1, Uc, dvp, Y, (int)ldy, 1);            /* Y += P U */
        mf__tile_mm(dd, dvp, n, K, 1, lk, Uc, dvp, S, dvp, 1);                /* S^T += K^T U */
        if (st) mf__tile_mm(dvp, dd, n, Uc, 1, dvp, K, lk, Sn, dd, 1);        /* S += U^T K */
    }
}

/* Chunkwise backward (the forward's st, stn and X): dy rows of ldg; ADDS dq, dk, dv, dbeta (each
   may be NULL). Per chunk, from the last, with dS = dL/dS^T at the chunk's end (kept in both
   layouts, dS [dd][dvp] and dSn [dvp][dd], like the states):
     from S' = S + U^T K:      dU = K dS,  dK = U dS^T
     from Y = Q S^T + P U:     dQ = dY S,  dP = tril(dY U^T),  dU += P^T dY,  dQ += dP K,  dK += dP^T Q,
                               dS += Q^T dY
     delta, U = U_ - W S^T:    dW = -dU S,  dS += -W^T dU
           (I + A) X = B:      G = (I + A)^-T [dW, dU] (back substitution), dB = G, dA = -tril(G X^T, -1)
           B = diag(beta)[K,V]: dK += beta G_K,  dV += beta G_V,  dbeta += G . [K, V]
           A = diag(beta) tril(K K^T, -1):  E = diag(beta) dA,  dK += E K + E^T K,  dbeta += rowsum(dA * K K^T)
     linear:                   dV = dU */
static void mf__fw_chunk_bwd(const mf__fwh *h, int C, const float *st, const float *stn, const float *X,
                             const float *dy, int64_t ldg, float *dq, float *dk, float *dv, float *db, float *work) {
    int dd = h->dd, dvp = h->dvp, T = h->T, nc = (T + C - 1) / C, c, i, j, ldx = dd + dvp;
    int lq = (int)h->lq, lg = (int)ldg;
    size_t ss = (size_t)dd * dvp;
    float *Kt = work, *P = Kt + (size_t)dd * C, *dP = P + (size_t)C * C, *Gm = dP + (size_t)C * C;
    float *D = Gm + (size_t)C * C, *Vb = D + (size_t)C * C, *U = Vb + (size_t)C * dvp, *dU = U + (size_t)C * dvp;
    float *dUn = dU + (size_t)C * dvp, *Ut = dUn + (size_t)C * dvp, *dQc = Ut + (size_t)dvp * C;
    float *dKc = dQc + (size_t)C * dd, *dX = dKc + (size_t)C * dd, *Xt = dX + (size_t)C * ldx;
    float *dS = Xt + (size_t)ldx * C, *dSn = dS + ss, *w = dSn + ss;
    int *id = (int *)(w + C);
    mf__fw_rnd bf = mf__fw_bf16_scratch(work, C, dd, dvp);
    for (i = 0; i < C; i++) id[i] = i;
    memset(dS, 0, 2 * ss * sizeof(float));
    for (c = nc - 1; c >= 0; c--) {
        int t0 = c * C, n = T - t0 < C ? T - t0 : C, lk = lq, lgb = lg, ldw = ldx;
        const float *K = h->k + t0 * h->lq, *Q = h->q + t0 * h->lq, *G = dy + t0 * ldg;
        const float *S = st + (size_t)c * ss, *Sn = stn + (size_t)c * ss;
        const float *Xc = h->beta ? X + (int64_t)t0 * ldx : NULL, *Kb = K, *Qb = Q, *Gb = G, *Wb = Xc;
        const float *Sb = S, *Snb = Sn, *dSb = dS, *dSnb = dSn;
        float *Uc = Vb;
        for (i = t0 - C; i >= 0 && i < t0; i++) mf__fw_prefetch_token(h, i); /* the next chunk (backwards) */
        mf__fw_chunk_load(h, t0, n, Vb, Kt);
        if (h->bf16) { /* the operands in bf16; the states and every sum stay fp32 */
            Kb = mf__bf16_rows(bf.k, K, lq, n, dd); Qb = mf__bf16_rows(bf.q, Q, lq, n, dd); lk = dd;
            Gb = mf__bf16_rows(bf.g, G, lg, n, dvp); lgb = dvp;
            mf__bf16_rows(Kt, Kt, n, dd, n);
            Sb = mf__bf16_rows(bf.s, S, dvp, dd, dvp); Snb = mf__bf16_rows(bf.sn, Sn, dd, dvp, dd);
            dSb = mf__bf16_rows(bf.ds, dS, dvp, dd, dvp); dSnb = mf__bf16_rows(bf.dsn, dSn, dd, dvp, dd);
            if (Xc) { Wb = mf__bf16_rows(bf.w, Xc, ldx, n, dd); ldw = dd; }
        }
        if (h->beta) {
            mf__tile_mm(n, n, dd, Kb, lk, 1, Kt, n, Gm, n, 0);
            mf__fw_chunk_u(n, dd, dvp, Xc, Wb, ldw, Sb, U);
            Uc = U;
        }
        if (h->bf16) mf__bf16_rows(Uc, Uc, dvp, n, dvp); /* (read only by products from here on) */
        mf__fw_transpose(Uc, dvp, n, dvp, Ut, n);                      /* U^T [dvp][n] */
        mf__tile_mm(n, dvp, dd, Kb, lk, 1, dSb, dvp, dU, dvp, 0);      /* dU = K dS */
        mf__tile_mm(n, dd, dvp, Uc, dvp, 1, dSnb, dd, dKc, dd, 0);     /* dK = U dS^T */
        mf__tile_mm(n, dd, dvp, Gb, lgb, 1, Snb, dd, dQc, dd, 0);      /* dQ = dY S */
        mf__tile_mm(n, n, dd, Qb, lk, 1, Kt, n, P, n, 0);              /* P = tril(Q K^T) */
        mf__fw_tril(P, n);
        mf__tile_mm(n, n, dvp, Gb, lgb, 1, Ut, n, dP, n, 0);           /* dP = tril(dY U^T) */
        mf__fw_tril(dP, n);
        if (h->bf16) { mf__bf16_rows(P, P, n, n, n); mf__bf16_rows(dP, dP, n, n, n); }
        mf__tile_mm(n, dvp, n, P, 1, n, Gb, lgb, dU, dvp, 1);          /* dU += P^T dY */
        mf__tile_mm(n, dd, n, dP, n, 1, Kb, lk, dQc, dd, 1);           /* dQ += dP K */
        mf__tile_mm(n, dd, n, dP, 1, n, Qb, lk, dKc, dd, 1);           /* dK += dP^T Q */
        mf__tile_mm(dd, dvp, n, Qb, 1, lk, Gb, lgb, dS, dvp, 1);       /* dS += Q^T dY (both layouts) */
        mf__tile_mm(dvp, dd, n, Gb, 1, lgb, Qb, lk, dSn, dd, 1);
        if (h->beta) {
            for (i = 0; i < n * dvp; i++) dUn[i] = -dU[i];
            if (h->bf16) mf__bf16_rows(dUn, dUn, dvp, n, dvp);
            mf__tile_mm(n, dd, dvp, dUn, dvp, 1, Snb, dd, dX, ldx, 0); /* dW = -dU S */
            for (i = 0; i < n; i++) memcpy(dX + (size_t)i * ldx + dd, dU + (size_t)i * dvp, (size_t)dvp * sizeof(float));
            mf__tile_mm(dd, dvp, n, Wb, 1, ldw, dUn, dvp, dS, dvp, 1); /* dS += -W^T dU (both layouts) */
            mf__tile_mm(dvp, dd, n, dUn, 1, dvp, Wb, ldw, dSn, dd, 1);
            for (i = n - 2; i >= 0; i--) {                              /* G = (I + A)^-T dX, in place */
                for (j = i + 1; j < n; j++) w[j] = -h->beta[(t0 + j) * h->lb] * Gm[(size_t)j * n + i];
                mf__fw_rows_sum(n - 1 - i, id + i + 1, w, dX, ldx, dX + (size_t)i * ldx, 1);
            }
            mf__fw_transpose(Xc, ldx, n, ldx, Xt, n);
            if (h->bf16) mf__bf16_rows(Xt, Xt, n, ldx, n);
            mf__tile_mm(n, n, ldx, h->bf16 ? mf__bf16_rows(bf.gx, dX, ldx, n, ldx) : dX, ldx, 1, Xt, n, D, n,
                        0);                                             /* D = G X^T, dA = -D */
            for (i = 0; i < n; i++) {
                const float *gi = dX + (size_t)i * ldx;
                float b = h->beta[(t0 + i) * h->lb];
                float acc = mf__vdot(dd, gi, K + i * h->lq, MF__TAIL_VEC) + mf__vdot(dvp, gi + dd, Vb + (size_t)i * dvp, MF__TAIL_VEC);
                for (j = 0; j < i; j++) acc -= D[(size_t)i * n + j] * Gm[(size_t)i * n + j];
                if (db) db[(t0 + i) * h->lb] += acc;
                mf__vaxpy(dd, b, gi, dKc + (size_t)i * dd, MF__TAIL_VEC);
                if (dv) mf__vaxpy(h->dv, b, gi + dd, dv + (t0 + i) * h->lv, MF__TAIL_VEC);
                for (j = 0; j < n; j++) D[(size_t)i * n + j] = j < i ? -b * D[(size_t)i * n + j] : 0.0f; /* E */
            }
            if (h->bf16) mf__bf16_rows(D, D, n, n, n);
            mf__tile_mm(n, dd, n, D, n, 1, Kb, lk, dKc, dd, 1);        /* dK += E K */
            mf__tile_mm(n, dd, n, D, 1, n, Kb, lk, dKc, dd, 1);        /* dK += E^T K */
        } else if (dv)
            for (i = 0; i < n; i++) mf__vaxpy(h->dv, 1.0f, dU + (size_t)i * dvp, dv + (t0 + i) * h->lv, MF__TAIL_VEC);
        for (i = 0; i < n; i++) {
            if (dq) mf__vaxpy(dd, 1.0f, dQc + (size_t)i * dd, dq + (t0 + i) * h->lq, MF__TAIL_VEC);
            if (dk) mf__vaxpy(dd, 1.0f, dKc + (size_t)i * dd, dk + (t0 + i) * h->lq, MF__TAIL_VEC);
        }
    }
}

/* ---- the ops: fast weights (delta rule) and linear attention ----------------------------------------
   Token-major like the projections: q, k [B, T, H, dd], v [B, T, H, dv], beta [B, T, H] (fast
   weights) -> [B, T, H, dv] (x W^T viewed per head; no head transposes). Arguments: the form (1 =
   recurrent, n > 1 = chunkwise by n; the shape resolves the caller's chunk), normalise (linear: 1 =
   divide by z . q + eps), dvp (dv, or dv + 1 for the normaliser's ones column; set by the shape),
   eps; aux: NULL, or a state [B][H][dd][dvp] (S^T) to start from, overwritten with the end state
   (generation; the backward treats it as a constant). saved, per (b, h): the state at every
   checkpoint / chunk start [nck][dd][dvp]; then the chunkwise delta rule's X [T][dd + dvp]; then
   the normalised form's num [T][dvp] (= [W phi(q), z . phi(q)]). */
enum { MF__ARG_FW_FORM, MF__ARG_FW_DVP, MF__ARG_FW_NORM }; /* iarg */
enum { MF__FARG_FW_EPS };                /* farg */
static int mf__fw_chunk_of(int chunk, int T) {
    if (chunk == 0) return T >= MF__FW_AUTO_T ? MF__FW_AUTO_C : 1;
    return chunk;
}
static int mf__fw_nck(int form, int T) { /* states kept per head */
    int step = form == 1 ? MF__FW_CK : form;
    return (T + step - 1) / step;
}
static int64_t mf__fw_states(int form, int T, int dd, int dvp) { /* floats of the kept states */
    return (int64_t)mf__fw_nck(form, T) * dd * dvp * (form > 1 ? 2 : 1); /* chunkwise: both layouts */
}
static int64_t mf__fw_saved_per_head(int form, int T, int dd, int dvp, int delta, int norm) {
    return mf__fw_states(form, T, dd, dvp) + (form > 1 && delta ? (int64_t)T * (dd + dvp) : 0)
           + (norm ? (int64_t)T * dvp : 0);
}
static int mf__fw_shape(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *q = out->src[0], *k = out->src[1], *v = out->src[2], *beta = out->src[3];
    const char *who = out->op->name;
    char sq[64], sk[64], sv[64], sb[64];
    mf_shape_str(q, sq, 64); mf_shape_str(k, sk, 64); mf_shape_str(v, sv, 64);
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        return MF__SHAPE_FAIL("%s: q %s, k %s, v %s must be 4-D [B, T, H, d] (features of q and k, values v; "
                              "the projections x W^T reshaped per head)", who, sq, sk, sv);
    if (memcmp(q->shape, k->shape, sizeof q->shape) != 0)
        return MF__SHAPE_FAIL("%s: q %s and k %s must have the same shape [B, T, H, d_dot]", who, sq, sk);
    if (v->shape[0] != q->shape[0] || v->shape[1] != q->shape[1] || v->shape[2] != q->shape[2])
        return MF__SHAPE_FAIL("%s: v %s must match q %s in [B, T, H]", who, sv, sq);
    if (beta && (beta->ndim != 3 || memcmp(beta->shape, q->shape, 3 * sizeof(int)) != 0))
        return MF__SHAPE_FAIL("%s: beta %s must be [B, T, H] = [%d, %d, %d] (one gate per token and head)", who,
                              mf_shape_str(beta, sb, 64), q->shape[0], q->shape[1], q->shape[2]);
    if (out->iarg[MF__ARG_FW_FORM] < 0)
        return MF__SHAPE_FAIL("%s: chunk %d must be 0 (automatic), 1 (recurrent) or the chunk length", who,
                              out->iarg[MF__ARG_FW_FORM]);
    if (out->iarg[MF__ARG_FW_NORM] != 0 && out->iarg[MF__ARG_FW_NORM] != 1)
        return MF__SHAPE_FAIL("%s: normalise %d must be 0 (y = W q, for sum-normalised features such as DPFP) or 1 "
                              "(y = W q / (z . q + eps), e.g. elu + 1 features)", who, out->iarg[MF__ARG_FW_NORM]);
    if (out->iarg[MF__ARG_FW_NORM] && !(out->farg[MF__FARG_FW_EPS] >= 0.0f && out->farg[MF__FARG_FW_EPS] < 1.0f))
        return MF__SHAPE_FAIL("%s: eps %g must be in [0, 1)", who, (double)out->farg[MF__FARG_FW_EPS]);
    out->iarg[MF__ARG_FW_FORM] = mf__fw_chunk_of(out->iarg[MF__ARG_FW_FORM], q->shape[1]);
    out->iarg[MF__ARG_FW_DVP] = v->shape[3] + out->iarg[MF__ARG_FW_NORM];
    mf__set_shape(out, 4, v->shape);
    return 0;
}
static mf__fwh mf__fw_head(const mf_tensor *out, int64_t bh) {
    const mf_tensor *q = out->src[0], *v = out->src[2], *beta = out->src[3];
    int T = q->shape[1], H = q->shape[2];
    int64_t b = bh / H, hh = bh % H;
    mf__fwh h;
    h.bf16 = 0;
    h.T = T; h.dd = q->shape[3]; h.dv = v->shape[3]; h.dvp = out->iarg[MF__ARG_FW_DVP];
    h.lq = (int64_t)H * h.dd; h.lv = (int64_t)H * h.dv; h.lb = H;
    h.q = q->data + (b * T * H + hh) * h.dd;
    h.k = out->src[1]->data + (b * T * H + hh) * h.dd;
    h.v = v->data + (b * T * H + hh) * h.dv;
    h.beta = beta ? beta->data + b * T * H + hh : NULL;
    return h;
}
/* per thread: the state, T * dvp floats (linear's num / dnum), the larger form's scratch */
static size_t mf__fw_work(int form, int T, int dd, int dvp, int bf16) {
    size_t w = form == 1 ? mf__fw_rec_work(dd, dvp) : mf__fw_chunk_work(form < T ? form : T, dd, dvp, bf16);
    return ((size_t)dd * dvp + (size_t)T * dvp + w + 15) & ~(size_t)15;
}
static void mf__fw_forward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *q = out->src[0];
    int T = q->shape[1], H = q->shape[2], dd = q->shape[3], dv = out->shape[3], dvp = out->iarg[MF__ARG_FW_DVP];
    int form = out->iarg[MF__ARG_FW_FORM], delta = out->src[3] != NULL, norm = out->iarg[MF__ARG_FW_NORM];
    int keep = out->requires_grad, nt;
    int64_t BH = (int64_t)q->shape[0] * H, per = mf__fw_saved_per_head(form, T, dd, dvp, delta, norm), bh;
    int64_t ldo = (int64_t)H * dv;
    size_t ss = (size_t)dd * dvp, pw = mf__fw_work(form, T, dd, dvp, mf__attn_bf16(ctx));
    float *state = (float *)out->aux, *work, eps = out->farg[MF__FARG_FW_EPS];
    nt = mf__attn_threads(ctx, 8.0 * (double)BH * T * dd * dvp);
    if (nt > BH) nt = (int)BH;
    work = (float *)mf__alloc(ctx, pw * nt * sizeof(float));
    out->saved = keep ? (float *)mf__alloc(ctx, (size_t)(BH * per) * sizeof(float)) : NULL;
    if (!work || (keep && !out->saved)) return;
#if MF__OMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (bh = 0; bh < BH; bh++) {
        mf__fwh h = mf__fw_head(out, bh);
        h.bf16 = mf__attn_bf16(ctx);
        float *w = work + pw * mf__attn_thread_num(), *S = w, *y = S + ss, *scratch = y + (size_t)T * dvp;
        float *sv = keep ? out->saved + bh * per : NULL, *o = out->data + (bh / H * T * H + bh % H) * dv;
        float *X = sv ? sv + mf__fw_states(form, T, dd, dvp) : NULL;
        int64_t ldy = dvp;
        int t, c;
        if (state) memcpy(S, state + bh * ss, ss * sizeof(float));
        else memset(S, 0, ss * sizeof(float));
        if (!norm) { y = o; ldy = ldo; } /* dvp == dv: straight into the output */
        else if (sv) y = sv + per - (int64_t)T * dvp;
        if (form == 1) mf__fw_rec_fwd(&h, S, sv, y, ldy, scratch);
        else mf__fw_chunk_fwd(&h, form < T ? form : T, S, sv, sv ? sv + (int64_t)mf__fw_nck(form, T) * ss : NULL,
                              delta ? X : NULL, y, ldy, scratch); /* a chunk longer than T is T: the scratch's size */
        if (state) memcpy(state + bh * ss, S, ss * sizeof(float));
        if (norm) /* y = num / (den + eps), den = z . q >= 0 with non-negative features */
            for (t = 0; t < T; t++) {
                const float *nm = y + (int64_t)t * dvp;
                float inv = 1.0f / (nm[dv] + eps);
                for (c = 0; c < dv; c++) o[t * ldo + c] = nm[c] * inv;
            }
    }
}
static void mf__fw_backward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *q = out->src[0];
    int T = q->shape[1], H = q->shape[2], dd = q->shape[3], dv = out->shape[3], dvp = out->iarg[MF__ARG_FW_DVP];
    int form = out->iarg[MF__ARG_FW_FORM], delta = out->src[3] != NULL, norm = out->iarg[MF__ARG_FW_NORM], nt;
    int64_t BH = (int64_t)q->shape[0] * H, per = mf__fw_saved_per_head(form, T, dd, dvp, delta, norm), bh;
    int64_t ldo = (int64_t)H * dv;
    size_t ss = (size_t)dd * dvp, pw = mf__fw_work(form, T, dd, dvp, mf__attn_bf16(ctx));
    float *gq = mf__g(out->src[0]), *gk = mf__g(out->src[1]), *gv = mf__g(out->src[2]), *gb = mf__g(out->src[3]);
    float *work, eps = out->farg[MF__FARG_FW_EPS];
    if (!gq && !gk && !gv && !gb) return;
    nt = mf__attn_threads(ctx, 20.0 * (double)BH * T * dd * dvp);
    if (nt > BH) nt = (int)BH;
    work = (float *)mf__alloc(ctx, pw * nt * sizeof(float));
    if (!work) return;
#if MF__OMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (bh = 0; bh < BH; bh++) {
        mf__fwh h = mf__fw_head(out, bh);
        h.bf16 = mf__attn_bf16(ctx);
        float *w = work + pw * mf__attn_thread_num(), *dy = w + ss, *scratch = dy + (size_t)T * dvp;
        const float *sv = out->saved + bh * per, *X = sv + mf__fw_states(form, T, dd, dvp);
        int64_t oq = (bh / H * T * H + bh % H), ldg = dvp;
        const float *g = out->grad + oq * dv, *o = out->data + oq * dv;
        float *dq = gq ? gq + oq * dd : NULL, *dk = gk ? gk + oq * dd : NULL, *dvv = gv ? gv + oq * dv : NULL;
        float *db = gb ? gb + oq : NULL;
        int t, c;
        if (!norm) { dy = (float *)g; ldg = ldo; }
        else { /* y = num / (den + eps): dnum = g / (den + eps), dden = -g . y / (den + eps) */
            const float *num = sv + per - (int64_t)T * dvp;
            for (t = 0; t < T; t++) {
                const float *nm = num + (int64_t)t * dvp, *gt = g + t * ldo, *yt = o + t * ldo;
                float inv = 1.0f / (nm[dv] + eps), *d = dy + (int64_t)t * dvp, gy = 0;
                for (c = 0; c < dv; c++) { d[c] = gt[c] * inv; gy += gt[c] * yt[c]; }
                d[dv] = -gy * inv;
            }
        }
        if (form == 1) mf__fw_rec_bwd(&h, sv, dy, ldg, dq, dk, dvv, db, scratch);
        else mf__fw_chunk_bwd(&h, form < T ? form : T, sv, sv + (int64_t)mf__fw_nck(form, T) * ss, X, dy, ldg, dq, dk,
                              dvv, db, scratch);
    }
}
static const mf__op mf__op_fast_weights = { "fast_weights", 4, mf__fw_shape, mf__fw_forward, mf__fw_backward,
                                            MF__OP_PROPS(0) };
static const mf__op mf__op_linear_attention = { "linear_attention", 3, mf__fw_shape, mf__fw_forward, mf__fw_backward,
                                                MF__OP_PROPS(0) };
/* the op with an optional generation state (see above) */
static mf_tensor *mf__fw_apply(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, mf_tensor *beta,
                               int normalise, float eps, int chunk, float *state) {
    mf_tensor *t = mf__begin(ctx, beta ? &mf__op_fast_weights : &mf__op_linear_attention, q, k, v, beta);
    if (t) {
        t->iarg[MF__ARG_FW_FORM] = chunk; t->iarg[MF__ARG_FW_NORM] = normalise;
        t->farg[MF__FARG_FW_EPS] = eps; t->aux = state;
    }
    return mf__finish(ctx, t);
}
MFDEF mf_tensor *mf_fast_weights(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, mf_tensor *beta, int chunk) {
    if (mf_ok(ctx) && !beta) return (mf_tensor *)mf__fail(ctx, "fast_weights: beta is NULL; pass the gates [B, T, H] "
                                                          "(for beta-free linear attention use mf_linear_attention)");
    return mf__fw_apply(ctx, q, k, v, beta, 0, 0.0f, chunk, NULL);
}
MFDEF mf_tensor *mf_linear_attention(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, int normalise, float eps,
                                     int chunk) {
    return mf__fw_apply(ctx, q, k, v, NULL, normalise, eps, chunk, NULL);
}

/* ---- the mixers ---------------------------------------------------------------------------------
   fast_weights (docs/math.md §7.2 - 7.4): q, k, v = HeadProj(D, H, dk) without bias, beta = sigmoid(x Wbeta^T)
   [H] per token (no bias), phi' = DPFP(nu, 1e-6) on q and k, the delta rule, out Linear(D, D) with
   bias; the mixer reads the layer input x itself (no LayerNorm before it).
   linear (docs/math.md §7.5): the same projections without the gate; W += v phi(k)^T, y = W phi(q)
   with phi = DPFP (default; no z normaliser: the seed's phi' is sum-normalised already, and dividing
   by z . phi(q) as well would normalise twice), or with phi = elu + 1 (config.linear_feature) also
   z += phi(k), y = W phi(q) / (z . phi(q) + 1e-6) (the +1e-6 keeps a zero denominator finite).
   The seed has no layer class of its own for it (only the formulas), so it stays a MetaFormer mixer
   with the block's LayerNorm before it (ln1). */
#define MF__FW_EPS 1e-6f
typedef struct mf__fw_layer {
    mf_tensor *wq, *wk, *wv, *wbeta, *wo, *bo; /* q, k, v, beta (fast_weights) without bias; out with bias */
    float *S;          /* generation: [H][dd][dvp] W^T (elu + 1 linear: the column dv is z); device memory on CUDA */
    int next;          /* generation: the position the next call must start at */
} mf__fw_layer;
#define MF__FW_L(m, l) ((mf__fw_layer *)(m)->layers[l].mix)

/* linear attention divides by z . phi(q) only with elu + 1 features (docs/math.md §7.5) */
static int mf__fw_normalised(const mf_model_config *c) {
    return c->mixer == MF_MIXER_LINEAR && c->linear_feature == MF_FEATURE_ELU1;
}
static int mf__fw_dims(const mf_model_config *c, int *dd, int *dvp) {
    int dk = c->d_model / c->n_heads;
    int dpfp = c->mixer == MF_MIXER_FAST_WEIGHTS || c->linear_feature == MF_FEATURE_DPFP;
    *dd = dpfp ? 2 * dk * c->dpfp_nu : dk;
    *dvp = dk + mf__fw_normalised(c);
    return dk;
}
static int mf__fw_check(mf_ctx *ctx, const mf_model_config *c) {
    const char *name = mf_mixer_name(c->mixer);
    int dk = c->d_model / c->n_heads;
    int dpfp = c->mixer == MF_MIXER_FAST_WEIGHTS || c->linear_feature == MF_FEATURE_DPFP;
    if (c->mixer == MF_MIXER_LINEAR && c->linear_feature != MF_FEATURE_DPFP && c->linear_feature != MF_FEATURE_ELU1)
        return (mf__fail(ctx, "model config: unknown linear_feature %d; use MF_FEATURE_DPFP (%d) or MF_FEATURE_ELU1 (%d)",
                         (int)c->linear_feature, (int)MF_FEATURE_DPFP, (int)MF_FEATURE_ELU1), -1);
    if (dpfp && (c->dpfp_nu < 1 || c->dpfp_nu > 2 * dk - 1))
        return (mf__fail(ctx, "model config: dpfp_nu %d must be in [1, 2 * d_model / n_heads - 1] = [1, %d] for the %s "
                         "mixer (labml: 1)", c->dpfp_nu, 2 * dk - 1, name), -1);
    if (c->chunk_size < 0)
        return (mf__fail(ctx, "model config: chunk_size %d must be 0 (automatic), 1 (recurrent kernel) or the chunk "
                         "length of the chunkwise kernel", c->chunk_size), -1);
    return 0;
}
static void mf__fw_make_layer(mf_model *m, int l, void *st) {
    const mf_model_config *c = &m->cfg;
    mf__fw_layer *L = (mf__fw_layer *)st;
    int D = c->d_model;
    mf_tensor *unused;
    mf__layer_linear(m, l, "attn.q", D, D, 0, &L->wq, &unused);
    mf__layer_linear(m, l, "attn.k", D, D, 0, &L->wk, &unused);
    mf__layer_linear(m, l, "attn.v", D, D, 0, &L->wv, &unused);
    if (c->mixer == MF_MIXER_FAST_WEIGHTS) mf__layer_linear(m, l, "attn.beta", D, c->n_heads, 0, &L->wbeta, &unused);
    mf__layer_linear(m, l, "attn.out", D, D, 1, &L->wo, &L->bo);
}
static void mf__fw_free_layer(mf_model *m, int l, void *st) { (void)l; mf__model_dfree(m, ((mf__fw_layer *)st)->S); }
/* layer l's generation state for tokens from pos0 on (zeroed at pos0 == 0), or NULL (error set) */
static float *mf__fw_state(mf_model *m, int l, mf__fw_layer *L, int B, int T, int pos0) {
    const mf_model_config *c = &m->cfg;
    int dd, dvp;
    size_t bytes;
    if (B != 1) return (float *)mf__fail(m->ctx, "%s generation: batch %d, expected 1", mf_mixer_name(c->mixer), B);
    mf__fw_dims(c, &dd, &dvp);
    bytes = (size_t)c->n_heads * dd * dvp * sizeof(float);
    if (!L->S && !(L->S = (float *)mf__dmalloc(m->ctx, bytes, "generation state")))
        return (float *)mf__fail(m->ctx, "out of memory: generation state");
    if (pos0 == 0) {
        if (mf__dzero(m->ctx, L->S, bytes) < 0) return NULL;
    } else if (L->next != pos0)
        return (float *)mf__fail(m->ctx, "%s generation: layer %d's state holds %d tokens, but the call starts at position "
                                 "%d; generation must start at position 0 and continue in order",
                                 mf_mixer_name(c->mixer), l, L->next, pos0);
    L->next = pos0 + T;
    return L->S;
}
/* [B, T, H*e] -> [B, T, H, e] (a view: the ops work token-major, no head transposes) */
static mf_tensor *mf__fw_heads(mf_ctx *ctx, mf_tensor *x, int H) {
    int shape[4];
    if (!x) return NULL;
    shape[0] = x->shape[0]; shape[1] = x->shape[1]; shape[2] = H; shape[3] = x->shape[2] / H;
    return mf_reshape(ctx, x, 4, shape);
}
static mf_tensor *mf__fw_feature(mf_model *m, mf_tensor *x) {
    const mf_model_config *c = &m->cfg;
    if (c->mixer == MF_MIXER_LINEAR && c->linear_feature == MF_FEATURE_ELU1) return mf_elu1(m->ctx, x);
    return mf_dpfp(m->ctx, x, c->dpfp_nu, MF__FW_EPS);
}
/* Non-causal linear attention (docs/math.md §20.2) on token-major q, k [B, T, H, dd] (features) and
   v [B, T, H, dv]: W = sum_j v_j phi(k_j)^T and z = sum_j phi(k_j) over ALL positions, then
   y_t = W phi(q_t) / (z . phi(q_t) + eps) -> [B, T, H, dv] (normalise = 0, DPFP: y_t = W phi(q_t)). Composed of ops (their gradients and CUDA
   kernels): per head, the products K^T V [dd, dv] and K^T 1 [dd, dv] (z in every column, so the
   denominator comes out already broadcast over dv), then Q times each. */
static mf_tensor *mf__linear_attention_full(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, int normalise,
                                            float eps) {
    int perm[4] = {0, 2, 1, 3}, oshape[2], one = 1;
    mf_tensor *Q, *K, *V, *ones, *num, *den;
    if (!q || !k || !v) return NULL;
    Q = mf_permute(ctx, q, perm); K = mf_permute(ctx, k, perm); V = mf_permute(ctx, v, perm); /* [B, H, T, .] */
    oshape[0] = v->shape[1]; oshape[1] = v->shape[3];
    ones = mf_new(ctx, 2, oshape);
    if (ones) mf_init_const(ctx, ones, 1.0f);
    num = mf_matmul(ctx, Q, mf_matmul(ctx, K, V, 1, 0), 0, 0);    /* [B, H, T, dv] */
    if (!normalise) return mf_permute(ctx, num, perm); /* DPFP: the features are normalised already (docs/math.md §7.5) */
    den = mf_matmul(ctx, Q, mf_matmul(ctx, K, ones, 1, 0), 0, 0); /* z . phi(q_t) in every column */
    den = mf_add(ctx, den, mf_from(ctx, 1, &one, &eps));
    return mf_permute(ctx, mf_mul(ctx, num, mf_reciprocal(ctx, den)), perm);
}
static mf_tensor *mf__fw_mixer(mf_model *m, int l, mf__fw_layer *L, mf_tensor *x, int pos0, int gen) {
    mf_ctx *ctx = m->ctx;
    const mf_model_config *c = &m->cfg;
    int H = c->n_heads, fast = c->mixer == MF_MIXER_FAST_WEIGHTS;
    mf_tensor *xn = x, *q, *k, *v, *beta = NULL, *y; /* linear: x = ln1(x) (its row has MF__MIX_PRE_LN) */
    float *state = NULL;
    if (!xn) return NULL;
    q = mf__fw_feature(m, mf__fw_heads(ctx, mf_linear(ctx, xn, L->wq, NULL), H));   /* [B, T, H, dd] */
    k = mf__fw_feature(m, mf__fw_heads(ctx, mf_linear(ctx, xn, L->wk, NULL), H));
    v = mf__fw_heads(ctx, mf_linear(ctx, xn, L->wv, NULL), H);                       /* [B, T, H, dk] */
    if (fast) beta = mf_sigmoid(ctx, mf_linear(ctx, xn, L->wbeta, NULL));              /* [B, T, H] */
    if (gen && !(state = mf__fw_state(m, l, L, x->shape[0], x->shape[1], pos0))) return NULL;
    if (!q || !k || !v || (fast && !beta)) return NULL;
    if (!c->causal) y = mf__linear_attention_full(ctx, q, k, v, mf__fw_normalised(c), MF__FW_EPS);
    else y = mf__fw_apply(ctx, q, k, v, beta, mf__fw_normalised(c), MF__FW_EPS, c->chunk_size, state); /* [B, T, H, dk] */
    return y ? mf_linear(ctx, mf_reshape(ctx, y, 3, x->shape), L->wo, L->bo) : NULL;
}

/* four projections (fast_weights: and beta); the state's products per token: fast_weights reads W
   phi(k), writes the delta and reads W phi(q) (3), linear writes and reads (2), over dk x dd: one layer */
static double mf__fw_flops(const mf_model_config *c, int T, double keys) {
    double D = c->d_model, H = c->n_heads, dk = D / H, dd = 2.0 * dk * c->dpfp_nu;
    (void)T; (void)keys;
    return c->mixer == MF_MIXER_FAST_WEIGHTS ? 4 * 2.0 * D * D + 2.0 * D * H + H * 6.0 * dk * dd
                                             : 4 * 2.0 * D * D + H * 4.0 * dk * dd;
}
/* the two mixers as definitions (mf_mixer_def, docs/math.md §23): training reads the whole sequence,
   generation (gen_step) continues each layer's state W from token to token */
static mf_tensor *mf__fw_mix(mf_model *m, int l, void *st, mf_tensor *x) { return mf__fw_mixer(m, l, (mf__fw_layer *)st, x, 0, 0); }
static mf_tensor *mf__fw_gen_step(mf_model *m, int l, void *st, mf_tensor *x, int pos0) {
    return mf__fw_mixer(m, l, (mf__fw_layer *)st, x, pos0, 1);
}
static const mf_mixer_def mf__fast_weights_def = {
    "fast_weights", "DPFP features and the delta rule (Schlag et al., fast weights)", MF_MIXER_HEADS | MF_MIXER_FIXED_STATE | MF_MIXER_OWN_NORM,
    0, NULL, sizeof(mf__fw_layer), mf__fw_make_layer, mf__fw_mix, mf__fw_check, NULL, mf__fw_gen_step, NULL,
    mf__fw_free_layer, NULL, NULL, mf__fw_flops, NULL, MF__F(DPFP_NU) | MF__F(CHUNK_SIZE)
};
static const mf_mixer_def mf__linear_def = {
    "linear", "linear attention, DPFP or elu + 1 features (Katharopoulos et al.)", MF_MIXER_HEADS | MF_MIXER_FIXED_STATE | MF_MIXER_NONCAUSAL,
    0, NULL, sizeof(mf__fw_layer), mf__fw_make_layer, mf__fw_mix, mf__fw_check, NULL, mf__fw_gen_step, NULL,
    mf__fw_free_layer, NULL, NULL, mf__fw_flops, NULL, MF__F(DPFP_NU) | MF__F(LINEAR_FEATURE) | MF__F(CHUNK_SIZE)
};
#endif /* METAFORMER_NO_FASTWEIGHTS */

/* ==== [mf:feedback] ========================================================================= */
#ifndef METAFORMER_NO_FEEDBACK /* the whole section: its ops, the family, its rows in [mf:mixers] */
/* The feedback transformer, original and shared-KV variants (docs/math.md §8).

   The recurrence (docs/math.md §8.3 - 8.5), token by token: step t runs every layer on x_t (the token
   embedding, plus the position embedding when the config has one); at t > 0 layer l first attends
   from LN_att(h) (only the query is normed) to the memories m_0 .. m_{t-1} (never to the current
   step; at t = 0 the attention sub-layer is skipped), then runs its FFN. The memory of step t is
   m_t = sum_l softmax(w)[l] * hs_t[l] over the embedding and every layer's output. Keys and values
   of a memory slot never change once written, so each slot is projected ONCE, at the end of the
   step that writes it: per layer in the original variant (K_l = m Wk_l^T, V_l = m Wv_l^T + bv_l),
   by the shared bias-free k, v in the KV variant: one product per step, whose row holds every
   block (original: K_0 | V_0 | K_1 | ..., ld = 2 N D wide; KV: K | V, ld = 2 D), copied into the
   slot buffer - the seed's Stack of the KV variant, preallocated - laid out per block, batch row
   and head, rows and transposed (what the attention kernels read contiguously, mf__fb_attn).

   The whole recurrence is ONE tape node ("feedback") with an explicit backward in reverse time
   (docs/math.md §8.6, the llm.c way): no tape node and no allocation per token. The forward keeps every
   step's activations in step-major buffers [layer][T][B][...] taken from the arena once per call;
   a step is, per layer, four products of the B batch rows with a weight (q, out, fc1, fc2: weights
   packed once per call, mf__fb_pmm) and the attention of each (batch row, head); each head forms
   its own columns of the query (and in the backward of the out projection's input gradient) in
   the attention's parallel loop, one fork/join fewer per layer and step. The backward
   walks t = T-1 .. 0: when it reaches step t, every reader of slot t (the later steps) is done,
   so the slot's key/value gradient is complete and dm_t = dK_t Wk + dV_t Wv is handed to hs_t[l]
   with weight softmax(w)[l]. Weight gradients are not formed per step: the per-step gradients of
   each weight's output are kept and every weight gets one GEMM over all T*B rows at the end
   (dW += dY^T X, mf__sgemm_ws), where a GEMM is fast. Attention keeps only the log-sum-exp of each
   query and recomputes the probabilities in the backward (no T x T buffer). The results do not
   depend on the thread count (every sum runs in a fixed order).

   Capacity: max_seq is the stack capacity (the seed's Stack holds 512): at most max_seq memory
   slots per sequence, and max_seq <= P = 4096, the rows of the relative tables. Generation keeps
   the slots and the packed weights in mf__fb_state (batch 1): pos0 = 0 starts over, pos0 = n
   continues after the n tokens so far, one step per new token. Dropout (config.dropout, training
   only) acts where the generic block has it: both residual branches and the FFN hidden layer;
   config.attn_dropout drops the attention probabilities inside each step's attention (its own RNG
   stream per call, mf__fb_layer_attn's numbering: docs/math.md §4.1).

   On a CUDA context the two ops (feedback_attention, feedback) run the kernels of [cu:feedback] in
   metaformer_cuda.cuh: the same node, buffers and reverse-time backward, with the slot stack, the
   step buffers and the generation slots in device memory (laid out for the GPU: [nblk][cap][B][D],
   nothing packed), dropout masks from the same RNG counters (mf__fb_drop_base), and a token loop
   that never waits on the host. */
#define MF__FB_P MF_XL_P /* rows of the relative tables R, S (docs/math.md §8.1): the same P as the relative mixer's */

typedef struct mf__fb_layer { /* the attention sub-layer of layer l (docs/math.md §8.1) */
    mf_tensor *wq, *wk, *wv, *bv, *wo, *bo; /* k, v: the original variant only (feedback_kv shares them) */
    mf_tensor *rel_u, *rel_r, *rel_s;       /* u [H][dk], R [P][H][dk], S [P][H] */
} mf__fb_layer;
#define MF__FB_L(m, l) ((mf__fb_layer *)(m)->layers[l].mix)
#define MF__FB_S(m) ((struct mf__fb_state *)(m)->fam_state)
struct mf__fb_state { /* the family's state (m->fam_state) */
    mf_tensor *w;       /* layer weights [N + 1] */
    mf_tensor *wk, *wv; /* feedback_kv: the shared bias-free k, v [D][D]; NULL for feedback */
    float *slots;  /* generation (batch 1): the keys / values of max_seq memory slots (device memory on CUDA) */
    float *wf;     /* generation: the weights packed for the forward, at the prompt (CPU only) */
    int n_slots;   /* slots written so far */
};

/* ---- feedback attention of one step, for the whole batch ------------------------------------------
   Per (b, h): s_j = scale ((q + u) . k_j + q . r_j + s_j) over the n memory slots, a = softmax(s),
   o = sum_j a_j v_j; the backward recomputes a from the log-sum-exp (FlashAttention-2 style:
   g_j = scale a_j (dout . v_j - dout . o)). Every product reads contiguous rows (a vector times a
   matrix, mf__fb_vm, or the small-tile kernel mf__tile_mm), never a horizontal sum per key: the
   keys and values of a head are kept both row-major [n][d] and transposed [d][ldt], the table rows
   likewise, and the positional scores q . r_j of a head are one [B x n] product for all batch rows
   (the tables are shared by the batch). Parallel over heads: du, dr, ds of a head collect every
   batch row. */
typedef struct mf__fb_attn {
    int B, H, d, n;              /* batch, heads, head size, memory slots */
    float scale;
    const float *q, *u;          /* [B][H d] queries, [H][d] query position bias */
    const float *k, *kt, *v, *vt;/* head (b, h) at + b sb + h sh: k, v rows [n][d]; kt, vt [d][ldt] */
    int64_t sb, sh;
    int ldt;
    const float *r, *rt, *s;     /* [H][nr][d], [H][d][nr], [H][nr]: slot j reads row nr - n + j */
    int nr;
    float *qu;                   /* [B][H d] scratch: q + u */
    float *work;                 /* per head mf__fb_attn_work floats */
    mf__attn_drop drop;          /* probability dropout: a_j of (b, h) keeps by element */
    int64_t dbase, dld;          /*   dbase + (b H + h) dld + j of drop's stream (docs/math.md §4.1) */
    float *o, *lse;              /* [B][H d], [B][H] */
    /* backward */
    const float *dout;           /* [B][H d] */
    float *dq, *du, *dk, *dv, *dr, *ds; /* += ; dk, dv: head (b, h) at + b dsb + h dsh, rows [n][d];
                                    dr, ds laid out as r, s; du [H][d]; any but dq may be NULL */
    int64_t dsb, dsh;
    /* the product before the attention, in its parallel loop (one fork fewer per step): with pin,
       each head first writes its own columns of q (forward) or dout (backward) = pin [B][H d] @ pw
       (packed [H d][H d], mf__fb_pmm) */
    const float *pin;
    float *pw;
} mf__fb_attn;
static void mf__fb_pmm_cols(int M, const float *A, int lda, float *P, int K, int N, int c0, int c1, float *C, int ldc);
/* head h's columns of q (forward) or dout (backward) from pin @ pw, when a->pin is set */
static void mf__fb_attn_project(const mf__fb_attn *a, int h, const float *dst) {
    int D = a->H * a->d;
    if (a->pin) mf__fb_pmm_cols(a->B, a->pin, D, a->pw, D, D, h * a->d, (h + 1) * a->d, (float *)dst, D);
}

/* scratch floats per head of the feedback attention of B rows over n slots of head size d */
static int64_t mf__fb_attn_work(int B, int n, int d) { return (int64_t)(2 * B + 3) * n + d; }
/* a[j] of (b, h) dropped in place: kept ones times 1 / (1 - p), or into dst (dst may be a) */
static void mf__fb_attn_drop(const mf__fb_attn *a, int b, int h, const float *x, float *dst) {
    int64_t e0 = a->dbase + ((int64_t)b * a->H + h) * a->dld;
    int j;
    for (j = 0; j < a->n; j++)
        dst[j] = mf__drop_keep_at(a->drop.key, (uint64_t)(e0 + j), a->drop.p) ? x[j] * a->drop.s : 0.0f;
}
/* y [N] = x [K] @ M [K][N] (row-major, ldm), or y += it (add). One row: four rows of M at a time
   into separate accumulators, so the sum is not one long chain of dependent FMAs (the small-tile
   kernel's one-row tile is). */
static void mf__fb_vm(int N, int K, const float *x, const float *M, int ldm, float *y, int add) {
    int j, k, c;
    for (j = 0; j < N; j += 2 * MF__AW) {
        int w0 = N - j < MF__AW ? N - j : MF__AW, w1 = N - j - MF__AW;
        mf__am m0 = mf__av_mask(w0), m1 = mf__av_mask(w1 > 0 ? (w1 < MF__AW ? w1 : MF__AW) : 0);
        mf__av a[4][2];
        const float *mj = M + j;
        for (c = 0; c < 4; c++) a[c][0] = a[c][1] = mf__av_zero();
        for (k = 0; k + 4 <= K; k += 4)
            for (c = 0; c < 4; c++) {
                const float *row = mj + (int64_t)(k + c) * ldm;
                mf__av xv = mf__av_set1(x[k + c]);
                a[c][0] = mf__av_fma(xv, mf__av_loadm(row, m0), a[c][0]);
                if (w1 > 0) a[c][1] = mf__av_fma(xv, mf__av_loadm(row + MF__AW, m1), a[c][1]);
            }
        for (; k < K; k++) {
            const float *row = mj + (int64_t)k * ldm;
            mf__av xv = mf__av_set1(x[k]);
            a[0][0] = mf__av_fma(xv, mf__av_loadm(row, m0), a[0][0]);
            if (w1 > 0) a[0][1] = mf__av_fma(xv, mf__av_loadm(row + MF__AW, m1), a[0][1]);
        }
        for (c = 0; c < 2; c++) {
            mf__av s = mf__av_add(mf__av_add(a[0][c], a[1][c]), mf__av_add(a[2][c], a[3][c]));
            float *yc = y + j + c * MF__AW;
            mf__am mc = c ? m1 : m0;
            if (c && w1 <= 0) break;
            if (add) s = mf__av_add(s, mf__av_loadm(yc, mc));
            mf__av_storem(yc, mc, s);
        }
    }
}
/* x[0..n) = exp(x - m) (vectorised); returns their sum */
static float mf__fb_exp(float *x, int n, float m) {
    mf__av vm = mf__av_set1(m), acc = mf__av_zero();
    int i = 0;
    float sum;
    for (; i + MF__AW <= n; i += MF__AW) {
        mf__av e = mf__av_exp(mf__av_sub(mf__av_load(x + i), vm));
        mf__av_store(x + i, e);
        acc = mf__av_add(acc, e);
    }
    sum = mf__av_hsum(acc);
    for (; i < n; i++) sum += x[i] = expf(x[i] - m);
    return sum;
}
/* the scores of head (b, h) into sc [n] (pos: its positional scores q . r_j) */
static void mf__fb_scores(const mf__fb_attn *a, int b, int h, const float *pos, float *sc) {
    int D = a->H * a->d, n = a->n, j;
    const float *srow = a->s + (int64_t)h * a->nr + a->nr - n;
    mf__fb_vm(n, a->d, a->qu + (int64_t)b * D + (int64_t)h * a->d, a->kt + b * a->sb + h * a->sh, a->ldt, sc, 0); /* (q + u) . k_j */
    for (j = 0; j < n; j++) sc[j] = a->scale * (sc[j] + pos[j] + srow[j]);
}
/* q + u, and the positional scores of head h for every batch row: pos [B][n] = q_h [B x d] @ r_h^T */
static void mf__fb_attn_prep(const mf__fb_attn *a, int h, float *pos) {
    int D = a->H * a->d, b, i;
    for (b = 0; b < a->B; b++)
        for (i = 0; i < a->d; i++) {
            int64_t e = (int64_t)b * D + (int64_t)h * a->d + i;
            a->qu[e] = a->q[e] + a->u[(int64_t)h * a->d + i];
        }
    mf__tile_mm(a->B, a->n, a->d, a->q + (int64_t)h * a->d, D, 1, a->rt + (int64_t)h * a->d * a->nr + a->nr - a->n, a->nr,
                pos, a->n, 0);
}
static void mf__fb_attn_forward(mf_ctx *ctx, const mf__fb_attn *a) {
    int D = a->H * a->d, h;
    MF__PARFOR(ctx, a->H, 6.0 * a->B * a->n * a->d + (a->pin ? 2.0 * a->B * D * a->d : 0.0))
    for (h = 0; h < a->H; h++) {
        float *pos = a->work + h * mf__fb_attn_work(a->B, a->n, a->d), *sc = pos + (int64_t)a->B * a->n, mx;
        int b, j;
        mf__fb_attn_project(a, h, a->q);
        mf__fb_attn_prep(a, h, pos);
        for (b = 0; b < a->B; b++) {
            int64_t qo = (int64_t)b * D + (int64_t)h * a->d;
            float sum;
            mf__fb_scores(a, b, h, pos + (int64_t)b * a->n, sc);
            for (mx = sc[0], j = 1; j < a->n; j++) if (sc[j] > mx) mx = sc[j];
            sum = mf__fb_exp(sc, a->n, mx);
            for (j = 0; j < a->n; j++) sc[j] /= sum;
            a->lse[(int64_t)b * a->H + h] = mx + logf(sum);
            if (a->drop.p > 0.0f) mf__fb_attn_drop(a, b, h, sc, sc);
            mf__fb_vm(a->d, a->n, sc, a->v + b * a->sb + h * a->sh, a->d, a->o + qo, 0); /* o = a^T V */
        }
    }
}
static void mf__fb_attn_backward(mf_ctx *ctx, const mf__fb_attn *a) {
    int D = a->H * a->d, n = a->n, d = a->d, h;
    MF__PARFOR(ctx, a->H, 16.0 * a->B * n * d + (a->pin ? 2.0 * a->B * D * d : 0.0))
    for (h = 0; h < a->H; h++) {
        float *pos = a->work + h * mf__fb_attn_work(a->B, n, d), *G = pos + (int64_t)a->B * n;
        float *p = G + (int64_t)a->B * n, *dp = p + n, *pd = dp + n, *kg = pd + n, *pv = p;
        int b, j, i;
        mf__fb_attn_project(a, h, a->dout);
        mf__fb_attn_prep(a, h, pos);
        for (b = 0; b < a->B; b++) {
            int64_t qo = (int64_t)b * D + (int64_t)h * d, hb = b * a->sb + h * a->sh, dhb = b * a->dsb + h * a->dsh;
            const float *dout = a->dout + qo;
            float *g = G + (int64_t)b * n, Dd = mf__vdot(d, dout, a->o + qo, MF__TAIL_SCALAR);
            mf__fb_scores(a, b, h, pos + (int64_t)b * n, p);
            mf__fb_exp(p, n, a->lse[(int64_t)b * a->H + h]);                       /* a_j */
            mf__fb_vm(n, d, dout, a->vt + hb, a->ldt, dp, 0);                       /* dout . v_j */
            if (a->drop.p > 0.0f) { /* the dropped a~: g_j = scale (a~_j dp_j - a_j D), dv_j += a~_j dout */
                mf__fb_attn_drop(a, b, h, p, pd);
                for (j = 0; j < n; j++) g[j] = a->scale * (pd[j] * dp[j] - p[j] * Dd);
                pv = pd;
            } else
                for (j = 0; j < n; j++) g[j] = a->scale * p[j] * (dp[j] - Dd);
            mf__fb_vm(d, n, g, a->k + hb, d, kg, 0);                                /* sum_j g_j k_j */
            for (i = 0; i < d; i++) a->dq[qo + i] += kg[i];
            if (a->du) for (i = 0; i < d; i++) a->du[(int64_t)h * d + i] += kg[i];
            mf__fb_vm(d, n, g, a->r + ((int64_t)h * a->nr + a->nr - n) * d, d, a->dq + qo, 1); /* + g_j r_j */
            if (a->dk) mf__tile_mm(n, d, 1, g, 1, 1, a->qu + qo, d, a->dk + dhb, d, 1); /* dk_j += g_j (q + u) */
            if (a->dv) mf__tile_mm(n, d, 1, pv, 1, 1, dout, d, a->dv + dhb, d, 1);     /* dv_j += a_j dout */
        }
        if (a->dr) /* dr_j += sum_b g_bj q_b */
            mf__tile_mm(n, d, a->B, G, 1, n, a->q + (int64_t)h * d, D, a->dr + ((int64_t)h * a->nr + a->nr - n) * d, d, 1);
        if (a->ds)
            for (b = 0; b < a->B; b++)
                for (j = 0; j < n; j++) a->ds[(int64_t)h * a->nr + a->nr - n + j] += G[(int64_t)b * n + j];
    }
}
/* the last nr rows of a relative table [P][H][w] (w = d or 1), head-major: dst [H][nr][w]; with
   dst_t also transposed, [H][w][nr]. back: add dst into the table instead (its gradient). */
static void mf__fb_table_rows(float *dst, float *dst_t, float *src, int P, int H, int w, int nr, int back) {
    int h, r, i;
    for (h = 0; h < H; h++) {
        float *dh = dst + (int64_t)h * nr * w;
        for (r = 0; r < nr; r++) {
            float *x = dh + (int64_t)r * w, *y = src + ((int64_t)(P - nr + r) * H + h) * w;
            if (back) for (i = 0; i < w; i++) y[i] += x[i];
            else memcpy(x, y, (size_t)w * sizeof(float));
        }
        if (dst_t && !back) mf__attn_transpose(dh, w, nr, nr, w, 1.0f, dst_t + (int64_t)h * w * nr, nr);
    }
}

/* ---- feedback attention op: q [B, H, dk], k, v [B, H, n, dk], u [H, dk], r [P, H, dk], s [P, H]
   -> [B, H, dk]; src 0..5 = q, k, v, u, r, s; the scale in MF__FARG_ATTN_SCALE; saved: lse [B*H].
   Forward and backward lay the inputs out as the kernels want them (transposed keys/values,
   head-major table rows). */
static int mf__fba_shape(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *q = out->src[0], *k = out->src[1], *v = out->src[2], *u = out->src[3];
    const mf_tensor *r = out->src[4], *s = out->src[5];
    int B, H, dk, n;
    char sq[64], sk[64], sv[64], su[64], sr[64], ss[64];
    if (!u || !r || !s)
        return MF__SHAPE_FAIL("feedback_attention: u, r and s must not be NULL (zero tables are the seed's init)");
    if (q->ndim != 3 || k->ndim != 4 || v->ndim != 4)
        return MF__SHAPE_FAIL("feedback_attention: q must be [B, H, dk] and k, v [B, H, n, dk]; got q %s, k %s, v %s",
                              mf_shape_str(q, sq, 64), mf_shape_str(k, sk, 64), mf_shape_str(v, sv, 64));
    B = q->shape[0]; H = q->shape[1]; dk = q->shape[2]; n = k->shape[2];
    if (k->shape[0] != B || k->shape[1] != H || k->shape[3] != dk || memcmp(k->shape, v->shape, sizeof k->shape) != 0)
        return MF__SHAPE_FAIL("feedback_attention: k %s and v %s must both be [B, H, n, dk] = [%d, %d, n, %d] (q %s)",
                              mf_shape_str(k, sk, 64), mf_shape_str(v, sv, 64), B, H, dk, mf_shape_str(q, sq, 64));
    if (u->ndim != 2 || u->shape[0] != H || u->shape[1] != dk || r->ndim != 3 || r->shape[1] != H ||
        r->shape[2] != dk || s->ndim != 2 || s->shape[1] != H || s->shape[0] != r->shape[0])
        return MF__SHAPE_FAIL("feedback_attention: u %s, r %s, s %s must be [H, dk], [P, H, dk], [P, H] with H = %d, dk = %d",
                              mf_shape_str(u, su, 64), mf_shape_str(r, sr, 64), mf_shape_str(s, ss, 64), H, dk);
    if (n > r->shape[0])
        return MF__SHAPE_FAIL("feedback_attention: %d memory slots but the tables have P = %d rows; n must be <= P",
                              n, r->shape[0]);
    mf__set_shape(out, 3, q->shape);
    return 0;
}
/* the kernels' view of the op (scratch from the arena); -1 when out of memory */
static int mf__fba_setup(mf_ctx *ctx, const mf_tensor *out, mf__fb_attn *a) {
    const mf_tensor *q = out->src[0], *k = out->src[1], *v = out->src[2];
    int B = q->shape[0], H = q->shape[1], d = q->shape[2], n = k->shape[2], P = out->src[4]->shape[0], bh;
    float *kt, *vt, *r, *rt, *s;
    memset(a, 0, sizeof *a);
    a->B = B; a->H = H; a->d = d; a->n = n; a->nr = n; a->scale = out->farg[MF__FARG_ATTN_SCALE];
    a->q = q->data; a->u = out->src[3]->data; a->k = k->data; a->v = v->data;
    a->sb = (int64_t)H * n * d; a->sh = (int64_t)n * d; a->ldt = n;
    a->kt = kt = (float *)mf__alloc(ctx, 2 * (size_t)B * H * n * d * sizeof(float));
    a->r = r = (float *)mf__alloc(ctx, 2 * (size_t)H * n * d * sizeof(float));
    a->s = s = (float *)mf__alloc(ctx, (size_t)H * n * sizeof(float));
    a->qu = (float *)mf__alloc(ctx, (size_t)B * H * d * sizeof(float));
    a->work = (float *)mf__alloc(ctx, (size_t)(H * mf__fb_attn_work(B, n, d)) * sizeof(float));
    if (!mf_ok(ctx)) return -1;
    a->vt = vt = kt + (int64_t)B * H * n * d;
    a->rt = rt = r + (int64_t)H * n * d;
    for (bh = 0; bh < B * H; bh++) {
        mf__attn_transpose(k->data + (int64_t)bh * n * d, d, n, n, d, 1.0f, kt + (int64_t)bh * n * d, n);
        mf__attn_transpose(v->data + (int64_t)bh * n * d, d, n, n, d, 1.0f, vt + (int64_t)bh * n * d, n);
    }
    mf__fb_table_rows(r, rt, out->src[4]->data, P, H, d, n, 0);
    mf__fb_table_rows(s, NULL, out->src[5]->data, P, H, 1, n, 0);
    a->o = out->data; a->lse = out->saved;
    a->drop = mf__attn_drop_of(ctx, out); a->dld = n; /* the probabilities [B, H, n] */
    return 0;
}
static void mf__fba_forward(mf_ctx *ctx, mf_tensor *out) {
    mf__fb_attn a;
    if (!(out->saved = (float *)mf__alloc(ctx, (size_t)out->shape[0] * out->shape[1] * sizeof(float)))) return;
    if (mf__fba_setup(ctx, out, &a) == 0) mf__fb_attn_forward(ctx, &a);
}
static void mf__fba_backward(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *q = out->src[0], *r = out->src[4], *s = out->src[5];
    int H = q->shape[1], d = q->shape[2], n = out->src[1]->shape[2], P = r->shape[0];
    mf__fb_attn a;
    float *dq = mf__g(q);
    if (mf__fba_setup(ctx, out, &a) < 0) return;
    a.dout = out->grad;
    a.dq = dq ? dq : (float *)mf__calloc(ctx, (size_t)q->ne * sizeof(float)); /* the kernel always forms dq */
    a.du = mf__g(out->src[3]); a.dk = mf__g(out->src[1]); a.dv = mf__g(out->src[2]);
    a.dsb = a.sb; a.dsh = a.sh;
    if (mf__g(r)) a.dr = (float *)mf__calloc(ctx, (size_t)H * n * d * sizeof(float));
    if (mf__g(s)) a.ds = (float *)mf__calloc(ctx, (size_t)H * n * sizeof(float));
    if (!a.dq || !mf_ok(ctx)) return;
    mf__fb_attn_backward(ctx, &a);
    if (a.dr) mf__fb_table_rows(a.dr, NULL, r->grad, P, H, d, n, 1);
    if (a.ds) mf__fb_table_rows(a.ds, NULL, s->grad, P, H, 1, n, 1);
}
static const mf__op mf__op_feedback_attention = { "feedback_attention", 3, mf__fba_shape, mf__fba_forward,
                                                  mf__fba_backward, MF__OP_PROPS(0) };
MFDEF mf_tensor *mf_feedback_attention(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, mf_tensor *u,
                                       mf_tensor *r, mf_tensor *s, float scale, float dropout) {
    mf_tensor *t;
    if (!mf_ok(ctx) || mf__attn_drop_check(ctx, "feedback_attention", dropout) < 0) return NULL;
    t = mf__begin(ctx, &mf__op_feedback_attention, q, k, v, u);
    if (t) { t->src[4] = r; t->src[5] = s; t->farg[MF__FARG_ATTN_SCALE] = scale; mf__attn_drop_set(ctx, t, dropout); }
    return mf__finish(ctx, t);
}

/* ---- per-step products: a few rows times a weight ------------------------------------------------
   A step multiplies the B rows of the batch by each weight. The general GEMM packs the whole weight
   on every call, which for 8 rows costs as much as the product itself; here every weight is packed
   ONCE per forward (and once per backward) into column panels (panel p: columns 32p .. 32p + 31 of
   the right operand [K][N], row-major [K][w], w = 32 but the last), which the attention's
   small-tile kernel (mf__tile_mm: 8 rows x 32 columns of accumulators, the operand read in place)
   streams contiguously; threads split the panels. */
#define MF__FB_NP 32

/* panel p of a packed [K][N] operand and its width */
static float *mf__fb_panel(float *P, int K, int N, int p, int *w) {
    *w = N - p * MF__FB_NP < MF__FB_NP ? N - p * MF__FB_NP : MF__FB_NP;
    return P + (int64_t)p * MF__FB_NP * K;
}
/* rows k0 .. k0 + rows - 1 of the operand [K][N] from src [rows][N] */
static void mf__fb_pack_rows(float *P, int K, int N, int k0, const float *src, int rows) {
    int k, p, w;
    for (p = 0; p * MF__FB_NP < N; p++) {
        float *d = mf__fb_panel(P, K, N, p, &w);
        for (k = 0; k < rows; k++)
            memcpy(d + (int64_t)(k0 + k) * w, src + (int64_t)k * N + p * MF__FB_NP, (size_t)w * sizeof(float));
    }
}
/* columns o0 .. o0 + cols - 1 of the operand [K][N] = src^T, src [cols][K] (a Linear weight
   [out][in] for y = x W^T) */
static void mf__fb_pack_cols(float *P, int K, int N, int o0, const float *src, int cols) {
    int o = o0, w;
    while (o < o0 + cols) {
        int c0 = o % MF__FB_NP, run = o0 + cols - o;
        float *d = mf__fb_panel(P, K, N, o / MF__FB_NP, &w);
        if (run > w - c0) run = w - c0;
        mf__attn_transpose(src + (int64_t)(o - o0) * K, K, run, run, K, 1.0f, d + c0, w);
        o += run;
    }
}
/* C [M][N] = A [M][K] (row stride lda) @ the packed operand (+ bias [N] if not NULL), or C += it
   (add); each thread adds the bias to its own panels, so no serial pass follows */
static void mf__fb_pmm(mf_ctx *ctx, int M, const float *A, int lda, float *P, int K, int N, const float *bias,
                       float *C, int ldc, int add) {
    int np = (N + MF__FB_NP - 1) / MF__FB_NP, p;
    MF__PARFOR(ctx, np, 2.0 * M * K * MF__FB_NP)
    for (p = 0; p < np; p++) {
        int w, r, j;
        const float *b = mf__fb_panel(P, K, N, p, &w);
        float *c = C + p * MF__FB_NP;
        mf__tile_mm(M, w, K, A, lda, 1, b, w, c, ldc, add);
        if (bias)
            for (r = 0; r < M; r++)
                for (j = 0; j < w; j++) c[(int64_t)r * ldc + j] += bias[p * MF__FB_NP + j];
    }
}
/* columns c0 .. c1 - 1 of C [M][N] = A [M][K] @ the packed operand (one thread) */
static void mf__fb_pmm_cols(int M, const float *A, int lda, float *P, int K, int N, int c0, int c1, float *C, int ldc) {
    while (c0 < c1) {
        int w, p = c0 / MF__FB_NP, off = c0 - p * MF__FB_NP, run;
        const float *b = mf__fb_panel(P, K, N, p, &w);
        run = w - off < c1 - c0 ? w - off : c1 - c0;
        mf__tile_mm(M, run, K, A, lda, 1, b + off, w, C + c0, ldc, 0);
        c0 += run;
    }
}
/* C[M][N] = beta * C + op(A) op(B) with leading dimensions: the big products (weight gradients) */
static void mf__fb_mm(mf_ctx *ctx, int ta, int tb, int M, int N, int K, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    float *ws;
    if (M <= 0 || N <= 0 || K <= 0) return;
    if ((ws = mf__gemm_workspace(ctx, M, N, K)) != NULL) {
        double t0 = mf__gemm_t0(ctx);
        mf__ctx_gemm(ctx, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL, ws, NULL);
        mf__gemm_t1(ctx, t0);
    }
}

/* The model's weights, packed: per layer q, out, fc1, fc2, then the key/value blocks (original:
   k_0, v_0, k_1, ...; KV: k, v). fwd: the operands of y = x W^T (q, out [D x D], fc1 [D x F],
   fc2 [F x D], key/value [D x ld]); else those of dx = dy W (q, out [D x D], fc1 [F x D], fc2 [D x F],
   key/value [ld x D]). MF__FB_Q .. MF__FB_KV name the pieces. */
enum { MF__FB_Q, MF__FB_OUT, MF__FB_FC1, MF__FB_FC2, MF__FB_KV };
static int mf__fb_nblk(const mf_model *m) { return m->cfg.mixer == MF_MIXER_FEEDBACK ? 2 * m->cfg.n_layers : 2; }
static int64_t mf__fb_packed_floats(const mf_model *m) {
    int64_t D = m->cfg.d_model, F = m->cfg.d_ff;
    return m->cfg.n_layers * (2 * D * D + 2 * D * F) + D * D * mf__fb_nblk(m);
}
static float *mf__fb_piece(const mf_model *m, float *P, int l, int which) {
    int64_t D = m->cfg.d_model, F = m->cfg.d_ff, at[4];
    at[0] = 0; at[1] = D * D; at[2] = 2 * D * D; at[3] = 2 * D * D + D * F;
    if (which == MF__FB_KV) return P + m->cfg.n_layers * (2 * D * D + 2 * D * F);
    return P + l * (2 * D * D + 2 * D * F) + at[which];
}
/* key/value block i: its weight, bias (original v only) and column offset in a slot row */
static void mf__fb_kv_block(const mf_model *m, int i, mf_tensor **w, mf_tensor **b) {
    const mf__fb_layer *L = MF__FB_L(m, i / 2);
    const struct mf__fb_state *s = MF__FB_S(m);
    if (m->cfg.mixer == MF_MIXER_FEEDBACK) { *w = i % 2 ? L->wv : L->wk; *b = i % 2 ? L->bv : NULL; }
    else { *w = i % 2 ? s->wv : s->wk; *b = NULL; }
}
/* weight w [out][in], block i of a stack of n such weights (rows i out ..): fwd: columns of the
   operand [in][n out] of y = x W^T; else rows of the operand [n out][in] of dx = dy W */
static void mf__fb_pack_weight(float *P, const mf_tensor *w, int i, int n, int fwd) {
    int out = w->shape[0], in = w->shape[1];
    if (fwd) mf__fb_pack_cols(P, in, n * out, i * out, w->data, out);
    else mf__fb_pack_rows(P, n * out, in, i * out, w->data, out);
}
static void mf__fb_pack(mf_ctx *ctx, const mf_model *m, float *P, int fwd) {
    int N = m->cfg.n_layers, nb = mf__fb_nblk(m), u, bf16 = mf__attn_bf16(ctx);
    long D = m->cfg.d_model;
    MF__PARFOR(ctx, 4 * N + 1, 2.0 * m->cfg.d_model * m->cfg.d_ff)
    for (u = 0; u <= 4 * N; u++) { /* one piece each (the key/value blocks together) */
        int i;
        mf_tensor *w, *b;
        if (u == 4 * N) {
            for (i = 0; i < nb; i++) {
                mf__fb_kv_block(m, i, &w, &b);
                mf__fb_pack_weight(mf__fb_piece(m, P, 0, MF__FB_KV), w, i, nb, fwd);
            }
            if (bf16) mf__bf16_round_n(mf__fb_piece(m, P, 0, MF__FB_KV), mf__fb_piece(m, P, 0, MF__FB_KV), NULL, nb * D * D);
        } else {
            const mf__layer *L = &m->layers[u / 4];
            const mf__fb_layer *A = MF__FB_L(m, u / 4);
            mf_tensor *piece[4];
            float *pc = mf__fb_piece(m, P, u / 4, u % 4);
            piece[MF__FB_Q] = A->wq; piece[MF__FB_OUT] = A->wo; piece[MF__FB_FC1] = L->fc1_w; piece[MF__FB_FC2] = L->fc2_w;
            mf__fb_pack_weight(pc, piece[u % 4], 0, 1, fwd);
            if (bf16) mf__bf16_round_n(pc, pc, NULL, (long)piece[u % 4]->ne); /* bf16 products: once per call */
        }
    }
}

/* ---- the feedback transformer: one forward call's state and buffers ----------------------------- */
typedef struct mf__fb_fwd {
    mf_model *m;
    int B, T, pos0, gen;
    int cap;             /* slots the slot buffer holds (training: T; generation: max_seq) */
    int nr;              /* rows of the relative tables this call reads: the last pos0 + T */
    float drop;          /* dropout p; 0 when not training */
    uint64_t stream;     /* dropout RNG stream of this call */
    mf__attn_drop adrop; /* attention-probability dropout (its own stream): a_j of layer l, step t, row b,
                            head h is element (((l T + t) B + b) H + h) nr + j (mf__fb_layer_attn) */
    float *sw;           /* softmax(w) [N + 1] */
    float *wf;           /* the weights packed for the forward (mf__fb_pack) */
    float *slots;        /* [nblk][B][H][2][...] keys / values per block and head: [cap][dk] rows,
                            then transposed [dk][cap] (see mf__fb_attn) */
    float *rh, *rt, *sh; /* [N][H][nr][dk], [N][H][dk][nr], [N][H][nr]: the tables' last nr rows */
    float *qu, *work;    /* mf__fb_attn scratch */
    float *hs;           /* [N + 1][T][B][D] the embedding and each layer's output */
    float *z, *q, *o;    /* [N][T][B][D] LN_att output, query, attention output (steps >= 1) */
    float *xm, *y2;      /* [N][T][B][D] after the attention sub-layer, LN_ff output */
    float *a1, *g1;      /* [N][T][B][F] FFN pre-activation, activation (after dropout) */
    float *st1, *st2;    /* [N][T][B][2] LayerNorm mean, 1/std */
    float *lse;          /* [N][T][B][H] attention log-sum-exp */
    float *mem;          /* [T][B][D] the memories m_t */
    float *tmp;          /* [B][max(D, ld)] scratch */
    float *rb;           /* [B][max(ld, F)]: the bf16 copy of a product's row operand (bf16 products,
                            mf__fb_in); NULL in fp32 */
} mf__fb_fwd;
/* x [rows][n] as a product of the recurrence reads it: rounded to bf16 into rb (a CPU context in
   MF_PREC_BF16: the packed weights are rounded too, mf__fb_pack; docs/math.md §22.5), or x */
static const float *mf__fb_in(float *rb, const float *x, int rows, int n) {
    return rb ? mf__bf16_rows(rb, x, n, rows, n) : x;
}

/* row block of layer l, step t in a [layer][T][B][w] buffer */
#define MF__FB_AT(f, buf, l, t, w) ((buf) + ((int64_t)(l) * (f)->T + (t)) * (f)->B * (w))

/* the step-major activations hs .. mem of a forward (the backward reads them), in the context's
   arena: the same layout on the CPU and the device */
static void mf__fb_alloc_steps(mf_ctx *ctx, mf__fb_fwd *f) {
    const mf_model_config *c = &f->m->cfg;
    int D = c->d_model, F = c->d_ff, H = c->n_heads, N = c->n_layers;
    size_t tb = (size_t)f->T * f->B, fl = sizeof(float);
    f->hs = (float *)mf__alloc_data(ctx, (size_t)(N + 1) * tb * D * fl);
    f->z = (float *)mf__alloc_data(ctx, N * tb * D * fl);
    f->q = (float *)mf__alloc_data(ctx, N * tb * D * fl);
    f->o = (float *)mf__alloc_data(ctx, N * tb * D * fl);
    f->xm = (float *)mf__alloc_data(ctx, N * tb * D * fl);
    f->y2 = (float *)mf__alloc_data(ctx, N * tb * D * fl);
    f->a1 = (float *)mf__alloc_data(ctx, N * tb * F * fl);
    f->g1 = (float *)mf__alloc_data(ctx, N * tb * F * fl);
    f->st1 = (float *)mf__alloc_data(ctx, N * tb * 2 * fl);
    f->st2 = (float *)mf__alloc_data(ctx, N * tb * 2 * fl);
    f->lse = (float *)mf__alloc_data(ctx, N * tb * H * fl);
    f->mem = (float *)mf__alloc_data(ctx, tb * D * fl);
}
/* sw = softmax(w) over the n = layers + 1 layer weights (on the device: one thread) */
static MF__HD void mf__fb_softmax_w(float *sw, const float *w, int n) {
    float mx = -INFINITY, sum = 0.0f;
    int l;
    for (l = 0; l < n; l++) if (w[l] > mx) mx = w[l];
    for (l = 0; l < n; l++) sum += sw[l] = expf(w[l] - mx);
    for (l = 0; l < n; l++) sw[l] /= sum;
}

/* y [rows][N] = x [rows][K] W^T + b, W packed (b may be NULL) */
static void mf__fb_linear(mf_ctx *ctx, const float *x, float *W, int K, int N, const mf_tensor *b, int rows, float *y) {
    mf__fb_pmm(ctx, rows, x, K, W, K, N, b ? b->data : NULL, y, N, 0);
}
/* dx += the LayerNorm backward of dy for x [rows][D] (g, b: the LN's parameters; their gradients
   are added when they take one): the layernorm op's own backward, on headers on the stack */
static void mf__fb_layernorm_backward(mf_ctx *ctx, float *x, float *st, mf_tensor *g, mf_tensor *b, float *dy,
                                      float *dx, int rows, int D) {
    mf_tensor in, out;
    int shape[2];
    shape[0] = rows; shape[1] = D;
    memset(&in, 0, sizeof in); memset(&out, 0, sizeof out);
    mf__set_shape(&in, 2, shape); mf__set_shape(&out, 2, shape);
    in.data = x; in.grad = dx; in.requires_grad = 1;
    out.src[0] = &in; out.src[1] = g; out.src[2] = b; out.grad = dy; out.saved = st;
    mf__layernorm_backward(ctx, &out);
}
/* the FFN activation: y = act(x) (dx == NULL) or dx = act'(x) * dy, n values: the unary op's
   own kernels, on headers on the stack (dx pending: the kernel stores, nothing to zero first) */
static int mf__fb_act_kind(mf_act_kind a) { /* the unary op's kind of the FFN activation (CPU and CUDA) */
    return a == MF_ACT_RELU ? MF__RELU : a == MF_ACT_GELU ? MF__GELU : a == MF_ACT_GELU_TANH ? MF__GELU_TANH : MF__SILU;
}
static void mf__fb_act(mf_ctx *ctx, mf_act_kind a, float *x, float *y, float *dy, float *dx, int n) {
    mf_tensor in, out;
    memset(&in, 0, sizeof in); memset(&out, 0, sizeof out);
    mf__set_shape(&in, 1, &n); mf__set_shape(&out, 1, &n);
    in.data = x; in.grad = dx; in.requires_grad = dx != NULL; in.grad_pending = 1;
    out.src[0] = &in; out.data = y; out.grad = dy;
    out.iarg[MF__ARG_UNARY_KIND] = mf__fb_act_kind(a);
    if (dx) mf__unary_backward(ctx, &out); else mf__unary_forward(ctx, &out);
}
/* the RNG counter of element 0 of the [B][w] dropout block of (site, layer l, step t); the CUDA
   kernels draw the same counters, so CPU and GPU masks agree */
static int64_t mf__fb_drop_base(const mf__fb_fwd *f, int site, int l, int t) {
    const mf_model_config *c = &f->m->cfg;
    int64_t wmax = c->d_ff > c->d_model ? c->d_ff : c->d_model;
    return (((int64_t)site * c->n_layers + l) * f->T + t) * f->B * wmax;
}
/* dropout of the [B][w] block of (site, layer l, step t): sites 0 attention branch, 1 FFN hidden,
   2 FFN branch; x *= 1 / (1 - p) or 0. The backward redraws the same masks. */
static void mf__fb_dropout(const mf_ctx *ctx, const mf__fb_fwd *f, int site, int l, int t, float *x, int w) {
    int64_t e, n = (int64_t)f->B * w, base = mf__fb_drop_base(f, site, l, t);
    float s = 1.0f / (1.0f - f->drop);
    if (f->drop <= 0.0f) return;
    for (e = 0; e < n; e++)
        x[e] = mf__drop_keep(ctx->seed, f->stream, (uint64_t)(base + e), f->drop) ? x[e] * s : 0.0f;
}
/* head (b, h) of key/value block blk: slot buffers [nblk][B][H][2][cap][dk] (rows, then
   transposed), their gradients [nblk][B][H][cap][dk] (rows) */
static int64_t mf__fb_slot_head(const mf__fb_fwd *f, int blk, int b, int h, int grad) {
    const mf_model_config *c = &f->m->cfg;
    return (((int64_t)blk * f->B + b) * c->n_heads + h) * (grad ? 1 : 2) * f->cap * (c->d_model / c->n_heads);
}
/* slot n of every block and head from step-major rows [B][nblk * D] (both layouts) */
static void mf__fb_slot_write(const mf__fb_fwd *f, int n, const float *rows) {
    const mf_model_config *c = &f->m->cfg;
    int D = c->d_model, H = c->n_heads, d = D / H, nb = mf__fb_nblk(f->m), blk, b, h, i;
    for (blk = 0; blk < nb; blk++)
        for (b = 0; b < f->B; b++)
            for (h = 0; h < H; h++) {
                float *s = f->slots + mf__fb_slot_head(f, blk, b, h, 0), *st = s + (int64_t)f->cap * d;
                const float *r = rows + (int64_t)b * nb * D + (int64_t)blk * D + (int64_t)h * d;
                memcpy(s + (int64_t)n * d, r, (size_t)d * sizeof(float));
                for (i = 0; i < d; i++) st[(int64_t)i * f->cap + n] = r[i];
            }
}
/* the gradient of slot n of every block and head as step-major rows [B][nblk * D] */
static void mf__fb_slot_grad(const mf__fb_fwd *f, const float *dslots, int n, float *rows) {
    const mf_model_config *c = &f->m->cfg;
    int D = c->d_model, H = c->n_heads, d = D / H, nb = mf__fb_nblk(f->m), blk, b, h;
    for (blk = 0; blk < nb; blk++)
        for (b = 0; b < f->B; b++)
            for (h = 0; h < H; h++)
                memcpy(rows + (int64_t)b * nb * D + (int64_t)blk * D + (int64_t)h * d,
                       dslots + mf__fb_slot_head(f, blk, b, h, 1) + (int64_t)n * d, (size_t)d * sizeof(float));
}
/* layer l's attention at a step with n memory slots: query q, output o, log-sum-exp lse (rows of
   the batch) */
static mf__fb_attn mf__fb_layer_attn(const mf__fb_fwd *f, int l, int n, const float *q, float *o, float *lse) {
    const mf_model_config *c = &f->m->cfg;
    int D = c->d_model, H = c->n_heads, d = D / H, kv = c->mixer == MF_MIXER_FEEDBACK ? 2 * l : 0;
    mf__fb_attn a;
    memset(&a, 0, sizeof a);
    a.B = f->B; a.H = H; a.d = d; a.n = n; a.scale = 1.0f / sqrtf((float)d);
    a.q = q; a.u = MF__FB_L(f->m, l)->rel_u->data;
    a.k = f->slots + mf__fb_slot_head(f, kv, 0, 0, 0); a.kt = a.k + (int64_t)f->cap * d;
    a.v = f->slots + mf__fb_slot_head(f, kv + 1, 0, 0, 0); a.vt = a.v + (int64_t)f->cap * d;
    a.sh = 2 * (int64_t)f->cap * d; a.sb = a.sh * H; a.ldt = f->cap;
    a.dsh = (int64_t)f->cap * d; a.dsb = a.dsh * H;
    a.nr = f->nr;
    a.r = f->rh + (int64_t)l * H * f->nr * d; a.rt = f->rt + (int64_t)l * H * f->nr * d; a.s = f->sh + (int64_t)l * H * f->nr;
    a.qu = f->qu; a.work = f->work; a.o = o; a.lse = lse;
    a.drop = f->adrop; a.dld = f->nr; a.dbase = ((int64_t)l * f->T + (n - f->pos0)) * f->B * H * f->nr;
    return a;
}

/* Attention inspection (mf_model_attention): the maps of layer l at step t recomputed with plain loops
   (slot j is key column j; the steps start at position 0), and the output a->o replaced by the one
   made from them */
static void mf__fb_probe(const mf__fb_fwd *f, int l, int t, const mf__fb_attn *a) {
    mf__probe *p = f->m->probe;
    int D = a->H * a->d, d = a->d, n = a->n, b, h, j, c;
    for (b = 0; b < a->B; b++)
        for (h = 0; h < a->H; h++) {
            const float *q = a->q + (int64_t)b * D + (int64_t)h * d, *u = a->u + (int64_t)h * d, *pr;
            float *o = a->o + (int64_t)b * D + (int64_t)h * d;
            for (j = 0; j < n; j++) { /* scale ((q + u) . k_j + q . r_j + s_j), row nr - n + j of the tables */
                const float *k = a->k + b * a->sb + h * a->sh + (int64_t)j * d;
                const float *r = a->r + ((int64_t)h * a->nr + a->nr - n + j) * d;
                double s = a->s[(int64_t)h * a->nr + a->nr - n + j];
                for (c = 0; c < d; c++) s += ((double)q[c] + u[c]) * k[c] + (double)q[c] * r[c];
                p->sc[j] = (float)(a->scale * s);
            }
            pr = mf__probe_softmax(p, l, b, h, t, 0, n, n);
            for (c = 0; c < d; c++) o[c] = 0.0f;
            for (j = 0; j < n; j++)
                for (c = 0; c < d; c++) o[c] += pr[j] * a->v[b * a->sb + h * a->sh + (int64_t)j * d + c];
        }
}

/* ---- forward: step t of the whole batch --------------------------------------------------------- */
static void mf__fb_step(mf_ctx *ctx, mf__fb_fwd *f, int t) {
    const mf_model_config *c = &f->m->cfg;
    int B = f->B, D = c->d_model, F = c->d_ff, H = c->n_heads, N = c->n_layers, l, i;
    int n = f->pos0 + t; /* memory slots before this step */
    int64_t e, bd = (int64_t)B * D;
    float *mem = f->mem + (int64_t)t * bd;
    for (l = 0; l < N && mf_ok(ctx); l++) {
        const mf__layer *L = &f->m->layers[l];
        const mf__fb_layer *A = MF__FB_L(f->m, l);
        float *x = MF__FB_AT(f, f->hs, l, t, D), *xm = MF__FB_AT(f, f->xm, l, t, D), *y = MF__FB_AT(f, f->hs, l + 1, t, D);
        float *y2 = MF__FB_AT(f, f->y2, l, t, D), *a1 = MF__FB_AT(f, f->a1, l, t, F), *g1 = MF__FB_AT(f, f->g1, l, t, F);
        if (n > 0) { /* x = x + drop(out(attention(q = LN_att(x) Wq^T, memory))) */
            float *z = MF__FB_AT(f, f->z, l, t, D), *q = MF__FB_AT(f, f->q, l, t, D), *o = MF__FB_AT(f, f->o, l, t, D);
            float *lse = MF__FB_AT(f, f->lse, l, t, H);
            mf__layernorm_rows(ctx, x, L->ln1_w, L->ln1_b, c->ln_eps, B, D, z, MF__FB_AT(f, f->st1, l, t, 2));
            { /* q = z Wq^T, then the attention */
                mf__fb_attn a = mf__fb_layer_attn(f, l, n, q, o, lse);
                a.pin = mf__fb_in(f->rb, z, B, D); a.pw = mf__fb_piece(f->m, f->wf, l, MF__FB_Q);
                mf__fb_attn_forward(ctx, &a);
                if (f->m->probe) mf__fb_probe(f, l, t, &a);
            }
            mf__fb_linear(ctx, mf__fb_in(f->rb, o, B, D), mf__fb_piece(f->m, f->wf, l, MF__FB_OUT), D, D, A->bo, B, f->tmp);
            mf__fb_dropout(ctx, f, 0, l, t, f->tmp, D);
            for (e = 0; e < bd; e++) xm[e] = x[e] + f->tmp[e];
        } else memcpy(xm, x, (size_t)bd * sizeof(float)); /* no memory yet: no attention sub-layer */
        /* x = x + drop(fc2(drop(act(fc1(LN_ff(x)))))) */
        mf__layernorm_rows(ctx, xm, L->ln2_w, L->ln2_b, c->ln_eps, B, D, y2, MF__FB_AT(f, f->st2, l, t, 2));
        mf__fb_linear(ctx, mf__fb_in(f->rb, y2, B, D), mf__fb_piece(f->m, f->wf, l, MF__FB_FC1), D, F, L->fc1_b, B, a1);
        mf__fb_act(ctx, c->ffn_act, a1, g1, NULL, NULL, B * F);
        mf__fb_dropout(ctx, f, 1, l, t, g1, F);
        mf__fb_linear(ctx, mf__fb_in(f->rb, g1, B, F), mf__fb_piece(f->m, f->wf, l, MF__FB_FC2), F, D, L->fc2_b, B, f->tmp);
        mf__fb_dropout(ctx, f, 2, l, t, f->tmp, D);
        for (e = 0; e < bd; e++) y[e] = xm[e] + f->tmp[e];
    }
    /* m_t = sum_l softmax(w)[l] hs_t[l]; its keys/values go to slot n (in training the last
       step's slot is never read: only generation continues from it) */
    for (e = 0; e < bd; e++) mem[e] = 0.0f;
    for (l = 0; l <= N; l++) {
        const float *h = MF__FB_AT(f, f->hs, l, t, D);
        for (e = 0; e < bd; e++) mem[e] += f->sw[l] * h[e];
    }
    if (t < f->T - 1 || f->gen) {
        int nb = mf__fb_nblk(f->m), ld = nb * D, b, j;
        mf__fb_pmm(ctx, B, mf__fb_in(f->rb, mem, B, D), D, mf__fb_piece(f->m, f->wf, 0, MF__FB_KV), D, ld, NULL, f->tmp, ld, 0);
        for (i = 0; i < nb; i++) {
            mf_tensor *w, *bias;
            mf__fb_kv_block(f->m, i, &w, &bias);
            if (bias) for (b = 0; b < B; b++) for (j = 0; j < D; j++) f->tmp[(int64_t)b * ld + (int64_t)i * D + j] += bias->data[j];
        }
        mf__fb_slot_write(f, n, f->tmp);
    }
}

static int mf__fb_shape(mf_ctx *ctx, mf_tensor *out) {
    const mf__fb_fwd *f = (const mf__fb_fwd *)out->aux;
    const mf_tensor *x = out->src[0];
    char s[64];
    if (x->ndim != 3 || x->shape[2] != f->m->cfg.d_model)
        return MF__SHAPE_FAIL("feedback: the input must be [B, T, d_model = %d], got %s", f->m->cfg.d_model,
                              mf_shape_str(x, s, 64));
    mf__set_shape(out, 3, x->shape);
    return 0;
}

static void mf__fb_forward(mf_ctx *ctx, mf_tensor *out) {
    mf__fb_fwd *f = (mf__fb_fwd *)out->aux;
    mf_model *m = f->m;
    const mf_model_config *c = &m->cfg;
    int B = f->B, T = f->T, D = c->d_model, H = c->n_heads, N = c->n_layers, t, b, l;
    size_t tb = (size_t)T * B, fl = sizeof(float), ld = (size_t)mf__fb_nblk(m) * D;
    f->sw = (float *)mf__alloc(ctx, (size_t)(N + 1) * fl);
    f->rh = (float *)mf__alloc(ctx, (size_t)N * f->nr * D * fl);
    f->rt = (float *)mf__alloc(ctx, (size_t)N * f->nr * D * fl);
    f->sh = (float *)mf__alloc(ctx, (size_t)N * f->nr * H * fl);
    f->qu = (float *)mf__alloc(ctx, (size_t)B * D * fl);
    f->work = (float *)mf__alloc(ctx, (size_t)(H * mf__fb_attn_work(B, f->nr, D / H)) * fl);
    mf__fb_alloc_steps(ctx, f);
    f->tmp = (float *)mf__alloc(ctx, (size_t)B * ld * fl);
    f->rb = mf__attn_bf16(ctx) ? (float *)mf__alloc(ctx, (size_t)B * (ld > (size_t)c->d_ff ? ld : (size_t)c->d_ff) * fl) : NULL;
    if (!f->gen) f->slots = (float *)mf__alloc(ctx, 2 * tb * ld * fl);
    if (!f->gen) f->wf = (float *)mf__alloc(ctx, (size_t)mf__fb_packed_floats(m) * fl);
    if (!mf_ok(ctx)) return;
    if (!f->gen || f->pos0 == 0) mf__fb_pack(ctx, m, f->wf, 1); /* generation: once, at the prompt */
    for (l = 0; l < N; l++) {
        int64_t o = (int64_t)l * H * f->nr;
        mf__fb_table_rows(f->rh + o * (D / H), f->rt + o * (D / H), MF__FB_L(m, l)->rel_r->data, MF__FB_P, H, D / H, f->nr, 0);
        mf__fb_table_rows(f->sh + o, NULL, MF__FB_L(m, l)->rel_s->data, MF__FB_P, H, 1, f->nr, 0);
    }
    mf__fb_softmax_w(f->sw, MF__FB_S(m)->w->data, N + 1);
    for (b = 0; b < B; b++) /* [B][T][D] -> step-major hs[0] [T][B][D] */
        for (t = 0; t < T; t++)
            memcpy(f->hs + ((int64_t)t * B + b) * D, out->src[0]->data + ((int64_t)b * T + t) * D, (size_t)D * fl);
    for (t = 0; t < T && mf_ok(ctx); t++) mf__fb_step(ctx, f, t);
    for (b = 0; b < B; b++)
        for (t = 0; t < T; t++)
            memcpy(out->data + ((int64_t)b * T + t) * D, MF__FB_AT(f, f->hs, N, t, D) + (int64_t)b * D, (size_t)D * fl);
}

/* ---- backward ------------------------------------------------------------------------------------ */
typedef struct mf__fb_grads {
    float *wb;           /* the weights packed for the backward (mf__fb_pack) */
    float *slots;        /* [nblk][B][H][T][dk] gradients of the slots' keys / values (rows) */
    float *kv;           /* [T][B][ld] the same, step-major (for the weight gradients) */
    float *rh, *sh;      /* [N][H][nr][dk], [N][H][nr] gradients of the tables' last rows */
    float *q, *ao, *fo;  /* [N][T][B][D] d query, d attention branch (out-proj output), d FFN branch */
    float *a1;           /* [N][T][B][F] d FFN pre-activation */
    float *dsw;          /* [N + 1] d softmax(w) */
    float *dh, *dm, *dd; /* [B][D] step scratch: d hs, d m_t, d (LN input / attention output) */
    float *df;           /* [B][F] step scratch */
} mf__fb_grads;

/* backward of step t (training: slots before step t = t) */
static void mf__fb_step_backward(mf_ctx *ctx, const mf__fb_fwd *f, mf__fb_grads *g, const float *dout, float *dx, int t) {
    const mf_model_config *c = &f->m->cfg;
    int B = f->B, T = f->T, D = c->d_model, F = c->d_ff, H = c->n_heads, N = c->n_layers, l, b;
    int nb = mf__fb_nblk(f->m), ld = nb * D;
    int64_t e, bd = (int64_t)B * D;
    int has_dm = t < T - 1; /* slot t is read by the later steps */
    float *dh = g->dh, *dm = g->dm, *dd = g->dd, *df = g->df;
    if (has_dm) { /* the readers of slot t are done: dm_t = dK|dV_t Wkv; dsw[l] += dm_t . hs_t[l] */
        float *kv = g->kv + (int64_t)t * B * ld;
        mf__fb_slot_grad(f, g->slots, t, kv);
        mf__fb_pmm(ctx, B, mf__fb_in(f->rb, kv, B, ld), ld, mf__fb_piece(f->m, g->wb, 0, MF__FB_KV), ld, D, NULL, dm, D, 0);
        for (l = 0; l <= N; l++) g->dsw[l] += mf__vdot((int)bd, dm, MF__FB_AT(f, f->hs, l, t, D), MF__TAIL_SCALAR);
    }
    for (b = 0; b < B; b++) memcpy(dh + (int64_t)b * D, dout + ((int64_t)b * T + t) * D, (size_t)D * sizeof(float));
    if (has_dm) mf__vaxpy((int)bd, f->sw[N], dm, dh, MF__TAIL_SCALAR);
    for (l = N - 1; l >= 0 && mf_ok(ctx); l--) {
        mf__layer *L = &f->m->layers[l];
        float *fo = MF__FB_AT(f, g->fo, l, t, D), *da1 = MF__FB_AT(f, g->a1, l, t, F);
        /* FFN: y = xm + drop(fc2(drop(act(a1)))), a1 = fc1(LN_ff(xm)) */
        memcpy(fo, dh, (size_t)bd * sizeof(float));
        mf__fb_dropout(ctx, f, 2, l, t, fo, D);
        mf__fb_pmm(ctx, B, mf__fb_in(f->rb, fo, B, D), D, mf__fb_piece(f->m, g->wb, l, MF__FB_FC2), D, F, NULL, df, F, 0);
        mf__fb_dropout(ctx, f, 1, l, t, df, F);
        mf__fb_act(ctx, c->ffn_act, MF__FB_AT(f, f->a1, l, t, F), MF__FB_AT(f, f->g1, l, t, F), df, da1, B * F);
        mf__fb_pmm(ctx, B, mf__fb_in(f->rb, da1, B, F), F, mf__fb_piece(f->m, g->wb, l, MF__FB_FC1), F, D, NULL, dd, D, 0);
        mf__fb_layernorm_backward(ctx, MF__FB_AT(f, f->xm, l, t, D), MF__FB_AT(f, f->st2, l, t, 2), L->ln2_w, L->ln2_b,
                                  dd, dh, B, D);
        if (t > 0) { /* attention: xm = x + drop(out(o)), o = attention(q = LN_att(x) Wq^T) */
            float *ao = MF__FB_AT(f, g->ao, l, t, D), *dq = MF__FB_AT(f, g->q, l, t, D);
            const float *q = MF__FB_AT(f, f->q, l, t, D), *o = MF__FB_AT(f, f->o, l, t, D), *lse = MF__FB_AT(f, f->lse, l, t, H);
            memcpy(ao, dh, (size_t)bd * sizeof(float));
            mf__fb_dropout(ctx, f, 0, l, t, ao, D);
            memset(dq, 0, (size_t)bd * sizeof(float));
            { /* dd = ao Wo (the out projection's input gradient), then the attention's backward */
                mf__fb_attn a = mf__fb_layer_attn(f, l, t, q, (float *)o, (float *)lse);
                int kv = c->mixer == MF_MIXER_FEEDBACK ? 2 * l : 0;
                int64_t rows = (int64_t)l * H * f->nr;
                a.pin = mf__fb_in(f->rb, ao, B, D); a.pw = mf__fb_piece(f->m, g->wb, l, MF__FB_OUT);
                a.dout = dd; a.dq = dq; a.du = mf__g(MF__FB_L(f->m, l)->rel_u);
                a.dk = g->slots + mf__fb_slot_head(f, kv, 0, 0, 1); a.dv = g->slots + mf__fb_slot_head(f, kv + 1, 0, 0, 1);
                a.dr = g->rh + rows * (D / H); a.ds = g->sh + rows;
                mf__fb_attn_backward(ctx, &a);
            }
            mf__fb_pmm(ctx, B, mf__fb_in(f->rb, dq, B, D), D, mf__fb_piece(f->m, g->wb, l, MF__FB_Q), D, D, NULL, dd, D, 0);
            mf__fb_layernorm_backward(ctx, MF__FB_AT(f, f->hs, l, t, D), MF__FB_AT(f, f->st1, l, t, 2), L->ln1_w, L->ln1_b,
                                      dd, dh, B, D);
        }
        if (has_dm) mf__vaxpy((int)bd, f->sw[l], dm, dh, MF__TAIL_SCALAR); /* hs_t[l] also feeds m_t */
    }
    if (dx) for (b = 0; b < B; b++) for (e = 0; e < D; e++) dx[((int64_t)b * T + t) * D + e] += dh[(int64_t)b * D + e];
}

/* dW += dY^T X over rows (X [rows][in], dY [rows][out] with row stride ldy); db += column sums */
static void mf__fb_weight_grad(mf_ctx *ctx, mf_tensor *w, mf_tensor *bias, const float *dy, int ldy, const float *x,
                               int rows) {
    int out = w->shape[0], in = w->shape[1], r, j;
    float *gw = mf__g(w), *gb = mf__g(bias);
    if (rows <= 0) return;
    if (gw) mf__fb_mm(ctx, 1, 0, out, in, rows, dy, ldy, x, in, 1.0f, gw, in);
    if (gb && ldy == out) mf__colsum(ctx, dy, NULL, NULL, rows, out, gb, NULL);
    else if (gb) for (r = 0; r < rows; r++) for (j = 0; j < out; j++) gb[j] += dy[(int64_t)r * ldy + j];
}

static void mf__fb_backward(mf_ctx *ctx, mf_tensor *out) {
    const mf__fb_fwd *f = (const mf__fb_fwd *)out->aux;
    mf_model *m = f->m;
    const mf_model_config *c = &m->cfg;
    int B = f->B, T = f->T, D = c->d_model, F = c->d_ff, H = c->n_heads, N = c->n_layers, nb = mf__fb_nblk(m), t, l, i;
    size_t tb = (size_t)T * B, fl = sizeof(float), ld = (size_t)nb * D;
    int64_t r1 = (int64_t)B * D;  /* attention rows start at step 1 */
    float *gw = mf__g(MF__FB_S(m)->w);
    mf__fb_grads g;
    if (f->gen || f->pos0 != 0) { mf__fail(ctx, "feedback: generation steps have no backward"); return; }
    g.wb = (float *)mf__alloc(ctx, (size_t)mf__fb_packed_floats(m) * fl);
    g.slots = (float *)mf__calloc(ctx, tb * ld * fl);
    g.kv = (float *)mf__alloc(ctx, tb * ld * fl);      /* rows of slots 0 .. T-2 are written and read */
    g.rh = (float *)mf__calloc(ctx, (size_t)N * f->nr * D * fl);
    g.sh = (float *)mf__calloc(ctx, (size_t)N * f->nr * H * fl);
    g.q = (float *)mf__alloc(ctx, N * tb * D * fl);
    g.ao = (float *)mf__alloc(ctx, N * tb * D * fl);
    g.fo = (float *)mf__alloc(ctx, N * tb * D * fl);
    g.a1 = (float *)mf__alloc(ctx, N * tb * F * fl);
    g.dsw = (float *)mf__calloc(ctx, (size_t)(N + 1) * fl);
    g.dh = (float *)mf__alloc(ctx, (size_t)B * D * fl);
    g.dm = (float *)mf__alloc(ctx, (size_t)B * D * fl);
    g.dd = (float *)mf__alloc(ctx, (size_t)B * D * fl);
    g.df = (float *)mf__alloc(ctx, (size_t)B * F * fl);
    if (!mf_ok(ctx)) return;
    mf__fb_pack(ctx, m, g.wb, 0);
    for (t = T - 1; t >= 0 && mf_ok(ctx); t--) mf__fb_step_backward(ctx, f, &g, out->grad, mf__g(out->src[0]), t);
    /* the weight gradients of all steps at once */
    for (l = 0; l < N; l++) {
        const mf__layer *L = &m->layers[l];
        const mf__fb_layer *A = MF__FB_L(m, l);
        int64_t at = (int64_t)l * tb * D, af = (int64_t)l * tb * F;
        mf__fb_weight_grad(ctx, A->wq, NULL, g.q + at + r1, D, f->z + at + r1, (T - 1) * B);
        mf__fb_weight_grad(ctx, A->wo, A->bo, g.ao + at + r1, D, f->o + at + r1, (T - 1) * B);
        mf__fb_weight_grad(ctx, L->fc1_w, L->fc1_b, g.a1 + af, F, f->y2 + at, T * B);
        mf__fb_weight_grad(ctx, L->fc2_w, L->fc2_b, g.fo + at, D, f->g1 + af, T * B);
        if (mf__g(A->rel_r)) mf__fb_table_rows(g.rh + (int64_t)l * H * f->nr * (D / H), NULL, A->rel_r->grad, MF__FB_P, H, D / H, f->nr, 1);
        if (mf__g(A->rel_s)) mf__fb_table_rows(g.sh + (int64_t)l * H * f->nr, NULL, A->rel_s->grad, MF__FB_P, H, 1, f->nr, 1);
    }
    for (i = 0; i < nb; i++) { /* slots 0 .. T-2 are read */
        mf_tensor *w, *bias;
        mf__fb_kv_block(m, i, &w, &bias);
        mf__fb_weight_grad(ctx, w, bias, g.kv + (int64_t)i * D, (int)ld, f->mem, (T - 1) * B);
    }
    if (gw) { /* softmax backward: dw_i = sw_i (dsw_i - sum_j sw_j dsw_j) */
        float dot = mf__vdot(N + 1, f->sw, g.dsw, MF__TAIL_SCALAR);
        for (l = 0; l <= N; l++) gw[l] += f->sw[l] * (g.dsw[l] - dot);
    }
}
static const mf__op mf__op_feedback = { "feedback", 1, mf__fb_shape, mf__fb_forward, mf__fb_backward, MF__OP_PROPS(0) };

/* ---- model hooks ----------------------------------------------------------------------------------- */
static int mf__fb_check(mf_ctx *ctx, const mf_model_config *c) {
    if (c->max_seq > MF__FB_P)
        return (mf__fail(ctx, "model config: max_seq %d is too long for the %s mixer: its memory holds at most P = %d "
                         "steps (the rows of the relative position tables); use max_seq <= %d", c->max_seq,
                         mf_mixer_name(c->mixer), MF__FB_P, MF__FB_P), -1);
    return 0;
}

/* the attention parameters of layer l (docs/math.md §8.1); LN_att (ln1), LN_ff and the FFN are the block's */
static void mf__fb_make_layer(mf_model *m, int l) {
    mf_ctx *ctx = m->ctx;
    mf__fb_layer *A = MF__FB_L(m, l);
    int D = m->cfg.d_model, H = m->cfg.n_heads, shape[3];
    char nm[96];
    mf_tensor *unused;
    mf__layer_linear(m, l, "attn.q", D, D, 0, &A->wq, &unused);
    if (m->cfg.mixer == MF_MIXER_FEEDBACK) {
        mf__layer_linear(m, l, "attn.k", D, D, 0, &A->wk, &unused);
        mf__layer_linear(m, l, "attn.v", D, D, 1, &A->wv, &A->bv);
    }
    mf__layer_linear(m, l, "attn.out", D, D, 1, &A->wo, &A->bo);
    A->rel_u = mf__layer_param(m, l, "attn.u", 2, H, D / H);
    shape[0] = MF__FB_P; shape[1] = H; shape[2] = D / H; /* [P, H, dk]: three dims, so not mf__layer_param */
    snprintf(nm, sizeof nm, "layers.%d.attn.r", l);
    A->rel_r = mf_param(ctx, nm, 3, shape);
    A->rel_s = mf__layer_param(m, l, "attn.s", 2, MF__FB_P, H);
    mf_init_const(ctx, A->rel_u, 0.0f); /* the relative tables start at zero (docs/math.md §3.1) */
    mf_init_const(ctx, A->rel_r, 0.0f);
    mf_init_const(ctx, A->rel_s, 0.0f);
}

/* the state, and the model-level parameters: layer weights w [N + 1] = 1; KV: the shared k, v (bias-free) */
static void mf__fb_init(mf_model *m) {
    mf_ctx *ctx = m->ctx;
    int n = m->cfg.n_layers + 1, shape[2];
    struct mf__fb_state *s = (struct mf__fb_state *)mf__xmalloc(sizeof *s);
    if (!s) { mf__fail(ctx, "out of memory: feedback state"); return; }
    memset(s, 0, sizeof *s);
    m->fam_state = s;
    s->w = mf_param(ctx, "feedback.weights", 1, &n);
    mf_init_const(ctx, s->w, 1.0f);
    if (m->cfg.mixer == MF_MIXER_FEEDBACK_KV) {
        shape[0] = shape[1] = m->cfg.d_model;
        s->wk = mf_param(ctx, "feedback.k.weight", 2, shape);
        mf_init_kaiming_uniform(ctx, s->wk);
        s->wv = mf_param(ctx, "feedback.v.weight", 2, shape);
        mf_init_kaiming_uniform(ctx, s->wv);
    }
}
static void mf__fb_free(mf_model *m) {
    struct mf__fb_state *s = MF__FB_S(m);
    if (!s) return;
    mf__model_dfree(m, s->slots); /* a device buffer on CUDA (the context is still alive) */
    MF_FREE(s->wf);
    MF_FREE(s);
    m->fam_state = NULL;
}

/* x [B, T, D] (embeddings) -> the last layer's outputs [B, T, D]; gen: batch 1, continuing the
   generation state after pos0 tokens (pos0 = 0: start over) */
static mf_tensor *mf__fb_run(mf_model *m, mf_tensor *x, int pos0, int gen) {
    mf_ctx *ctx = m->ctx;
    const mf_model_config *c = &m->cfg;
    struct mf__fb_state *st = MF__FB_S(m);
    mf__fb_fwd *f;
    mf_tensor *t;
    int B, T, l, i;
    if (!mf_ok(ctx) || !x) return NULL;
    B = x->shape[0]; T = x->ndim == 3 ? x->shape[1] : 0;
    if (pos0 < 0 || pos0 + T > c->max_seq)
        return (mf_tensor *)mf__fail(ctx, "feedback: %d memory slots needed (%d tokens from position %d) but the memory "
                                     "holds max_seq = %d; raise max_seq in the config (at most %d)", pos0 + T, T, pos0,
                                     c->max_seq, MF__FB_P);
    if (gen && pos0 > 0 && (B != 1 || pos0 != st->n_slots))
        return (mf_tensor *)mf__fail(ctx, "feedback: generation continues after %d tokens (batch 1) but got position %d, "
                                     "batch %d; start with position 0", st->n_slots, pos0, B);
    if (!gen && pos0 != 0)
        return (mf_tensor *)mf__fail(ctx, "feedback: a forward starts at position 0 (memory resets every call)");
    if (!(f = (mf__fb_fwd *)mf__calloc(ctx, sizeof *f))) return NULL;
    f->m = m; f->B = B; f->T = T; f->pos0 = pos0; f->gen = gen;
    f->cap = gen ? c->max_seq : T;
    f->nr = pos0 + T;
    f->drop = ctx->training ? c->dropout : 0.0f;
    if (f->drop > 0.0f) f->stream = ctx->rng_calls++;
    f->adrop = mf__attn_drop_make(ctx->seed, ctx->rng_calls, ctx->training ? c->attn_dropout : 0.0f);
    if (f->adrop.p > 0.0f) ctx->rng_calls++;
    if (gen) { /* the memory and the packed weights persist between the calls (allocated once); on
                  CUDA the slots are a device buffer [nblk][max_seq][D] and nothing is packed */
        size_t slots = (ctx->be ? 1 : 2) * (size_t)c->max_seq * mf__fb_nblk(m) * c->d_model;
        if (B != 1) return (mf_tensor *)mf__fail(ctx, "feedback: generation runs batch 1, got %d", B);
        if (!st->slots) st->slots = (float *)mf__dmalloc(ctx, slots * sizeof(float), "feedback generation memory");
        if (!st->wf && !ctx->be) st->wf = (float *)mf__xmalloc((size_t)mf__fb_packed_floats(m) * sizeof(float));
        if (!st->slots || (!st->wf && !ctx->be))
            return (mf_tensor *)mf__fail(ctx, "out of memory: feedback generation memory (%d slots)", c->max_seq);
        f->slots = st->slots; f->wf = st->wf;
        st->n_slots = 0; /* valid again when this call succeeds */
    }
    t = mf__begin(ctx, &mf__op_feedback, x, st->w, st->wk, st->wv);
    if (!t) return NULL;
    t->aux = f;
    if (ctx->grad_enabled && !gen) /* the node takes a gradient when any parameter it reads does */
        for (l = 0; l < c->n_layers; l++)
            for (i = 0; i < m->layers[l].np; i++) {
                mf_tensor *p = mf_param_at(ctx, m->layers[l].p0 + i);
                if (!p->requires_grad) continue;
                t->requires_grad = 1;
                ctx->p_touched[mf__param_index(ctx, p)] = 1;
            }
    t = mf__finish(ctx, t);
    if (t && gen) st->n_slots = pos0 + T;
    return t;
}

/* q and out per layer (feedback: and its k, v; feedback_kv: one shared k, v); the attention over the
   earlier steps only (keys - 1 of them) with its relative terms */
static double mf__fb_flops(const mf_model_config *c, int T, double keys) {
    double D = c->d_model, N = c->n_layers, kv = 2 * 2.0 * D * D;
    (void)T;
    return N * (2 * 2.0 * D * D + 3.0 / 2.0 * 2.0 * 2.0 * D * (keys - 1) + (c->mixer == MF_MIXER_FEEDBACK ? kv : 0)) +
           (c->mixer == MF_MIXER_FEEDBACK_KV ? kv : 0);
}
static const mf__family mf__fam_feedback = {
    "feedback", sizeof(mf__fb_layer), MF__F(ATTN_DROPOUT),
    mf__fb_check, mf__fb_make_layer, mf__fb_init, mf__fb_free, NULL, mf__fb_run, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, mf__fb_flops
};
#endif /* METAFORMER_NO_FEEDBACK */

/* ==== [mf:mixers] =========================================================================== */
/* The mixer table: one row per mf_mixer_kind, in enum order (name, kind, family, flags, the
   optional config fields it reads). A family left out by its compile switch keeps its rows
   (names stay known) with family = NULL: mf_model_check names the switch. */
#ifndef METAFORMER_NO_XL
#define MF__FAM_XL &mf__fam_xl
#else
#define MF__FAM_XL NULL
#endif
#ifndef METAFORMER_NO_FASTWEIGHTS
#define MF__DEF_FAST_WEIGHTS &mf__fast_weights_def
#define MF__DEF_LINEAR &mf__linear_def
#else
#define MF__DEF_FAST_WEIGHTS NULL
#define MF__DEF_LINEAR NULL
#endif
#ifndef METAFORMER_NO_FEEDBACK
#define MF__FAM_FB &mf__fam_feedback
#else
#define MF__FAM_FB NULL
#endif
static const mf__mixer_row mf__mixer_rows[MF_MIXER_COUNT] = {
    /* name           kind                   family              switch                       flags
                                                                                              fields read
                                                                                              help */
    {"sdpa",         MF_MIXER_SDPA,         &mf__fam_attention, NULL,                       MF__MIX_LN1 | MF__MIX_PRE_LN | MF__MIX_HEADS | MF__MIX_MAPS | MF__MIX_NONCAUSAL,
                                                                                            MF__F(ATTN_BIAS) | MF__F(ATTN_DROPOUT),
                                                                                            "multi-head scaled dot-product attention (labml MHA)", NULL},
    {"metric",       MF_MIXER_METRIC,       &mf__fam_attention, NULL,                       MF__MIX_LN1 | MF__MIX_PRE_LN | MF__MIX_HEADS | MF__MIX_MAPS | MF__MIX_NONCAUSAL,
                                                                                            MF__F(ATTN_DROPOUT) | MF__F(METRIC_FORM),
                                                                                            "per head p = x Wp, a symmetric metric M: softmax(p M p^T / sqrt(dk)) p (NLP MetaFormer)", NULL},
    {"quadratic",    MF_MIXER_QUADRATIC,    &mf__fam_attention, NULL,                       MF__MIX_LN1 | MF__MIX_PRE_LN | MF__MIX_HEADS | MF__MIX_MAPS | MF__MIX_NONCAUSAL,
                                                                                            MF__F(ATTN_DROPOUT),
                                                                                            "the same with an unconstrained M per head (NLP MetaFormer)", NULL},
    /* pool: its definition (flags, fields, help) makes its row, as mf_mixer_register's does */
    {"pool",         MF_MIXER_POOL,         NULL,               NULL,                       0, 0, NULL, &mf__pool_def},
    {"identity",     MF_MIXER_IDENTITY,     &mf__fam_identity,  NULL,                       MF__MIX_SKIP | MF__MIX_NONCAUSAL, 0,
                                                                                            "no token mixing: the mixer sub-block is skipped (MetaFormer's baseline)", NULL},
    /* relative: ln1 normalises [memories ; x] inside the mixer */
    {"relative",     MF_MIXER_RELATIVE,     MF__FAM_XL,         "METAFORMER_NO_XL",         MF__MIX_LN1 | MF__MIX_HEADS | MF__MIX_MAPS | MF__MIX_FIXED_STATE,
                                                                                            MF__F(MEM_LEN) | MF__F(COMPRESSIVE) | MF__F(C_MEM_LEN) | MF__F(COMPRESSION_RATE) |
                                                                                            MF__F(ATTN_DROPOUT),
                                                                                            "Transformer-XL relative attention over [memories; x]; --compressive: compressive transformer", NULL},
    /* fast_weights: no LayerNorm before the mixer (docs/math.md §7.4) */
    /* fast_weights (no LayerNorm before the mixer, docs/math.md §7.4) and linear (causal = 0 sums W
       and z over the whole sequence, §20.2): definitions, as pool */
    {"fast_weights", MF_MIXER_FAST_WEIGHTS, NULL,               "METAFORMER_NO_FASTWEIGHTS", 0, 0, "", MF__DEF_FAST_WEIGHTS},
    {"linear",       MF_MIXER_LINEAR,       NULL,               "METAFORMER_NO_FASTWEIGHTS", 0, 0, "", MF__DEF_LINEAR},
    /* feedback: ln1 is LN_att, before the query only; the family runs the whole stack */
    {"feedback",     MF_MIXER_FEEDBACK,     MF__FAM_FB,         "METAFORMER_NO_FEEDBACK",   MF__MIX_LN1 | MF__MIX_HEADS | MF__MIX_MAPS,
                                                                                            MF__F(ATTN_DROPOUT),
                                                                                            "feedback transformer, per-layer keys and values (Fan et al.)", NULL},
    {"feedback_kv",  MF_MIXER_FEEDBACK_KV,  MF__FAM_FB,         "METAFORMER_NO_FEEDBACK",   MF__MIX_LN1 | MF__MIX_HEADS | MF__MIX_MAPS,
                                                                                            MF__F(ATTN_DROPOUT),
                                                                                            "feedback transformer, keys and values shared by all layers (labml's script)", NULL},
};
/* ---- mixers made from a definition (mf_mixer_def): the registered ones (mf_mixer_register) and the
   built-in rows that name one (pool); each gets a row and a family of its own whose hooks call the
   definition's (mf__reg_build). Kind MF_MIXER_COUNT + i is registered entry i ---- */
typedef struct mf__reg_mixer {
    mf_mixer_def def;
    mf_mixer_field fields[MF_MIXER_MAX_FIELDS];
    mf__family fam;
    mf__mixer_row row;
} mf__reg_entry;
static mf__reg_entry mf__reg[MF_MIXER_MAX_REGISTERED];
static int mf__n_reg;
static mf__reg_entry mf__builtin_reg[MF_MIXER_COUNT]; /* built on first use, as mf__bf16_detect is */
static void mf__reg_build(mf__reg_entry *e, const mf_mixer_def *def, int kind);

static const mf__mixer_row *mf__mixer_row_of(int kind) {
    if (kind >= 0 && kind < MF_MIXER_COUNT) {
        if (!mf__mixer_rows[kind].def) return &mf__mixer_rows[kind];
        if (!mf__builtin_reg[kind].row.name) {
#ifdef _OPENMP
#pragma omp critical(mf__builtin_rows)
#endif
            if (!mf__builtin_reg[kind].row.name) mf__reg_build(&mf__builtin_reg[kind], mf__mixer_rows[kind].def, kind);
        }
        return &mf__builtin_reg[kind].row;
    }
    if (kind >= MF_MIXER_COUNT && kind < MF_MIXER_COUNT + mf__n_reg) return &mf__reg[kind - MF_MIXER_COUNT].row;
    return NULL;
}

MFDEF int mf_mixer_count(void) { return MF_MIXER_COUNT + mf__n_reg; }
MFDEF const char *mf_mixer_name(mf_mixer_kind kind) {
    const mf__mixer_row *r = mf__mixer_row_of((int)kind);
    return r ? r->name : "unknown";
}
MFDEF int mf_mixer_from_name(const char *name) {
    int i;
    for (i = 0; name && i < mf_mixer_count(); i++) if (strcmp(name, mf__mixer_row_of(i)->name) == 0) return i;
    return -1;
}
MFDEF int mf_mixer_compiled(mf_mixer_kind kind) {
    const mf__mixer_row *r = mf__mixer_row_of((int)kind);
    return r && r->family;
}
MFDEF unsigned mf_mixer_flags(mf_mixer_kind kind) {
    const mf__mixer_row *r = mf__mixer_row_of((int)kind);
    if (!r) return 0;
    return (r->flags & MF__MIX_HEADS ? MF_MIXER_HEADS : 0) | (r->flags & MF__MIX_NONCAUSAL ? MF_MIXER_NONCAUSAL : 0) |
           (r->flags & MF__MIX_FIXED_STATE ? MF_MIXER_FIXED_STATE : 0) |
           (r->family && r->family->memory_slot ? MF_MIXER_MEMORY : 0) |
           (!(r->flags & (MF__MIX_PRE_LN | MF__MIX_SKIP)) ? MF_MIXER_OWN_NORM : 0);
}
MFDEF const char *mf_mixer_help(mf_mixer_kind kind) {
    const mf__mixer_row *r = mf__mixer_row_of((int)kind);
    return r ? r->help : "";
}
MFDEF const mf_mixer_field *mf_mixer_field_of(mf_mixer_kind kind, int i) {
    const mf__mixer_row *r = mf__mixer_row_of((int)kind);
    return r && r->def && i >= 0 && i < r->def->n_fields ? &r->def->fields[i] : NULL;
}
/* index of a field of the config's mixer, or -1 */
static int mf__field_index(const mf_model_config *c, const char *field) {
    const mf__mixer_row *r = c ? mf__mixer_row_of((int)c->mixer) : NULL;
    int i;
    for (i = 0; r && r->def && field && i < r->def->n_fields; i++)
        if (strcmp(r->def->fields[i].name, field) == 0) return i;
    return -1;
}
MFDEF int mf_model_config_set(mf_model_config *c, const char *field, float value) {
    int i = mf__field_index(c, field);
    if (i < 0) return -1;
    c->mixer_field[i] = value;
    c->mixer_field_set |= 1u << i;
    return 0;
}
MFDEF float mf_model_config_get(const mf_model_config *c, const char *field) {
    int i = mf__field_index(c, field);
    if (i < 0) return NAN;
    return c->mixer_field_set >> i & 1u ? c->mixer_field[i] : mf__mixer_row_of((int)c->mixer)->def->fields[i].def;
}
MFDEF mf_ctx *mf_model_ctx(const mf_model *m) { return m ? m->ctx : NULL; }
MFDEF float mf_model_field(const mf_model *m, const char *field) {
    float v;
    if (!m) return NAN;
    v = mf_model_config_get(&m->cfg, field);
    if (v != v) mf__fail(m->ctx, "mf_model_field: the %s mixer has no field \"%s\"", m->mixer->name, field ? field : "(NULL)");
    return v;
}
MFDEF mf_tensor *mf_model_param(mf_model *m, int layer, const char *name, int ndim, const int *shape) {
    char nm[96];
    if (!m || !mf_ok(m->ctx)) return NULL;
    if (layer < 0 || layer >= m->cfg.n_layers || !name || !name[0] || strlen(name) > 64)
        return (mf_tensor *)mf__fail(m->ctx, "mf_model_param: layer %d (need 0 .. %d) and a name of 1 to 64 bytes (got %s)",
                                     layer, m->cfg.n_layers - 1, name ? "one" : "NULL");
    snprintf(nm, sizeof nm, "layers.%d.%s", layer, name);
    return mf_param(m->ctx, nm, ndim, shape);
}

/* the family hooks of a registered mixer: the definition's, with the library's checks around them */
#define MF__REG_DEF(m) ((m)->mixer->def)
#define MF__REG_ST(m, l) (MF__REG_DEF(m)->layer_size ? (m)->layers[l].mix : NULL) /* layer l's struct for the hooks */
static int mf__reg_check(mf_ctx *ctx, const mf_model_config *c) {
    const mf_mixer_def *d = mf__mixer_row_of((int)c->mixer)->def;
    int i;
    for (i = 0; i < d->n_fields; i++) {
        const mf_mixer_field *f = &d->fields[i];
        float v = mf_model_config_get(c, f->name);
        if (!(v >= f->lo && v <= f->hi) || (f->integer && v != floorf(v)))
            return (mf__fail(ctx, "model config: %s = %g must be %s in [%g, %g] (the %s mixer: %s)", f->name, (double)v,
                             f->integer ? "a whole number" : "a number", (double)f->lo, (double)f->hi, d->name,
                             f->help ? f->help : ""), -1);
    }
    if (c->mixer_field_set >> d->n_fields)
        return (mf__fail(ctx, "model config: mixer_field_set 0x%x marks fields past the %d of the %s mixer (set fields "
                         "with mf_model_config_set)", c->mixer_field_set, d->n_fields, d->name), -1);
    if (d->run_stack && c->block != MF_BLOCK_PRE_NORM)
        return (mf__fail(ctx, "model config: the %s mixer runs the whole stack itself (run_stack): block pre_norm only",
                         d->name), -1);
    return d->check ? d->check(ctx, c) : 0;
}
static void mf__reg_make_layer(mf_model *m, int l) {
    MF__REG_DEF(m)->make_layer(m, l, MF__REG_ST(m, l));
}
static void mf__reg_free(mf_model *m) {
    int l;
    if (!MF__REG_DEF(m)->free_layer) return;
    for (l = 0; l < m->cfg.n_layers; l++)
        if (m->layers[l].mix) MF__REG_DEF(m)->free_layer(m, l, MF__REG_ST(m, l));
}
/* y, the output of a hook on x ("forward of layer 0", "run_stack"), or NULL with the error when it is
   not x's [B, T, D] */
static mf_tensor *mf__reg_out(mf_model *m, const mf_tensor *x, mf_tensor *y, const char *hook) {
    char got[64], want[64];
    if (!mf_ok(m->ctx)) return NULL;
    if (y && y->ndim == 3 && y->shape[0] == x->shape[0] && y->shape[1] == x->shape[1] && y->shape[2] == x->shape[2]) return y;
    return (mf_tensor *)mf__fail(m->ctx, "the %s mixer's %s returned %s for the input %s; a mixer maps [B, T, D] to "
                                 "[B, T, D]", m->mixer->name, hook, y ? mf_shape_str(y, got, sizeof got) : "NULL",
                                 mf_shape_str(x, want, sizeof want));
}
static mf_tensor *mf__reg_mixer(mf_model *m, int l, mf_tensor *x, int pos0, int gen) {
    const mf_mixer_def *d = MF__REG_DEF(m);
    void *st = MF__REG_ST(m, l);
    char hook[48];
    if (d->reset_memory && m->generating && pos0 == 0) d->reset_memory(m, l, st, 2); /* generation (re)starts */
    snprintf(hook, sizeof hook, "%s of layer %d", gen && d->gen_step ? "gen_step" : "forward", l);
    return mf__reg_out(m, x, gen && d->gen_step ? d->gen_step(m, l, st, x, pos0) : d->forward(m, l, st, x), hook);
}
static mf_tensor *mf__reg_run_stack(mf_model *m, mf_tensor *x, int pos0, int gen) {
    const mf_mixer_def *d = MF__REG_DEF(m);
    int l;
    (void)gen;
    for (l = 0; d->reset_memory && m->generating && pos0 == 0 && l < m->cfg.n_layers; l++) d->reset_memory(m, l, MF__REG_ST(m, l), 2);
    return mf__reg_out(m, x, d->run_stack(m, x), "run_stack");
}
static int mf__reg_gen_begin(mf_model *m) {
    const mf_mixer_def *d = MF__REG_DEF(m);
    int l, rc, rerun = 0;
    if (!d->gen_step) return 0; /* every token reruns the window */
    for (l = 0; d->gen_begin && l < m->cfg.n_layers; l++) {
        if ((rc = d->gen_begin(m, l, MF__REG_ST(m, l))) < 0 || !mf_ok(m->ctx)) {
            if (mf_ok(m->ctx)) mf__fail(m->ctx, "the %s mixer's gen_begin failed on layer %d", d->name, l);
            return -1;
        }
        rerun |= rc == 1;
    }
    return !rerun;
}
static mf_tensor *mf__reg_aux_loss(mf_model *m) { return MF__REG_DEF(m)->aux_loss ? MF__REG_DEF(m)->aux_loss(m) : NULL; }
static double mf__reg_flops(const mf_model_config *c, int T, double keys) {
    const mf_mixer_def *d = mf__mixer_row_of((int)c->mixer)->def;
    return d->flops ? c->n_layers * d->flops(c, T, keys) : 0;
}
static int mf__reg_memory_slot(mf_model *m, int slot) {
    int old = m->mem_slot;
    m->mem_slot = slot;
    return old;
}
static void mf__reg_reset_memory(mf_model *m) {
    int l;
    for (l = 0; l < m->cfg.n_layers; l++)
        MF__REG_DEF(m)->reset_memory(m, l, MF__REG_ST(m, l), m->mem_slot);
}
static int mf__reg_state(mf_model *m, mf__state_io *io) {
    int l;
    for (l = 0; l < m->cfg.n_layers; l++) {
        mf__state_layer(io, l);
        if (MF__REG_DEF(m)->state(m, l, MF__REG_ST(m, l), io) < 0 || !mf_ok(m->ctx)) {
            if (mf_ok(m->ctx)) mf__fail(m->ctx, "the %s mixer's state hook failed on layer %d", MF__REG_DEF(m)->name, l);
            return -1;
        }
    }
    return 0;
}

/* a name of the mixer API: [a-z][a-z0-9_]*, 1 to 31 bytes */
static int mf__api_name(const char *s) {
    size_t i, n = s ? strlen(s) : 0;
    if (n < 1 || n > 31 || !(s[0] >= 'a' && s[0] <= 'z')) return 0;
    for (i = 1; i < n; i++) if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_')) return 0;
    return 1;
}
MFDEF int mf_mixer_register(const mf_mixer_def *def, char *err, size_t size) {
    int i, j, k;
    char dummy[256]; /* the message when the caller wants none */
    if (!err || !size) { err = dummy; size = sizeof dummy; }
    err[0] = '\0';
#define MF__REG_BAD(...) return (snprintf(err, size, __VA_ARGS__), -1)
    if (!def) MF__REG_BAD("mf_mixer_register: def is NULL");
    if (!mf__api_name(def->name))
        MF__REG_BAD("mf_mixer_register: mixer name \"%s\" must be 1 to 31 of a-z, 0-9 and _, starting with a letter",
                    def->name ? def->name : "(NULL)");
    if ((k = mf_mixer_from_name(def->name)) >= 0) {
        const mf__mixer_row *r = mf__mixer_row_of(k);
        const mf_mixer_def *d = mf__registered(r) ? r->def : NULL;
        if (d && d->forward == def->forward && d->run_stack == def->run_stack && d->make_layer == def->make_layer)
            return k; /* the same, again */
        MF__REG_BAD("mf_mixer_register: the mixer name \"%s\" is taken (%s); choose another", def->name,
                    d ? "registered before with other hooks" : "a built-in mixer");
    }
    if (!def->help || !def->make_layer || (!def->forward && !def->run_stack))
        MF__REG_BAD("mf_mixer_register: mixer %s needs %s", def->name,
                    !def->help ? "help (one line about it)" : !def->make_layer ? "make_layer (its parameters)" : "forward (or run_stack)");
    if (def->run_stack && def->gen_step)
        MF__REG_BAD("mf_mixer_register: mixer %s has run_stack and gen_step: a whole-stack recurrence generates by rerunning "
                    "its window (drop gen_step)", def->name);
    if (def->gen_begin && !def->gen_step)
        MF__REG_BAD("mf_mixer_register: mixer %s has gen_begin without gen_step (give both, or neither)", def->name);
    if (def->flags & ~(unsigned)(MF_MIXER_HEADS | MF_MIXER_NONCAUSAL | MF_MIXER_FIXED_STATE | MF_MIXER_OWN_NORM))
        MF__REG_BAD("mf_mixer_register: mixer %s: flags 0x%x has bits that are not MF_MIXER_HEADS, _NONCAUSAL, "
                    "_FIXED_STATE or _OWN_NORM (MF_MIXER_MEMORY comes with the state and reset_memory hooks)", def->name, def->flags);
    if (!def->reset_memory != !def->state)
        MF__REG_BAD("mf_mixer_register: mixer %s has %s without %s (memories need both)", def->name,
                    def->state ? "state" : "reset_memory", def->state ? "reset_memory" : "state");
    if ((def->flags & MF_MIXER_FIXED_STATE) && !def->gen_step)
        MF__REG_BAD("mf_mixer_register: mixer %s: MF_MIXER_FIXED_STATE needs gen_step (the state it keeps)", def->name);
    for (i = 0; i < 32; i++)
        if ((def->model_fields >> i & 1u) && (i >= MF_FIELD_COUNT || mf__config_fields[i].role == MF_CFG_VARIANT))
            MF__REG_BAD("mf_mixer_register: mixer %s: model_fields bit %d is %s", def->name, i,
                        i >= MF_FIELD_COUNT ? "not a field of MF_MODEL_FIELDS" : "a variant of another mixer (its model)");
    if (def->n_fields < 0 || def->n_fields > MF_MIXER_MAX_FIELDS || (def->n_fields && !def->fields))
        MF__REG_BAD("mf_mixer_register: mixer %s: n_fields %d must be 0 .. %d, with fields given", def->name,
                    def->n_fields, MF_MIXER_MAX_FIELDS);
    for (i = 0; i < def->n_fields; i++) {
        const mf_mixer_field *f = &def->fields[i];
        if (!mf__api_name(f->name))
            MF__REG_BAD("mf_mixer_register: mixer %s: field %d's name \"%s\" must be 1 to 31 of a-z, 0-9 and _, "
                        "starting with a letter", def->name, i, f->name ? f->name : "(NULL)");
        for (j = 0; j < i; j++)
            if (strcmp(def->fields[j].name, f->name) == 0) MF__REG_BAD("mf_mixer_register: mixer %s: two fields named %s", def->name, f->name);
        if (!(f->lo <= f->def && f->def <= f->hi) || (f->integer && f->def != floorf(f->def)))
            MF__REG_BAD("mf_mixer_register: mixer %s: field %s's default %g is not %s in its range [%g, %g]", def->name,
                        f->name, (double)f->def, f->integer ? "a whole number" : "a number", (double)f->lo, (double)f->hi);
    }
    if (mf__n_reg == MF_MIXER_MAX_REGISTERED)
        MF__REG_BAD("mf_mixer_register: %d mixers are registered already, the most (MF_MIXER_MAX_REGISTERED)",
                    MF_MIXER_MAX_REGISTERED);
#undef MF__REG_BAD
    mf__reg_build(&mf__reg[mf__n_reg], def, MF_MIXER_COUNT + mf__n_reg);
    return MF_MIXER_COUNT + mf__n_reg++;
}
/* the entry of a definition: a copy of it, its family (the mf__reg_* hooks) and its row */
static void mf__reg_build(mf__reg_entry *e, const mf_mixer_def *def, int kind) {
    int i;
    memset(e, 0, sizeof *e);
    e->def = *def;
    for (i = 0; i < def->n_fields; i++) e->fields[i] = def->fields[i];
    e->def.fields = e->fields;
    e->fam.name = e->def.name; e->fam.layer_size = def->layer_size; e->fam.fields = def->model_fields;
    e->fam.check = mf__reg_check; e->fam.make_layer = mf__reg_make_layer; e->fam.free = mf__reg_free;
    e->fam.mixer = def->run_stack ? NULL : mf__reg_mixer; e->fam.run_stack = def->run_stack ? mf__reg_run_stack : NULL;
    e->fam.gen_begin = mf__reg_gen_begin; e->fam.aux_loss = mf__reg_aux_loss;
    if (def->state) { e->fam.state = mf__reg_state; e->fam.memory_slot = mf__reg_memory_slot; e->fam.reset_memory = mf__reg_reset_memory; }
    e->fam.flops = mf__reg_flops;
    e->row.kind = (mf_mixer_kind)kind;
    e->row.family = &e->fam;
    e->row.flags = (def->flags & MF_MIXER_OWN_NORM ? 0 : MF__MIX_LN1 | MF__MIX_PRE_LN) | (def->flags & MF_MIXER_HEADS ? MF__MIX_HEADS : 0) |
                   (def->flags & MF_MIXER_NONCAUSAL ? MF__MIX_NONCAUSAL : 0) |
                   (def->flags & MF_MIXER_FIXED_STATE ? MF__MIX_FIXED_STATE : 0);
    e->row.help = e->def.help;
    e->row.fields = def->model_fields;
    e->row.def = &e->def;
    e->row.name = e->def.name; /* last: a built-in entry counts as built once it has its name */
}

/* ==== [mf:io] =============================================================================== */
/* safetensors: u64 little-endian header size N, N bytes of JSON
   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {..}},
   then the raw data (offsets relative to its start). */
#define MF__OPT_M "__optim__.m."
#define MF__OPT_V "__optim__.v."
#define MF__MAX_HEADER (64u << 20)

/* ---- crash-safe files: the one way every writer of this library replaces a file ---------------
   mf_save, mf_tokenizer_save and mf_shard_write write "<path>.tmp" through mf__afile, then
   mf__afile_commit makes it durable and atomic: flush the last chunk, fsync the file (its data is
   on the disk), rename it over path (atomic on POSIX: a reader sees the old file or the new one),
   fsync the directory (the rename itself is on the disk). Any failure (ENOSPC, EFBIG, EIO, a failed
   rename) removes the .tmp and leaves path as it was; the message names the step and the system's
   reason (strerror). A process killed at any moment leaves path whole (old or new) and at most a
   stale .tmp, which the next save truncates. Elsewhere than POSIX: stdio, _commit and MoveFileEx on
   Windows, a plain rename (no fsync) on other systems.
   MF__SAVE_HOOK(stage) is called after every chunk handed to the system and around each step
   ("write", "before fsync", "after fsync", "before rename", "after rename", "after dir fsync"): a
   test defines it before including the implementation to kill the process at each of these points
   (tests/test_crash.c); MF__AFILE_CHUNK is the chunk size. */
#if defined(__unix__) || defined(__unix) || defined(__APPLE__)
#include <sys/types.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
#define MF__POSIX_FS 1
#else
#define MF__POSIX_FS 0
#if defined(_WIN32)
#include <io.h>
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#endif
#endif
#ifndef MF__SAVE_HOOK
#define MF__SAVE_HOOK(stage) ((void)0)
#endif
#ifndef MF__AFILE_CHUNK
#define MF__AFILE_CHUNK (1 << 20)
#endif

typedef struct mf__afile {
    const char *path, *who; /* the target, and the function named in messages */
    char *tmp;              /* "<path>.tmp" */
    unsigned char *buf;     /* MF__AFILE_CHUNK bytes waiting to be written */
    size_t used;
#if MF__POSIX_FS
    int fd;
#else
    FILE *f;
#endif
    int err;                /* errno of the first failure (0: none yet) */
    const char *step;       /* what failed: "writing", "syncing (fsync)", ... */
} mf__afile;

static void mf__afile_failed(mf__afile *w, const char *step, int err) {
    if (w->err) return; /* the first failure is the cause */
    w->err = err ? err : EIO;
    w->step = step;
}

/* create "<path>.tmp" (a stale one from a killed save is truncated); 0, or -1 with the reason in err */
static int mf__afile_open(mf__afile *w, const char *path, const char *who, char *err, size_t err_size) {
    memset(w, 0, sizeof *w);
    w->path = path; w->who = who;
    w->tmp = (char *)mf__xmalloc(strlen(path) + 5);
    w->buf = (unsigned char *)mf__xmalloc(MF__AFILE_CHUNK);
    if (!w->tmp || !w->buf) {
        MF_FREE(w->tmp); MF_FREE(w->buf);
        snprintf(err, err_size, "%s: out of memory", who);
        return -1;
    }
    sprintf(w->tmp, "%s.tmp", path);
#if MF__POSIX_FS
    while ((w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666)) < 0 && errno == EINTR) {}
    if (w->fd < 0) {
#else
    if (!(w->f = fopen(w->tmp, "wb"))) {
#endif
        snprintf(err, err_size, "%s: cannot create \"%s\": %s (does the directory exist, is it writable?)", who, w->tmp,
                 strerror(errno));
        MF_FREE(w->tmp); MF_FREE(w->buf);
        return -1;
    }
    return 0;
}

/* hand the buffered bytes to the system */
static void mf__afile_flush(mf__afile *w) {
    const unsigned char *p = w->buf;
    size_t n = w->used;
    w->used = 0;
    if (w->err || !n) return;
#if MF__POSIX_FS
    while (n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { mf__afile_failed(w, "writing", k < 0 ? errno : ENOSPC); return; }
        p += k; n -= (size_t)k;
    }
#else
    if (fwrite(p, 1, n, w->f) != n || fflush(w->f) != 0) { mf__afile_failed(w, "writing", errno); return; }
#endif
    MF__SAVE_HOOK("write");
}

static void mf__afile_put(mf__afile *w, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    while (n > 0 && !w->err) {
        size_t k = MF__AFILE_CHUNK - w->used < n ? MF__AFILE_CHUNK - w->used : n;
        memcpy(w->buf + w->used, p, k);
        w->used += k; p += k; n -= k;
        if (w->used == MF__AFILE_CHUNK) mf__afile_flush(w);
    }
}

#ifndef METAFORMER_NO_DATA /* a line of the tokenizer file */
static void mf__afile_printf(mf__afile *w, const char *fmt, ...) {
    char line[512];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof line) { mf__afile_failed(w, "formatting a line of", EINVAL); return; } /* callers write short lines */
    mf__afile_put(w, line, (size_t)n);
}
#endif

static int mf__afile_full(int e) {
#ifdef EDQUOT
    if (e == EDQUOT) return 1;
#endif
    return e == ENOSPC || e == EFBIG;
}

/* fsync the directory that holds path, so that the rename survives a power loss */
static int mf__afile_sync_dir(const char *path) {
#if MF__POSIX_FS
    const char *slash = strrchr(path, '/');
    char *dir = (char *)mf__xmalloc(slash ? (size_t)(slash - path) + 2 : 2);
    int fd, rc = 0, e = 0;
    if (!dir) return ENOMEM;
    if (!slash) strcpy(dir, ".");
    else if (slash == path) strcpy(dir, "/");
    else { memcpy(dir, path, (size_t)(slash - path)); dir[slash - path] = 0; }
    fd = open(dir, O_RDONLY);
    MF_FREE(dir);
    if (fd < 0) return errno;
    if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS) { rc = -1; e = errno; } /* EINVAL: not supported here */
    close(fd);
    return rc ? e : 0;
#else
    (void)path;
    return 0;
#endif
}

/* Finish: the last chunk, fsync, close, rename over path, fsync the directory. Returns 0, or -1 with
   the reason in err (the .tmp removed, path untouched; except when only the directory sync failed:
   then path is the new file, which a power loss may undo). Frees w either way. */
static int mf__afile_commit(mf__afile *w, char *err, size_t err_size) {
    int e;
    mf__afile_flush(w);
#if MF__POSIX_FS
    MF__SAVE_HOOK("before fsync");
    if (!w->err && fsync(w->fd) != 0) mf__afile_failed(w, "syncing (fsync)", errno);
    MF__SAVE_HOOK("after fsync");
    if (close(w->fd) != 0) mf__afile_failed(w, "closing", errno);
#else
    if (!w->err && fflush(w->f) != 0) mf__afile_failed(w, "writing", errno);
#if defined(_WIN32)
    if (!w->err && _commit(_fileno(w->f)) != 0) mf__afile_failed(w, "syncing (fsync)", errno);
#endif
    if (fclose(w->f) != 0) mf__afile_failed(w, "closing", errno);
#endif
    if (!w->err) {
        MF__SAVE_HOOK("before rename");
#if defined(_WIN32) && !MF__POSIX_FS
        if (!MoveFileExA(w->tmp, w->path, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)) mf__afile_failed(w, "renaming the complete", EACCES);
#else
        if (rename(w->tmp, w->path) != 0) mf__afile_failed(w, "renaming the complete", errno);
#endif
        MF__SAVE_HOOK("after rename");
    }
    if (w->err) {
        snprintf(err, err_size, "%s: %s \"%s\" failed: %s%s; \"%s\" is unchanged", w->who, w->step, w->tmp,
                 strerror(w->err), mf__afile_full(w->err) ? " (disk full, file-size limit or quota: free space or write elsewhere)" : "",
                 w->path);
        remove(w->tmp);
    } else if ((e = mf__afile_sync_dir(w->path)) != 0) {
        snprintf(err, err_size, "%s: \"%s\" is written, but syncing its directory (fsync) failed: %s; a power loss "
                 "now may bring back the previous file", w->who, w->path, strerror(e));
        w->err = e;
    }
    if (!w->err) MF__SAVE_HOOK("after dir fsync");
    MF_FREE(w->tmp); MF_FREE(w->buf);
    return w->err ? -1 : 0;
}

typedef struct { char *s; size_t len, cap; int oom; } mf__buf;
static void mf__buf_put(mf__buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        char *ns;
        while (cap < b->len + n + 1) cap *= 2;
        if (!(ns = (char *)MF_REALLOC(b->s, cap))) { b->oom = 1; return; }
        b->s = ns; b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}
static void mf__buf_str(mf__buf *b, const char *s) { mf__buf_put(b, s, strlen(s)); }
/* a JSON string literal of prefix + s */
static void mf__buf_json(mf__buf *b, const char *prefix, const char *s) {
    int part;
    mf__buf_put(b, "\"", 1);
    for (part = 0; part < 2; part++, prefix = s)
        for (; *prefix; prefix++) {
            char e[8];
            if (*prefix == '"' || *prefix == '\\') { e[0] = '\\'; e[1] = *prefix; mf__buf_put(b, e, 2); }
            else if ((unsigned char)*prefix < 0x20) { snprintf(e, sizeof e, "\\u%04x", (unsigned char)*prefix); mf__buf_str(b, e); }
            else mf__buf_put(b, prefix, 1);
        }
    mf__buf_put(b, "\"", 1);
}

static int mf__little_endian(void) { const uint16_t one = 1; return *(const unsigned char *)&one == 1; }

/* The tensors of a checkpoint in file order: every parameter, then (optionally) both moments.
   Before the optimizer's first step the moments do not exist yet (p_m == NULL): their data is NULL
   then, not NULL + offset, which is undefined (mf_load validates a file before it allocates them). */
static const float *mf__ckpt_tensor(mf_ctx *ctx, int i, const char **prefix, const mf_tensor **p) {
    int n = ctx->n_params;
    const float *moments;
    *p = ctx->params[i % n];
    if (i < n) { *prefix = ""; return (*p)->data; }
    *prefix = i < 2 * n ? MF__OPT_M : MF__OPT_V;
    moments = i < 2 * n ? ctx->p_m : ctx->p_v;
    return moments ? moments + (*p)->offset : NULL;
}

/* A tensor of a checkpoint besides the parameters and moments: the model's state (mf_model_save,
   "__state__.<name>"), int32 values copied from the host or float32 values on the context's device. */
typedef struct mf__xtensor {
    char name[96];
    int i32;              /* 1: ints (owned copy), 0: data (the model's buffer, device memory on CUDA) */
    int32_t *ints;
    const float *data;
    float *owned;         /* a registered mixer's piece: data copied into the context's memory (freed after the save) */
    int ndim, shape[MF_MAX_DIMS];
    int64_t ne;
} mf__xtensor;

/* the header of one tensor: "name": {"dtype": .., "shape": [..], "data_offsets": [off, off + bytes]} */
static void mf__buf_tensor(mf__buf *h, const char *prefix, const char *name, const char *dtype, int ndim, const int *shape,
                           uint64_t *off, int64_t ne) {
    char num[96];
    int d;
    mf__buf_str(h, ", ");
    mf__buf_json(h, prefix, name);
    mf__buf_str(h, ": {\"dtype\": \"");
    mf__buf_str(h, dtype);
    mf__buf_str(h, "\", \"shape\": [");
    for (d = 0; d < ndim; d++) { snprintf(num, sizeof num, d ? ", %d" : "%d", shape[d]); mf__buf_str(h, num); }
    snprintf(num, sizeof num, "], \"data_offsets\": [%llu, %llu]}", (unsigned long long)*off, (unsigned long long)(*off + (uint64_t)ne * 4));
    mf__buf_str(h, num);
    *off += (uint64_t)ne * 4;
}

/* mf_save with the extra tensors x[0 .. nx - 1] after the parameters and moments, and the extra
   metadata pair (xkey, xval) when xkey is not NULL */
static int mf__save(mf_ctx *ctx, const char *path, int with_optimizer, const char *const *meta_kv, int n_meta,
                    const mf__xtensor *x, int nx, const char *xkey, const char *xval) {
    mf__buf h = {NULL, 0, 0, 0};
    mf__afile w;
    uint64_t off = 0, hlen;
    unsigned char len8[8];
    char num[96], why[1024];
    int i, nt;
    int64_t big = 1;
    float *host = NULL; /* CUDA: each tensor passes through a host buffer */
    if (!mf_ok(ctx)) return -1;
    if (!path || !path[0]) return (mf__fail(ctx, "mf_save: path is NULL or empty"), -1);
    if (n_meta < 0 || (n_meta > 0 && !meta_kv)) return (mf__fail(ctx, "mf_save: n_meta %d needs %d key/value strings in meta_kv", n_meta, 2 * n_meta), -1);
    if (!mf__little_endian()) return (mf__fail(ctx, "mf_save: safetensors is little-endian; this host is not"), -1);
    if (with_optimizer && ctx->mom_n)
        return (mf__fail(ctx, "mf_save: the optimizer moments are sharded (ZeRO-1): save with mf_dist_save"), -1);
    if (with_optimizer && mf__alloc_moments(ctx) < 0) return -1; /* before any step: zeros */
    nt = ctx->n_params * (with_optimizer ? 3 : 1);
    mf__buf_str(&h, "{\"__metadata__\": {\"mf.format\": \"metaformer.h " METAFORMER_VERSION "\"");
    if (with_optimizer) { /* the training state beside the moments */
        snprintf(num, sizeof num, ", \"mf.opt_steps\": \"%lld\", \"mf.rng_calls\": \"%llu\", \"mf.seed\": \"%llu\"",
                 (long long)ctx->opt_t, (unsigned long long)ctx->rng_calls, (unsigned long long)ctx->seed);
        mf__buf_str(&h, num);
        mf__buf_str(&h, ", \"mf.param_steps\": \"");
        for (i = 0; i < ctx->n_params; i++) {
            snprintf(num, sizeof num, i ? ",%lld" : "%lld", (long long)ctx->p_steps[i]);
            mf__buf_str(&h, num);
        }
        mf__buf_str(&h, "\"");
    }
    if (xkey) { mf__buf_str(&h, ", "); mf__buf_json(&h, "", xkey); mf__buf_str(&h, ": "); mf__buf_json(&h, "", xval); }
    for (i = 0; i < n_meta; i++) {
        if (!meta_kv[2 * i] || !meta_kv[2 * i + 1])
            { MF_FREE(h.s); return (mf__fail(ctx, "mf_save: metadata pair %d has a NULL key or value", i), -1); }
        mf__buf_str(&h, ", ");
        mf__buf_json(&h, "", meta_kv[2 * i]);
        mf__buf_str(&h, ": ");
        mf__buf_json(&h, "", meta_kv[2 * i + 1]);
    }
    mf__buf_str(&h, "}");
    for (i = 0; i < nt; i++) {
        const char *prefix;
        const mf_tensor *p;
        mf__ckpt_tensor(ctx, i, &prefix, &p);
        mf__buf_tensor(&h, prefix, p->name, "F32", p->ndim, p->shape, &off, p->ne);
        if (p->ne > big) big = p->ne;
    }
    for (i = 0; i < nx; i++) {
        mf__buf_tensor(&h, "", x[i].name, x[i].i32 ? "I32" : "F32", x[i].ndim, x[i].shape, &off, x[i].ne);
        if (x[i].ne > big) big = x[i].ne;
    }
    mf__buf_str(&h, "}");
    while (!h.oom && h.len % 8) mf__buf_str(&h, " "); /* the format pads the header to 8 bytes */
    if (h.oom || (ctx->be && !(host = (float *)mf__xmalloc((size_t)big * sizeof(float))))) {
        MF_FREE(h.s);
        return (mf__fail(ctx, "out of memory: checkpoint header"), -1);
    }
    if (mf__afile_open(&w, path, "mf_save", why, sizeof why) < 0) { MF_FREE(h.s); MF_FREE(host); return (mf__fail(ctx, "%s", why), -1); }
    hlen = h.len;
    for (i = 0; i < 8; i++) len8[i] = (unsigned char)(hlen >> (8 * i));
    mf__afile_put(&w, len8, 8);
    mf__afile_put(&w, h.s, h.len);
    for (i = 0; i < nt + nx && !w.err; i++) {
        const char *prefix;
        const mf_tensor *p;
        const void *data;
        int64_t ne;
        if (i < nt) { data = mf__ckpt_tensor(ctx, i, &prefix, &p); ne = p->ne; }
        else { data = x[i - nt].i32 ? (const void *)x[i - nt].ints : (const void *)x[i - nt].data; ne = x[i - nt].ne; }
        if (host && (i < nt || !x[i - nt].i32)) {
            if (mf__ddownload(ctx, host, data, (size_t)ne * sizeof(float)) < 0) { mf__afile_failed(&w, "copying a tensor from the device for", EIO); break; }
            data = host;
        }
        mf__afile_put(&w, data, (size_t)ne * 4);
    }
    MF_FREE(host); MF_FREE(h.s);
    if (mf__afile_commit(&w, why, sizeof why) < 0) {
        if (mf_ok(ctx)) mf__fail(ctx, "%s", why);
        else { char dev[512]; snprintf(dev, sizeof dev, "%s", mf_error(ctx)); mf_clear_error(ctx); mf__fail(ctx, "%s (%s)", why, dev); }
        return -1;
    }
    return 0;
}

MFDEF int mf_save(mf_ctx *ctx, const char *path, int with_optimizer, const char *const *meta_kv, int n_meta) {
    return mf__save(ctx, path, with_optimizer, meta_kv, n_meta, NULL, 0, NULL, NULL);
}

/* ---- a small JSON reader: the safetensors header, GPT-2's encoder.json ([mf:tokenizer]) ---- */
typedef struct { const char *p, *end; int bad; } mf__json;
static void mf__jws(mf__json *j) { while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t')) j->p++; }
static int mf__jchar(mf__json *j, char c) {
    mf__jws(j);
    if (j->p < j->end && *j->p == c) { j->p++; return 1; }
    return 0;
}
/* four hex digits of a \u escape; -1 when they are not hex */
static long mf__jhex4(mf__json *j) {
    long v = 0;
    int k;
    for (k = 0; k < 4; k++, j->p++) {
        char h = j->p < j->end ? *j->p : 'x';
        int d = h >= '0' && h <= '9' ? h - '0' : (h | 32) >= 'a' && (h | 32) <= 'f' ? (h | 32) - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}
/* the code point of a \u escape (j->p after the 'u'), joining a surrogate pair; -1: malformed or a
   lone surrogate */
static long mf__jescape_u(mf__json *j) {
    long hi = mf__jhex4(j), lo;
    if (hi < 0xD800 || hi > 0xDFFF) return hi;
    if (hi > 0xDBFF || j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u') return -1;
    j->p += 2;
    lo = mf__jhex4(j);
    if (lo < 0xDC00 || lo > 0xDFFF) return -1;
    return 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
}
/* a string into out (cap bytes, NUL-terminated; \uXXXX escapes become UTF-8, the file's own bytes
   are copied as they are). 0 and j->bad when malformed or longer than cap - 1 bytes. */
static int mf__jstr(mf__json *j, char *out, size_t cap) {
    size_t n = 0;
    if (!mf__jchar(j, '"')) return j->bad = 1, 0;
    while (j->p < j->end && *j->p != '"') {
        unsigned char u[4];
        int k = 1, i;
        char c = *j->p++;
        u[0] = (unsigned char)c;
        if (c == '\\') {
            if (j->p >= j->end) break;
            c = *j->p++;
            u[0] = (unsigned char)(c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c == 'b' ? '\b' : c == 'f' ? '\f' : c);
            if (c == 'u') {
                long v = mf__jescape_u(j);
                if (v < 0) return j->bad = 1, 0;
                if (v < 0x80) u[0] = (unsigned char)v;
                else if (v < 0x800) { u[0] = (unsigned char)(0xC0 | v >> 6); u[1] = (unsigned char)(0x80 | (v & 63)); k = 2; }
                else if (v < 0x10000) { u[0] = (unsigned char)(0xE0 | v >> 12); u[1] = (unsigned char)(0x80 | (v >> 6 & 63)); u[2] = (unsigned char)(0x80 | (v & 63)); k = 3; }
                else { u[0] = (unsigned char)(0xF0 | v >> 18); u[1] = (unsigned char)(0x80 | (v >> 12 & 63)); u[2] = (unsigned char)(0x80 | (v >> 6 & 63)); u[3] = (unsigned char)(0x80 | (v & 63)); k = 4; }
            }
        }
        if (n + (size_t)k >= cap) return j->bad = 1, 0;
        for (i = 0; i < k; i++) out[n++] = (char)u[i];
    }
    if (!mf__jchar(j, '"')) return j->bad = 1, 0;
    out[n] = 0;
    return 1;
}
static int64_t mf__jint(mf__json *j) {
    int64_t v = 0;
    int digits = 0;
    mf__jws(j);
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9' && digits < 18) { v = v * 10 + (*j->p++ - '0'); digits++; }
    if (!digits) j->bad = 1;
    return v;
}
/* pass over a string of any length without copying it */
static void mf__jskipstr(mf__json *j) {
    if (!mf__jchar(j, '"')) { j->bad = 1; return; }
    while (j->p < j->end && *j->p != '"') j->p += (*j->p == '\\' && j->p + 1 < j->end) ? 2 : 1;
    if (!mf__jchar(j, '"')) j->bad = 1;
}
/* skip any JSON value (metadata values are strings, but be lenient) */
static void mf__jskip(mf__json *j) {
    mf__jws(j);
    if (j->p >= j->end) { j->bad = 1; return; }
    if (*j->p == '"') { mf__jskipstr(j); return; }
    if (*j->p == '{' || *j->p == '[') {
        int depth = 0;
        do {
            if (*j->p == '"') { mf__jskipstr(j); if (j->bad) return; continue; }
            if (*j->p == '{' || *j->p == '[') depth++;
            if (*j->p == '}' || *j->p == ']') depth--;
            j->p++;
        } while (j->p < j->end && depth > 0);
        if (depth) j->bad = 1;
        return;
    }
    while (j->p < j->end && *j->p != ',' && *j->p != '}' && *j->p != ']') j->p++;
}

typedef struct { char name[512]; int f32, i32, ndim, shape[8], used; uint64_t begin, end; } mf__entry;
typedef struct {
    unsigned char *file; size_t size;   /* the whole file */
    const unsigned char *data; uint64_t data_size;
    mf__entry *e; int n;
    mf__json meta;                       /* span of the __metadata__ object */
} mf__ckpt;

/* A whole file into memory (a NUL added after its *size bytes, for the text readers); NULL with the
   reason in *why. The first chunk is small (a directory fails there, with the right reason); after
   it the buffer takes the file's length where that is known, so a large checkpoint is read at once.
   The checkpoint reader and the tokenizer files use it. */
static unsigned char *mf__read_file(const char *path, size_t *size, const char **why) {
    FILE *f;
    unsigned char *buf = NULL, *p;
    size_t n = 0, cap = 1 << 16, known = 0;
    long len;
    *why = NULL;
    if (!path) { *why = "the path is NULL"; return NULL; }
    if (!(f = fopen(path, "rb"))) { *why = "cannot open the file (does it exist and is it readable?)"; return NULL; }
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) known = (size_t)len;
    for (;;) {
        if (!(p = (unsigned char *)MF_REALLOC(buf, cap + 1))) { *why = "out of memory reading the file"; break; }
        buf = p;
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;   /* the end of the file, or an error */
        cap = known >= cap ? known + 1 : cap * 2;   /* + 1: the next read sees the end */
    }
    if (!*why && ferror(f)) *why = "cannot read the file (is it a directory?)";
    fclose(f);
    if (*why) { MF_FREE(buf); return NULL; }
    buf[n] = 0;
    *size = n;
    return buf;
}

/* Read and parse a checkpoint; returns NULL on success, else a static description of the problem */
static const char *mf__ckpt_open(mf__ckpt *c, const char *path) {
    const char *why;
    uint64_t hlen = 0;
    int i, cap = 0;
    mf__json j;
    memset(c, 0, sizeof *c);
    if (!(c->file = mf__read_file(path, &c->size, &why))) return why;
    if (c->size < 8) return "the file is shorter than the 8-byte safetensors header size (truncated or not a checkpoint)";
    for (i = 0; i < 8; i++) hlen |= (uint64_t)c->file[i] << (8 * i);
    if (hlen > MF__MAX_HEADER || hlen + 8 > c->size) return "the header size is larger than the file (truncated or not a safetensors file)";
    c->data = c->file + 8 + hlen;
    c->data_size = c->size - 8 - hlen;
    j.p = (const char *)c->file + 8; j.end = j.p + hlen; j.bad = 0;
    c->meta.p = c->meta.end = NULL;
    if (!mf__jchar(&j, '{')) return "the header is not a JSON object (not a safetensors file)";
    if (mf__jchar(&j, '}')) return NULL;
    do {
        mf__entry *e;
        char key[512];
        if (!mf__jstr(&j, key, sizeof key) || !mf__jchar(&j, ':')) return "malformed JSON in the header (a key)";
        if (strcmp(key, "__metadata__") == 0) {
            c->meta.p = j.p; mf__jskip(&j); c->meta.end = j.p;
            if (j.bad) return "malformed __metadata__";
            continue;
        }
        if (c->n == cap) {
            mf__entry *ne;
            cap = cap ? 2 * cap : 64;
            if (!(ne = (mf__entry *)MF_REALLOC(c->e, (size_t)cap * sizeof(mf__entry)))) return "out of memory";
            c->e = ne;
        }
        e = &c->e[c->n++];
        memset(e, 0, sizeof *e);
        strcpy(e->name, key);
        if (!mf__jchar(&j, '{')) return "malformed JSON in the header (a tensor entry is not an object)";
        do {
            char field[32], dtype[16];
            if (!mf__jstr(&j, field, sizeof field) || !mf__jchar(&j, ':')) return "malformed JSON in a tensor entry";
            if (strcmp(field, "dtype") == 0) { if (!mf__jstr(&j, dtype, sizeof dtype)) return "malformed dtype"; e->f32 = strcmp(dtype, "F32") == 0; e->i32 = strcmp(dtype, "I32") == 0; }
            else if (strcmp(field, "shape") == 0 || strcmp(field, "data_offsets") == 0) {
                int n = 0, is_shape = field[0] == 's';
                int64_t v[8];
                if (!mf__jchar(&j, '[')) return "malformed array in a tensor entry";
                if (!mf__jchar(&j, ']')) {
                    do { if (n == 8) return "a tensor has more than 8 dims"; v[n++] = mf__jint(&j); } while (mf__jchar(&j, ','));
                    if (!mf__jchar(&j, ']')) return "malformed array in a tensor entry";
                }
                if (j.bad) return "malformed number in a tensor entry";
                if (is_shape) { int k; e->ndim = n; for (k = 0; k < n; k++) e->shape[k] = v[k] > 0x7fffffff ? -1 : (int)v[k]; }
                else { if (n != 2 || v[1] < v[0]) return "data_offsets must be [begin, end] with begin <= end"; e->begin = (uint64_t)v[0]; e->end = (uint64_t)v[1]; }
            } else mf__jskip(&j);
            if (j.bad) return "malformed JSON in a tensor entry";
        } while (mf__jchar(&j, ','));
        if (!mf__jchar(&j, '}')) return "malformed JSON: a tensor entry is not closed";
        if (e->end > c->data_size) return "a tensor's data lies beyond the end of the file (truncated file)";
    } while (mf__jchar(&j, ','));
    if (!mf__jchar(&j, '}') || j.bad) return "malformed JSON: the header object is not closed";
    return NULL;
}
static void mf__ckpt_close(mf__ckpt *c) { MF_FREE(c->file); MF_FREE(c->e); memset(c, 0, sizeof *c); }

/* find a metadata value; returns its length or -1 */
static int mf__ckpt_meta(const mf__ckpt *c, const char *key, char *buf, size_t size) {
    mf__json j;
    char k[512], *v;
    size_t cap;
    int found = -1;
    if (!c->meta.p) return -1;
    j = c->meta; j.bad = 0;
    cap = (size_t)(j.end - j.p) + 1; /* no value is longer than the metadata object */
    if (!(v = (char *)mf__xmalloc(cap))) return -1;
    if (mf__jchar(&j, '{') && !mf__jchar(&j, '}'))
        do {
            if (!mf__jstr(&j, k, sizeof k) || !mf__jchar(&j, ':')) break;
            mf__jws(&j);
            if (j.p < j.end && *j.p == '"') { if (!mf__jstr(&j, v, cap)) break; }
            else { mf__jskip(&j); continue; }
            if (strcmp(k, key) == 0) {
                size_t n = strlen(v);
                if (buf && size) { size_t m = n < size - 1 ? n : size - 1; memcpy(buf, v, m); buf[m] = 0; }
                found = (int)n;
                break;
            }
        } while (mf__jchar(&j, ','));
    MF_FREE(v);
    return found;
}

static mf__entry *mf__ckpt_find(mf__ckpt *c, const char *prefix, const char *name) {
    int i;
    size_t lp = strlen(prefix);
    for (i = 0; i < c->n; i++)
        if (strncmp(c->e[i].name, prefix, lp) == 0 && strcmp(c->e[i].name + lp, name) == 0) return &c->e[i];
    return NULL;
}

/* what a family's state hook talks to (mf__state_ints, mf__state_floats: after mf_load) */
struct mf_state_io {
    int mode;
    int layer;                   /* a registered mixer's state hook: the layer it lists */
    mf_model *m;
    mf__xtensor *t; int n, cap;  /* save: the pieces listed */
    mf__ckpt *c; const char *path; /* check, apply */
};

/* the per-parameter update counts of a checkpoint ("mf.param_steps": "n0,n1,..."), or NULL */
static int64_t *mf__ckpt_param_steps(mf_ctx *ctx, const mf__ckpt *c, const char *path) {
    int n = mf__ckpt_meta(c, "mf.param_steps", NULL, 0), i;
    char *txt, *p;
    int64_t *steps;
    if (n < 0) return (int64_t *)mf__fail(ctx, "mf_load: \"%s\" lacks mf.param_steps (written by an older version?)", path);
    txt = (char *)mf__xmalloc((size_t)n + 1);
    steps = (int64_t *)mf__xmalloc((size_t)(ctx->n_params ? ctx->n_params : 1) * sizeof(int64_t));
    if (!txt || !steps) { MF_FREE(txt); MF_FREE(steps); return (int64_t *)mf__fail(ctx, "out of memory"); }
    mf__ckpt_meta(c, "mf.param_steps", txt, (size_t)n + 1);
    for (i = 0, p = txt; i < ctx->n_params; i++) {
        char *end;
        steps[i] = (int64_t)strtoll(p, &end, 10);
        if (end == p || (*end != ',' && *end != 0) || (*end == 0 && i + 1 < ctx->n_params)) break;
        p = *end ? end + 1 : end;
    }
    if (i < ctx->n_params || *p) {
        MF_FREE(txt); MF_FREE(steps);
        return (int64_t *)mf__fail(ctx, "mf_load: \"%s\": mf.param_steps does not list one count per parameter (%d)", path, ctx->n_params);
    }
    MF_FREE(txt);
    return steps;
}

/* mf_load, and with a model m whose family has state, the state too: 0, 1 when the file has no
   state (the memories start empty), -1 */
/* A registered mixer's model records its mixer in its checkpoints ("mf.mixer": the name and every
   field, "cosine temperature=10"): the metadata key (or the state marker "mf.state" of the built-in
   mixers) and its value in val */
static const char *mf__mixer_meta(const mf_model *m, char *val, size_t size) {
    const mf_mixer_def *d = mf__registered(m->mixer) ? m->mixer->def : NULL;
    size_t n;
    int i;
    if (!d) return (snprintf(val, size, "1"), "mf.state");
    n = (size_t)snprintf(val, size, "%s", d->name);
    for (i = 0; i < d->n_fields && n < size; i++)
        n += (size_t)snprintf(val + n, size - n, " %s=%.9g", d->fields[i].name, (double)mf_model_config_get(&m->cfg, d->fields[i].name));
    return "mf.mixer";
}
/* a checkpoint of a registered mixer loads only into a model of that mixer with the same fields */
static int mf__mixer_meta_check(mf_ctx *ctx, mf__ckpt *cp, const char *path, const mf_model *m) {
    char file[512], own[512];
    int has = mf__ckpt_meta(cp, "mf.mixer", file, sizeof file) >= 0, mine = mf__registered(m->mixer);
    if (!has) return 0; /* a built-in mixer's file, or mf_save's: the tensors' names and shapes decide */
    mf__mixer_meta(m, own, sizeof own);
    if (mine && strcmp(file, own) == 0) return 0;
    if (mine)
        return (mf__fail(ctx, "mf_load: \"%s\" holds a model of the registered mixer \"%s\"; this model is \"%s\" "
                         "(make the model with the checkpoint's mixer and fields)", path, file, own), -1);
    return (mf__fail(ctx, "mf_load: \"%s\" holds a model of the registered mixer \"%s\", not of the built-in %s: "
                     "register that mixer in this program (mf_mixer_register; examples: build them with EXTRA_MIXERS, "
                     "docs/library.md) and make the model with it", path, file, m->mixer->name), -1);
}

static int mf__load_ckpt(mf_ctx *ctx, mf__ckpt *cp, const char *path, int with_optimizer, mf_model *m);
static int mf__load(mf_ctx *ctx, const char *path, int with_optimizer, mf_model *m) {
    mf__ckpt c;
    const char *why;
    int rc;
    if (!mf_ok(ctx)) return -1;
    if (!path) return (mf__fail(ctx, "mf_load: path is NULL"), -1);
    if (!mf__little_endian()) return (mf__fail(ctx, "mf_load: safetensors is little-endian; this host is not"), -1);
    if ((why = mf__ckpt_open(&c, path))) {
        mf__fail(ctx, "mf_load: \"%s\": %s", path, why);
        mf__ckpt_close(&c);
        return -1;
    }
    rc = mf__load_ckpt(ctx, &c, path, with_optimizer, m);
    mf__ckpt_close(&c);
    return rc;
}
/* mf__load of an open checkpoint (read from path; [mf:dist] passes one with its rows of the state) */
static int mf__load_ckpt(mf_ctx *ctx, mf__ckpt *cp, const char *path, int with_optimizer, mf_model *m) {
    int i, k, nt, with_state = 0;
    mf__state_io io;
    char steps[32] = "", calls[32] = "", seed[32] = "";
    int64_t *psteps = NULL;
    if (ctx->mom_n && with_optimizer)
        return (mf__fail(ctx, "mf_load: the optimizer moments are sharded (ZeRO-1): load with mf_dist_load"), -1);
    /* validate everything before changing anything */
    nt = ctx->n_params * (with_optimizer ? 3 : 1);
    if (with_optimizer && (mf__ckpt_meta(cp, "mf.opt_steps", steps, sizeof steps) < 0 ||
                           mf__ckpt_meta(cp, "mf.rng_calls", calls, sizeof calls) < 0 ||
                           mf__ckpt_meta(cp, "mf.seed", seed, sizeof seed) < 0)) {
        mf__fail(ctx, "mf_load: \"%s\" has no optimizer state (saved without it, or not by metaformer.h); "
                 "load with with_optimizer = 0 to take the weights only", path);
        return -1;
    }
    if (m && mf__mixer_meta_check(ctx, cp, path, m) < 0) return -1;
    if (with_optimizer && !(psteps = mf__ckpt_param_steps(ctx, cp, path))) return -1;
    for (i = 0; i < nt; i++) {
        const char *prefix;
        const mf_tensor *p;
        mf__entry *e;
        int same;
        mf__ckpt_tensor(ctx, i, &prefix, &p);
        e = mf__ckpt_find(cp, prefix, p->name);
        if (!e) { mf__fail(ctx, "mf_load: \"%s\" has no tensor \"%s%s\" (a checkpoint of another model or config?)", path, prefix, p->name); break; }
        same = e->f32 && e->ndim == p->ndim && e->end - e->begin == (uint64_t)p->ne * 4;
        for (k = 0; same && k < p->ndim; k++) same = e->shape[k] == p->shape[k];
        if (!same) {
            char s[64];
            mf__fail(ctx, "mf_load: \"%s\": tensor \"%s\" is stored with another dtype or shape than the model's F32 %s",
                     path, e->name, mf_shape_str(p, s, sizeof s));
            break;
        }
        e->used = 1;
    }
    for (i = 0; mf_ok(ctx) && i < cp->n; i++)
        if (!cp->e[i].used && strncmp(cp->e[i].name, "__optim__.", 10) != 0 && strncmp(cp->e[i].name, "__state__.", 10) != 0)
            mf__fail(ctx, "mf_load: \"%s\" has a tensor \"%s\" that this model lacks (a checkpoint of another "
                     "model or config?)", path, cp->e[i].name);
    if (m && m->fam->state && mf_ok(ctx) && mf__ckpt_meta(cp, mf__registered(m->mixer) ? "mf.mixer" : "mf.state", NULL, 0) >= 0) { /* mf_model_save's file */
        memset(&io, 0, sizeof io);
        io.mode = MF__STATE_CHECK; io.c = cp; io.path = path; io.m = m;
        with_state = m->fam->state(m, &io) == 0;
    }
    if (mf_ok(ctx) && with_optimizer) mf__alloc_moments(ctx);
    if (!mf_ok(ctx)) { MF_FREE(psteps); return -1; }
    for (i = 0; i < nt; i++) {
        const char *prefix;
        const mf_tensor *p;
        float *dst = (float *)mf__ckpt_tensor(ctx, i, &prefix, &p);
        const mf__entry *e = mf__ckpt_find(cp, prefix, p->name);
        mf__dupload(ctx, dst, cp->data + e->begin, (size_t)p->ne * sizeof(float));
    }
    if (with_optimizer) {
        memcpy(ctx->p_steps, psteps, (size_t)ctx->n_params * sizeof(int64_t));
        MF_FREE(psteps);
        ctx->opt_t = (int64_t)strtoll(steps, NULL, 10);
        ctx->rng_calls = (uint64_t)strtoull(calls, NULL, 10);
        ctx->seed = (uint64_t)strtoull(seed, NULL, 10);
    }
    if (with_state) { io.mode = MF__STATE_APPLY; m->fam->state(m, &io); }
    return !mf_ok(ctx) ? -1 : m && m->fam->state && !with_state ? 1 : 0;
}

MFDEF int mf_load(mf_ctx *ctx, const char *path, int with_optimizer) { return mf__load(ctx, path, with_optimizer, NULL); }

/* ---- the model's state in checkpoints (mf__family.state) ---- */
static MF__FOR_FAMILIES int mf__state_mode(const mf__state_io *io) { return io->mode; }
/* save: a new entry of the list (NULL: out of memory, in ctx) */
static mf__xtensor *mf__state_add(mf__state_io *io, const char *name, int ndim, const int *shape) {
    mf__xtensor *x;
    int d;
    if (io->n == io->cap) {
        int cap = io->cap ? 2 * io->cap : 16;
        mf__xtensor *nt = (mf__xtensor *)MF_REALLOC(io->t, (size_t)cap * sizeof *nt);
        if (!nt) return (mf__xtensor *)mf__fail(io->m->ctx, "out of memory: the model state of a checkpoint");
        io->t = nt; io->cap = cap;
    }
    x = &io->t[io->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->ndim = ndim; x->ne = 1;
    for (d = 0; d < ndim; d++) { x->shape[d] = shape[d]; x->ne *= shape[d]; }
    return x;
}
/* check, apply: the entry of that name with that dtype and shape (NULL: an error in ctx) */
static mf__entry *mf__state_find(mf__state_io *io, const char *name, int i32, int ndim, const int *shape) {
    mf__entry *e = mf__ckpt_find(io->c, "", name);
    int64_t ne = 1;
    int d, same;
    for (d = 0; d < ndim; d++) ne *= shape[d];
    if (!e) return (mf__entry *)mf__fail(io->m->ctx, "mf_model_load: \"%s\" has model state (mf.state) but no tensor \"%s\" "
                                         "(a truncated or edited checkpoint?)", io->path, name);
    same = (i32 ? e->i32 : e->f32) && e->ndim == ndim && e->end - e->begin == (uint64_t)ne * 4;
    for (d = 0; same && d < ndim; d++) same = e->shape[d] == shape[d];
    if (!same) return (mf__entry *)mf__fail(io->m->ctx, "mf_model_load: \"%s\": the state tensor \"%s\" has another dtype or "
                                            "shape than this model's %s (a checkpoint of another config?)", io->path, name, i32 ? "I32" : "F32");
    e->used = 1;
    return e;
}
static MF__FOR_FAMILIES int mf__state_ints(mf__state_io *io, const char *name, int32_t *v, int n) {
    mf__entry *e;
    if (io->mode == MF__STATE_SAVE) {
        mf__xtensor *x = mf__state_add(io, name, 1, &n);
        if (!x || !(x->ints = (int32_t *)mf__xmalloc((size_t)n * sizeof(int32_t))))
            return (mf__fail(io->m->ctx, "out of memory: the model state of a checkpoint"), -1);
        x->i32 = 1;
        memcpy(x->ints, v, (size_t)n * sizeof(int32_t));
        return 0;
    }
    if (!(e = mf__state_find(io, name, 1, 1, &n))) return -1;
    memcpy(v, io->c->data + e->begin, (size_t)n * sizeof(int32_t));
    return 0;
}
static MF__FOR_FAMILIES int mf__state_floats(mf__state_io *io, const char *name, float *data, int ndim, const int *shape) {
    mf__entry *e;
    if (io->mode == MF__STATE_SAVE) {
        mf__xtensor *x = mf__state_add(io, name, ndim, shape);
        if (!x) return -1;
        x->data = data;
        return 0;
    }
    if (!(e = mf__state_find(io, name, 0, ndim, shape))) return -1;
    return io->mode == MF__STATE_APPLY ? mf__dupload(io->m->ctx, data, io->c->data + e->begin, (size_t)(e->end - e->begin)) : 0;
}
/* a registered mixer's pieces: "__state__.layers.<l>.<name>", host data */
static int mf__state_name(mf__state_io *io, const char *name, char *full, size_t size) {
    size_t i, n = name ? strlen(name) : 0;
    int ok = n >= 1 && n <= 48;
    for (i = 0; ok && i < n; i++) ok = (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') || name[i] == '_' || name[i] == '.';
    if (!ok) return (mf__fail(io->m->ctx, "the %s mixer's state hook: piece name \"%s\" must be 1 to 48 of a-z, 0-9, _ and .",
                              io->m->mixer->name, name ? name : "(NULL)"), -1);
    snprintf(full, size, "__state__.layers.%d.%s", io->layer, name);
    return 0;
}
MFDEF int mf_state_mode(const mf_state_io *io) { return io ? io->mode : -1; }
static void mf__state_layer(mf__state_io *io, int layer) { io->layer = layer; }
MFDEF int mf_state_ints(mf_state_io *io, const char *name, int32_t *v, int n) {
    char full[96];
    if (!io || !mf_ok(io->m->ctx) || mf__state_name(io, name, full, sizeof full) < 0) return -1;
    if (n < 1 || !v) return (mf__fail(io->m->ctx, "mf_state_ints: piece %s needs n >= 1 ints (got %d%s)", name, n, v ? "" : ", v NULL"), -1);
    return mf__state_ints(io, full, v, n);
}
MFDEF int mf_state_floats(mf_state_io *io, const char *name, float *host, int ndim, const int *shape) {
    char full[96];
    mf__entry *e;
    int64_t ne = 1;
    int d;
    if (!io || !mf_ok(io->m->ctx) || mf__state_name(io, name, full, sizeof full) < 0) return -1;
    for (d = 0; shape && d < ndim; d++) ne *= shape[d] >= 1 ? shape[d] : 0;
    if ((!host && io->mode != MF__STATE_CHECK) || !shape || ndim < 1 || ndim > 4 || ne < 1)
        return (mf__fail(io->m->ctx, "mf_state_floats: piece %s needs host data and 1 to 4 dimensions of size >= 1 (an "
                         "empty memory is no piece: list it only when it holds rows)", name), -1);
    if (io->mode == MF__STATE_SAVE) { /* a copy in the context's memory, where the checkpoint writers read state */
        float *dev = (float *)mf__dmalloc(io->m->ctx, (size_t)ne * sizeof(float), "a mixer's state");
        if (!dev || mf__dupload(io->m->ctx, dev, host, (size_t)ne * sizeof(float)) < 0 || mf__state_floats(io, full, dev, ndim, shape) < 0) {
            mf__dfree(io->m->ctx, dev);
            return -1;
        }
        io->t[io->n - 1].owned = dev;
        return 0;
    }
    if (!(e = mf__state_find(io, full, 0, ndim, shape))) return -1;
    if (io->mode == MF__STATE_APPLY) memcpy(host, io->c->data + e->begin, (size_t)ne * sizeof(float));
    return 0;
}

MFDEF int mf_model_save(mf_model *m, const char *path, int with_optimizer, const char *const *meta_kv, int n_meta) {
    mf__state_io io;
    char xval[512];
    const char *xkey;
    int i, rc;
    if (!m) return -1;
    if (!mf_ok(m->ctx)) return -1;
    memset(&io, 0, sizeof io);
    io.mode = MF__STATE_SAVE; io.m = m;
    rc = m->fam->state ? m->fam->state(m, &io) : 0;
    xkey = mf__mixer_meta(m, xval, sizeof xval);
    if (rc == 0) rc = mf__save(m->ctx, path, with_optimizer, meta_kv, n_meta, io.t, io.n, xkey, xval);
    for (i = 0; i < io.n; i++) { MF_FREE(io.t[i].ints); mf__dfree(m->ctx, io.t[i].owned); }
    MF_FREE(io.t);
    return rc;
}
MFDEF int mf_model_load(mf_model *m, const char *path, int with_optimizer) {
    return m ? mf__load(m->ctx, path, with_optimizer, m) : -1;
}

MFDEF int mf_load_meta(const char *path, const char *key, char *buf, size_t size) {
    mf__ckpt c;
    int n = -1;
    if (!path || !key) return -2;
    n = mf__ckpt_open(&c, path) ? -2 : mf__ckpt_meta(&c, key, buf, size);
    mf__ckpt_close(&c);
    return n;
}

/* ==== [mf:tokenizer] ======================================================================== */
#ifndef METAFORMER_NO_DATA /* the whole section and [mf:data] */
/* Every kind stores its vocabulary the same way: token id -> bytes (offsets into one blob), and
   byte_id[b], the id of the one-byte token b (-1: not in a character vocabulary). BPE adds the
   ranked merges (left id, right id) -> result id; the earlier a merge, the higher its priority. */
/* the reason into err (cut to size; err may be NULL) for the functions that report through a
   caller's buffer (mf_tokenizer_save, mf_shard_write); returns -1 */
static int mf__data_fail(char *err, size_t size, const char *fmt, ...) {
    va_list ap;
    if (err && size) {
        va_start(ap, fmt);
        vsnprintf(err, size, fmt, ap);
        va_end(ap);
    }
    return -1;
}
#define MF__TOK_ERR 512
/* A hash map from byte strings to (val, n): the pre-token cache of the BPE encoder (val = offset
   of the ids in cache_ids, n = their count) and the token table of GPT-2's encoder.json (val = id).
   The keys' bytes live in one arena. */
typedef struct { uint64_t hash; int64_t koff, val; int32_t klen, n; } mf__bslot;
typedef struct {
    mf__bslot *slot;         /* [mask + 1]; klen < 0: empty */
    uint32_t mask;
    int64_t count;
    unsigned char *keys;
    int64_t keys_len, keys_cap;
} mf__bmap;
/* one merge in the encoder's hash table: the pair (left << 32 | right) -> rank << 32 | result */
typedef struct { uint64_t pair, rank_result; } mf__mslot;
struct mf_tokenizer {
    mf_tokenizer_kind kind;
    int n_vocab;
    int64_t *tok_off;        /* [n_vocab + 1]: token i is blob[tok_off[i] .. tok_off[i + 1]) */
    unsigned char *blob;
    int32_t byte_id[256];
    int n_merges;
    int32_t (*merges)[3];    /* [n_merges]: left, right, result; index = rank */
    char error[MF__TOK_ERR];
    /* ---- the BPE encoder's tables (mf__bpe_prepare) and its scratch (docs/math.md §17.2) ---- */
    mf__mslot *mtab;         /* [mmask + 1] open addressing; pair == UINT64_MAX: empty */
    uint32_t mmask;
    int mshift;              /* 64 - log2(mmask + 1): the hash's top bits index the table */
    mf__bmap cache;          /* pre-token bytes -> its ids in cache_ids */
    int32_t *cache_ids;
    int64_t cache_ids_len, cache_ids_cap;
    unsigned char *scratch;  /* the long-pre-token encoder's arrays */
    size_t scratch_cap;
};

static mf_tokenizer *mf__tok_new(mf_tokenizer_kind kind) {
    mf_tokenizer *t = (mf_tokenizer *)MF_MALLOC(sizeof *t);
    int b;
    if (!t) return NULL;
    memset(t, 0, sizeof *t);
    t->kind = kind;
    for (b = 0; b < 256; b++) t->byte_id[b] = -1;
    return t;
}
static mf_tokenizer *mf__tok_fail(mf_tokenizer *t, const char *fmt, ...) {
    va_list ap;
    if (!t || t->error[0]) return t; /* keep the first error */
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
    return t;
}
/* the vocabulary of the single bytes listed in present[256] (ids in byte order) */
static mf_tokenizer *mf__tok_single_bytes(mf_tokenizer *t, const unsigned char *present) {
    int b, n = 0;
    for (b = 0; b < 256; b++) n += present[b] != 0;
    t->tok_off = (int64_t *)MF_MALLOC((size_t)(n + 1) * sizeof *t->tok_off);
    t->blob = (unsigned char *)MF_MALLOC(n ? (size_t)n : 1);
    if (!t->tok_off || !t->blob) return mf__tok_fail(t, "out of memory building a %d-token vocabulary", n);
    t->tok_off[0] = 0;
    for (b = 0; b < 256; b++)
        if (present[b]) {
            t->blob[t->n_vocab] = (unsigned char)b;
            t->byte_id[b] = t->n_vocab++;
            t->tok_off[t->n_vocab] = t->n_vocab;
        }
    return t;
}

MFDEF mf_tokenizer *mf_tokenizer_bytes(void) {
    unsigned char all[256];
    mf_tokenizer *t = mf__tok_new(MF_TOK_BYTES);
    memset(all, 1, sizeof all);
    return t ? mf__tok_single_bytes(t, all) : NULL;
}

MFDEF mf_tokenizer *mf_tokenizer_chars(const void *text, size_t n) {
    unsigned char present[256];
    const unsigned char *s = (const unsigned char *)text;
    mf_tokenizer *t = mf__tok_new(MF_TOK_CHARS);
    size_t i;
    if (!t) return NULL;
    if (!text || n == 0) return mf__tok_fail(t, "mf_tokenizer_chars: the text is %s; a character vocabulary is the set of bytes of a non-empty text", text ? "empty" : "NULL");
    memset(present, 0, sizeof present);
    for (i = 0; i < n; i++) present[s[i]] = 1;
    return mf__tok_single_bytes(t, present);
}

MFDEF const char *mf_tokenizer_error(const mf_tokenizer *t) {
    if (!t) return "the tokenizer is NULL (out of memory when it was made?)";
    return t->error[0] ? t->error : NULL;
}
MFDEF mf_tokenizer_kind mf_tokenizer_get_kind(const mf_tokenizer *t) { return t ? t->kind : MF_TOK_BYTES; }
MFDEF int mf_tokenizer_vocab_size(const mf_tokenizer *t) { return !t || t->error[0] ? -1 : t->n_vocab; }

MFDEF const unsigned char *mf_tokenizer_token(const mf_tokenizer *t, int32_t id, int *len) {
    if (!t || t->error[0] || id < 0 || id >= t->n_vocab) { if (len) *len = 0; return NULL; }
    if (len) *len = (int)(t->tok_off[id + 1] - t->tok_off[id]);
    return t->blob + t->tok_off[id];
}

MFDEF int64_t mf_tokenizer_decode(mf_tokenizer *t, const int32_t *ids, int64_t n, void *out, int64_t cap) {
    unsigned char *o = (unsigned char *)out;
    int64_t i, len = 0;
    if (mf_tokenizer_error(t)) return -1;
    if (n < 0 || (n > 0 && !ids) || (cap > 0 && !out)) return (mf__tok_fail(t, "mf_tokenizer_decode: %s", n < 0 ? "n is negative" : !ids ? "ids is NULL" : "out is NULL but cap > 0"), -1);
    for (i = 0; i < n; i++) {
        int k;
        const unsigned char *b = mf_tokenizer_token(t, ids[i], &k);
        if (!b) return (mf__tok_fail(t, "mf_tokenizer_decode: id %d at position %lld is outside the vocabulary of %d tokens", (int)ids[i], (long long)i, t->n_vocab), -1);
        if (len < cap) memcpy(o + len, b, (size_t)(cap - len < k ? cap - len : k));
        len += k;
    }
    return len;
}

static int64_t mf__bpe_encode(mf_tokenizer *t, const unsigned char *s, size_t n, int32_t *ids, int64_t cap);
static void mf__bpe_free_tables(mf_tokenizer *t);

MFDEF int64_t mf_tokenizer_encode(mf_tokenizer *t, const void *text, size_t n, int32_t *ids, int64_t cap) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i;
    if (mf_tokenizer_error(t)) return -1;
    if ((n > 0 && !s) || (cap > 0 && !ids)) return (mf__tok_fail(t, "mf_tokenizer_encode: %s is NULL", !s ? "text" : "ids (with cap > 0)"), -1);
    if (t->kind == MF_TOK_BPE) return mf__bpe_encode(t, s, n, ids, cap);
    for (i = 0; i < n; i++) {
        int32_t id = t->byte_id[s[i]];
        if (id < 0) return (mf__tok_fail(t, "mf_tokenizer_encode: byte 0x%02x at offset %zu is not in the %d-character vocabulary (make the vocabulary from a text that contains it, or use a byte or BPE tokenizer)", s[i], i, t->n_vocab), -1);
        if ((int64_t)i < cap) ids[i] = id;
    }
    return (int64_t)n;
}

MFDEF void mf_tokenizer_free(mf_tokenizer *t) {
    if (!t) return;
    MF_FREE(t->tok_off); MF_FREE(t->blob); MF_FREE(t->merges);
    mf__bpe_free_tables(t);
    MF_FREE(t);
}

/* ---- pre-tokenization: GPT-2's rule (docs/math.md §17.3) ---------------------------------------- */
/* BEGIN unicode classes: generated by tools/gen_unicode.py, do not edit */
/* Unicode 14.0.0 (Python 3.11's unicodedata): 792 ranges {first, last, class} of the code points
   in \p{L} (1), \p{N} (2) and White_Space (3), sorted; any other code point is "other" */
static const uint32_t mf__uc_ranges[792][3] = {
    {0x9,0xd,3}, {0x20,0x20,3}, {0x30,0x39,2}, {0x41,0x5a,1}, {0x61,0x7a,1},
    {0x85,0x85,3}, {0xa0,0xa0,3}, {0xaa,0xaa,1}, {0xb2,0xb3,2}, {0xb5,0xb5,1},
    {0xb9,0xb9,2}, {0xba,0xba,1}, {0xbc,0xbe,2}, {0xc0,0xd6,1}, {0xd8,0xf6,1},
    {0xf8,0x2c1,1}, {0x2c6,0x2d1,1}, {0x2e0,0x2e4,1}, {0x2ec,0x2ec,1}, {0x2ee,0x2ee,1},
    {0x370,0x374,1}, {0x376,0x377,1}, {0x37a,0x37d,1}, {0x37f,0x37f,1}, {0x386,0x386,1},
    {0x388,0x38a,1}, {0x38c,0x38c,1}, {0x38e,0x3a1,1}, {0x3a3,0x3f5,1}, {0x3f7,0x481,1},
    {0x48a,0x52f,1}, {0x531,0x556,1}, {0x559,0x559,1}, {0x560,0x588,1}, {0x5d0,0x5ea,1},
    {0x5ef,0x5f2,1}, {0x620,0x64a,1}, {0x660,0x669,2}, {0x66e,0x66f,1}, {0x671,0x6d3,1},
    {0x6d5,0x6d5,1}, {0x6e5,0x6e6,1}, {0x6ee,0x6ef,1}, {0x6f0,0x6f9,2}, {0x6fa,0x6fc,1},
    {0x6ff,0x6ff,1}, {0x710,0x710,1}, {0x712,0x72f,1}, {0x74d,0x7a5,1}, {0x7b1,0x7b1,1},
    {0x7c0,0x7c9,2}, {0x7ca,0x7ea,1}, {0x7f4,0x7f5,1}, {0x7fa,0x7fa,1}, {0x800,0x815,1},
    {0x81a,0x81a,1}, {0x824,0x824,1}, {0x828,0x828,1}, {0x840,0x858,1}, {0x860,0x86a,1},
    {0x870,0x887,1}, {0x889,0x88e,1}, {0x8a0,0x8c9,1}, {0x904,0x939,1}, {0x93d,0x93d,1},
    {0x950,0x950,1}, {0x958,0x961,1}, {0x966,0x96f,2}, {0x971,0x980,1}, {0x985,0x98c,1},
    {0x98f,0x990,1}, {0x993,0x9a8,1}, {0x9aa,0x9b0,1}, {0x9b2,0x9b2,1}, {0x9b6,0x9b9,1},
    {0x9bd,0x9bd,1}, {0x9ce,0x9ce,1}, {0x9dc,0x9dd,1}, {0x9df,0x9e1,1}, {0x9e6,0x9ef,2},
    {0x9f0,0x9f1,1}, {0x9f4,0x9f9,2}, {0x9fc,0x9fc,1}, {0xa05,0xa0a,1}, {0xa0f,0xa10,1},
    {0xa13,0xa28,1}, {0xa2a,0xa30,1}, {0xa32,0xa33,1}, {0xa35,0xa36,1}, {0xa38,0xa39,1},
    {0xa59,0xa5c,1}, {0xa5e,0xa5e,1}, {0xa66,0xa6f,2}, {0xa72,0xa74,1}, {0xa85,0xa8d,1},
    {0xa8f,0xa91,1}, {0xa93,0xaa8,1}, {0xaaa,0xab0,1}, {0xab2,0xab3,1}, {0xab5,0xab9,1},
    {0xabd,0xabd,1}, {0xad0,0xad0,1}, {0xae0,0xae1,1}, {0xae6,0xaef,2}, {0xaf9,0xaf9,1},
    {0xb05,0xb0c,1}, {0xb0f,0xb10,1}, {0xb13,0xb28,1}, {0xb2a,0xb30,1}, {0xb32,0xb33,1},
    {0xb35,0xb39,1}, {0xb3d,0xb3d,1}, {0xb5c,0xb5d,1}, {0xb5f,0xb61,1}, {0xb66,0xb6f,2},
    {0xb71,0xb71,1}, {0xb72,0xb77,2}, {0xb83,0xb83,1}, {0xb85,0xb8a,1}, {0xb8e,0xb90,1},
    {0xb92,0xb95,1}, {0xb99,0xb9a,1}, {0xb9c,0xb9c,1}, {0xb9e,0xb9f,1}, {0xba3,0xba4,1},
    {0xba8,0xbaa,1}, {0xbae,0xbb9,1}, {0xbd0,0xbd0,1}, {0xbe6,0xbf2,2}, {0xc05,0xc0c,1},
    {0xc0e,0xc10,1}, {0xc12,0xc28,1}, {0xc2a,0xc39,1}, {0xc3d,0xc3d,1}, {0xc58,0xc5a,1},
    {0xc5d,0xc5d,1}, {0xc60,0xc61,1}, {0xc66,0xc6f,2}, {0xc78,0xc7e,2}, {0xc80,0xc80,1},
    {0xc85,0xc8c,1}, {0xc8e,0xc90,1}, {0xc92,0xca8,1}, {0xcaa,0xcb3,1}, {0xcb5,0xcb9,1},
    {0xcbd,0xcbd,1}, {0xcdd,0xcde,1}, {0xce0,0xce1,1}, {0xce6,0xcef,2}, {0xcf1,0xcf2,1},
    {0xd04,0xd0c,1}, {0xd0e,0xd10,1}, {0xd12,0xd3a,1}, {0xd3d,0xd3d,1}, {0xd4e,0xd4e,1},
    {0xd54,0xd56,1}, {0xd58,0xd5e,2}, {0xd5f,0xd61,1}, {0xd66,0xd78,2}, {0xd7a,0xd7f,1},
    {0xd85,0xd96,1}, {0xd9a,0xdb1,1}, {0xdb3,0xdbb,1}, {0xdbd,0xdbd,1}, {0xdc0,0xdc6,1},
    {0xde6,0xdef,2}, {0xe01,0xe30,1}, {0xe32,0xe33,1}, {0xe40,0xe46,1}, {0xe50,0xe59,2},
    {0xe81,0xe82,1}, {0xe84,0xe84,1}, {0xe86,0xe8a,1}, {0xe8c,0xea3,1}, {0xea5,0xea5,1},
    {0xea7,0xeb0,1}, {0xeb2,0xeb3,1}, {0xebd,0xebd,1}, {0xec0,0xec4,1}, {0xec6,0xec6,1},
    {0xed0,0xed9,2}, {0xedc,0xedf,1}, {0xf00,0xf00,1}, {0xf20,0xf33,2}, {0xf40,0xf47,1},
    {0xf49,0xf6c,1}, {0xf88,0xf8c,1}, {0x1000,0x102a,1}, {0x103f,0x103f,1}, {0x1040,0x1049,2},
    {0x1050,0x1055,1}, {0x105a,0x105d,1}, {0x1061,0x1061,1}, {0x1065,0x1066,1}, {0x106e,0x1070,1},
    {0x1075,0x1081,1}, {0x108e,0x108e,1}, {0x1090,0x1099,2}, {0x10a0,0x10c5,1}, {0x10c7,0x10c7,1},
    {0x10cd,0x10cd,1}, {0x10d0,0x10fa,1}, {0x10fc,0x1248,1}, {0x124a,0x124d,1}, {0x1250,0x1256,1},
    {0x1258,0x1258,1}, {0x125a,0x125d,1}, {0x1260,0x1288,1}, {0x128a,0x128d,1}, {0x1290,0x12b0,1},
    {0x12b2,0x12b5,1}, {0x12b8,0x12be,1}, {0x12c0,0x12c0,1}, {0x12c2,0x12c5,1}, {0x12c8,0x12d6,1},
    {0x12d8,0x1310,1}, {0x1312,0x1315,1}, {0x1318,0x135a,1}, {0x1369,0x137c,2}, {0x1380,0x138f,1},
    {0x13a0,0x13f5,1}, {0x13f8,0x13fd,1}, {0x1401,0x166c,1}, {0x166f,0x167f,1}, {0x1680,0x1680,3},
    {0x1681,0x169a,1}, {0x16a0,0x16ea,1}, {0x16ee,0x16f0,2}, {0x16f1,0x16f8,1}, {0x1700,0x1711,1},
    {0x171f,0x1731,1}, {0x1740,0x1751,1}, {0x1760,0x176c,1}, {0x176e,0x1770,1}, {0x1780,0x17b3,1},
    {0x17d7,0x17d7,1}, {0x17dc,0x17dc,1}, {0x17e0,0x17e9,2}, {0x17f0,0x17f9,2}, {0x1810,0x1819,2},
    {0x1820,0x1878,1}, {0x1880,0x1884,1}, {0x1887,0x18a8,1}, {0x18aa,0x18aa,1}, {0x18b0,0x18f5,1},
    {0x1900,0x191e,1}, {0x1946,0x194f,2}, {0x1950,0x196d,1}, {0x1970,0x1974,1}, {0x1980,0x19ab,1},
    {0x19b0,0x19c9,1}, {0x19d0,0x19da,2}, {0x1a00,0x1a16,1}, {0x1a20,0x1a54,1}, {0x1a80,0x1a89,2},
    {0x1a90,0x1a99,2}, {0x1aa7,0x1aa7,1}, {0x1b05,0x1b33,1}, {0x1b45,0x1b4c,1}, {0x1b50,0x1b59,2},
    {0x1b83,0x1ba0,1}, {0x1bae,0x1baf,1}, {0x1bb0,0x1bb9,2}, {0x1bba,0x1be5,1}, {0x1c00,0x1c23,1},
    {0x1c40,0x1c49,2}, {0x1c4d,0x1c4f,1}, {0x1c50,0x1c59,2}, {0x1c5a,0x1c7d,1}, {0x1c80,0x1c88,1},
    {0x1c90,0x1cba,1}, {0x1cbd,0x1cbf,1}, {0x1ce9,0x1cec,1}, {0x1cee,0x1cf3,1}, {0x1cf5,0x1cf6,1},
    {0x1cfa,0x1cfa,1}, {0x1d00,0x1dbf,1}, {0x1e00,0x1f15,1}, {0x1f18,0x1f1d,1}, {0x1f20,0x1f45,1},
    {0x1f48,0x1f4d,1}, {0x1f50,0x1f57,1}, {0x1f59,0x1f59,1}, {0x1f5b,0x1f5b,1}, {0x1f5d,0x1f5d,1},
    {0x1f5f,0x1f7d,1}, {0x1f80,0x1fb4,1}, {0x1fb6,0x1fbc,1}, {0x1fbe,0x1fbe,1}, {0x1fc2,0x1fc4,1},
    {0x1fc6,0x1fcc,1}, {0x1fd0,0x1fd3,1}, {0x1fd6,0x1fdb,1}, {0x1fe0,0x1fec,1}, {0x1ff2,0x1ff4,1},
    {0x1ff6,0x1ffc,1}, {0x2000,0x200a,3}, {0x2028,0x2029,3}, {0x202f,0x202f,3}, {0x205f,0x205f,3},
    {0x2070,0x2070,2}, {0x2071,0x2071,1}, {0x2074,0x2079,2}, {0x207f,0x207f,1}, {0x2080,0x2089,2},
    {0x2090,0x209c,1}, {0x2102,0x2102,1}, {0x2107,0x2107,1}, {0x210a,0x2113,1}, {0x2115,0x2115,1},
    {0x2119,0x211d,1}, {0x2124,0x2124,1}, {0x2126,0x2126,1}, {0x2128,0x2128,1}, {0x212a,0x212d,1},
    {0x212f,0x2139,1}, {0x213c,0x213f,1}, {0x2145,0x2149,1}, {0x214e,0x214e,1}, {0x2150,0x2182,2},
    {0x2183,0x2184,1}, {0x2185,0x2189,2}, {0x2460,0x249b,2}, {0x24ea,0x24ff,2}, {0x2776,0x2793,2},
    {0x2c00,0x2ce4,1}, {0x2ceb,0x2cee,1}, {0x2cf2,0x2cf3,1}, {0x2cfd,0x2cfd,2}, {0x2d00,0x2d25,1},
    {0x2d27,0x2d27,1}, {0x2d2d,0x2d2d,1}, {0x2d30,0x2d67,1}, {0x2d6f,0x2d6f,1}, {0x2d80,0x2d96,1},
    {0x2da0,0x2da6,1}, {0x2da8,0x2dae,1}, {0x2db0,0x2db6,1}, {0x2db8,0x2dbe,1}, {0x2dc0,0x2dc6,1},
    {0x2dc8,0x2dce,1}, {0x2dd0,0x2dd6,1}, {0x2dd8,0x2dde,1}, {0x2e2f,0x2e2f,1}, {0x3000,0x3000,3},
    {0x3005,0x3006,1}, {0x3007,0x3007,2}, {0x3021,0x3029,2}, {0x3031,0x3035,1}, {0x3038,0x303a,2},
    {0x303b,0x303c,1}, {0x3041,0x3096,1}, {0x309d,0x309f,1}, {0x30a1,0x30fa,1}, {0x30fc,0x30ff,1},
    {0x3105,0x312f,1}, {0x3131,0x318e,1}, {0x3192,0x3195,2}, {0x31a0,0x31bf,1}, {0x31f0,0x31ff,1},
    {0x3220,0x3229,2}, {0x3248,0x324f,2}, {0x3251,0x325f,2}, {0x3280,0x3289,2}, {0x32b1,0x32bf,2},
    {0x3400,0x4dbf,1}, {0x4e00,0xa48c,1}, {0xa4d0,0xa4fd,1}, {0xa500,0xa60c,1}, {0xa610,0xa61f,1},
    {0xa620,0xa629,2}, {0xa62a,0xa62b,1}, {0xa640,0xa66e,1}, {0xa67f,0xa69d,1}, {0xa6a0,0xa6e5,1},
    {0xa6e6,0xa6ef,2}, {0xa717,0xa71f,1}, {0xa722,0xa788,1}, {0xa78b,0xa7ca,1}, {0xa7d0,0xa7d1,1},
    {0xa7d3,0xa7d3,1}, {0xa7d5,0xa7d9,1}, {0xa7f2,0xa801,1}, {0xa803,0xa805,1}, {0xa807,0xa80a,1},
    {0xa80c,0xa822,1}, {0xa830,0xa835,2}, {0xa840,0xa873,1}, {0xa882,0xa8b3,1}, {0xa8d0,0xa8d9,2},
    {0xa8f2,0xa8f7,1}, {0xa8fb,0xa8fb,1}, {0xa8fd,0xa8fe,1}, {0xa900,0xa909,2}, {0xa90a,0xa925,1},
    {0xa930,0xa946,1}, {0xa960,0xa97c,1}, {0xa984,0xa9b2,1}, {0xa9cf,0xa9cf,1}, {0xa9d0,0xa9d9,2},
    {0xa9e0,0xa9e4,1}, {0xa9e6,0xa9ef,1}, {0xa9f0,0xa9f9,2}, {0xa9fa,0xa9fe,1}, {0xaa00,0xaa28,1},
    {0xaa40,0xaa42,1}, {0xaa44,0xaa4b,1}, {0xaa50,0xaa59,2}, {0xaa60,0xaa76,1}, {0xaa7a,0xaa7a,1},
    {0xaa7e,0xaaaf,1}, {0xaab1,0xaab1,1}, {0xaab5,0xaab6,1}, {0xaab9,0xaabd,1}, {0xaac0,0xaac0,1},
    {0xaac2,0xaac2,1}, {0xaadb,0xaadd,1}, {0xaae0,0xaaea,1}, {0xaaf2,0xaaf4,1}, {0xab01,0xab06,1},
    {0xab09,0xab0e,1}, {0xab11,0xab16,1}, {0xab20,0xab26,1}, {0xab28,0xab2e,1}, {0xab30,0xab5a,1},
    {0xab5c,0xab69,1}, {0xab70,0xabe2,1}, {0xabf0,0xabf9,2}, {0xac00,0xd7a3,1}, {0xd7b0,0xd7c6,1},
    {0xd7cb,0xd7fb,1}, {0xf900,0xfa6d,1}, {0xfa70,0xfad9,1}, {0xfb00,0xfb06,1}, {0xfb13,0xfb17,1},
    {0xfb1d,0xfb1d,1}, {0xfb1f,0xfb28,1}, {0xfb2a,0xfb36,1}, {0xfb38,0xfb3c,1}, {0xfb3e,0xfb3e,1},
    {0xfb40,0xfb41,1}, {0xfb43,0xfb44,1}, {0xfb46,0xfbb1,1}, {0xfbd3,0xfd3d,1}, {0xfd50,0xfd8f,1},
    {0xfd92,0xfdc7,1}, {0xfdf0,0xfdfb,1}, {0xfe70,0xfe74,1}, {0xfe76,0xfefc,1}, {0xff10,0xff19,2},
    {0xff21,0xff3a,1}, {0xff41,0xff5a,1}, {0xff66,0xffbe,1}, {0xffc2,0xffc7,1}, {0xffca,0xffcf,1},
    {0xffd2,0xffd7,1}, {0xffda,0xffdc,1}, {0x10000,0x1000b,1}, {0x1000d,0x10026,1}, {0x10028,0x1003a,1},
    {0x1003c,0x1003d,1}, {0x1003f,0x1004d,1}, {0x10050,0x1005d,1}, {0x10080,0x100fa,1}, {0x10107,0x10133,2},
    {0x10140,0x10178,2}, {0x1018a,0x1018b,2}, {0x10280,0x1029c,1}, {0x102a0,0x102d0,1}, {0x102e1,0x102fb,2},
    {0x10300,0x1031f,1}, {0x10320,0x10323,2}, {0x1032d,0x10340,1}, {0x10341,0x10341,2}, {0x10342,0x10349,1},
    {0x1034a,0x1034a,2}, {0x10350,0x10375,1}, {0x10380,0x1039d,1}, {0x103a0,0x103c3,1}, {0x103c8,0x103cf,1},
    {0x103d1,0x103d5,2}, {0x10400,0x1049d,1}, {0x104a0,0x104a9,2}, {0x104b0,0x104d3,1}, {0x104d8,0x104fb,1},
    {0x10500,0x10527,1}, {0x10530,0x10563,1}, {0x10570,0x1057a,1}, {0x1057c,0x1058a,1}, {0x1058c,0x10592,1},
    {0x10594,0x10595,1}, {0x10597,0x105a1,1}, {0x105a3,0x105b1,1}, {0x105b3,0x105b9,1}, {0x105bb,0x105bc,1},
    {0x10600,0x10736,1}, {0x10740,0x10755,1}, {0x10760,0x10767,1}, {0x10780,0x10785,1}, {0x10787,0x107b0,1},
    {0x107b2,0x107ba,1}, {0x10800,0x10805,1}, {0x10808,0x10808,1}, {0x1080a,0x10835,1}, {0x10837,0x10838,1},
    {0x1083c,0x1083c,1}, {0x1083f,0x10855,1}, {0x10858,0x1085f,2}, {0x10860,0x10876,1}, {0x10879,0x1087f,2},
    {0x10880,0x1089e,1}, {0x108a7,0x108af,2}, {0x108e0,0x108f2,1}, {0x108f4,0x108f5,1}, {0x108fb,0x108ff,2},
    {0x10900,0x10915,1}, {0x10916,0x1091b,2}, {0x10920,0x10939,1}, {0x10980,0x109b7,1}, {0x109bc,0x109bd,2},
    {0x109be,0x109bf,1}, {0x109c0,0x109cf,2}, {0x109d2,0x109ff,2}, {0x10a00,0x10a00,1}, {0x10a10,0x10a13,1},
    {0x10a15,0x10a17,1}, {0x10a19,0x10a35,1}, {0x10a40,0x10a48,2}, {0x10a60,0x10a7c,1}, {0x10a7d,0x10a7e,2},
    {0x10a80,0x10a9c,1}, {0x10a9d,0x10a9f,2}, {0x10ac0,0x10ac7,1}, {0x10ac9,0x10ae4,1}, {0x10aeb,0x10aef,2},
    {0x10b00,0x10b35,1}, {0x10b40,0x10b55,1}, {0x10b58,0x10b5f,2}, {0x10b60,0x10b72,1}, {0x10b78,0x10b7f,2},
    {0x10b80,0x10b91,1}, {0x10ba9,0x10baf,2}, {0x10c00,0x10c48,1}, {0x10c80,0x10cb2,1}, {0x10cc0,0x10cf2,1},
    {0x10cfa,0x10cff,2}, {0x10d00,0x10d23,1}, {0x10d30,0x10d39,2}, {0x10e60,0x10e7e,2}, {0x10e80,0x10ea9,1},
    {0x10eb0,0x10eb1,1}, {0x10f00,0x10f1c,1}, {0x10f1d,0x10f26,2}, {0x10f27,0x10f27,1}, {0x10f30,0x10f45,1},
    {0x10f51,0x10f54,2}, {0x10f70,0x10f81,1}, {0x10fb0,0x10fc4,1}, {0x10fc5,0x10fcb,2}, {0x10fe0,0x10ff6,1},
    {0x11003,0x11037,1}, {0x11052,0x1106f,2}, {0x11071,0x11072,1}, {0x11075,0x11075,1}, {0x11083,0x110af,1},
    {0x110d0,0x110e8,1}, {0x110f0,0x110f9,2}, {0x11103,0x11126,1}, {0x11136,0x1113f,2}, {0x11144,0x11144,1},
    {0x11147,0x11147,1}, {0x11150,0x11172,1}, {0x11176,0x11176,1}, {0x11183,0x111b2,1}, {0x111c1,0x111c4,1},
    {0x111d0,0x111d9,2}, {0x111da,0x111da,1}, {0x111dc,0x111dc,1}, {0x111e1,0x111f4,2}, {0x11200,0x11211,1},
    {0x11213,0x1122b,1}, {0x11280,0x11286,1}, {0x11288,0x11288,1}, {0x1128a,0x1128d,1}, {0x1128f,0x1129d,1},
    {0x1129f,0x112a8,1}, {0x112b0,0x112de,1}, {0x112f0,0x112f9,2}, {0x11305,0x1130c,1}, {0x1130f,0x11310,1},
    {0x11313,0x11328,1}, {0x1132a,0x11330,1}, {0x11332,0x11333,1}, {0x11335,0x11339,1}, {0x1133d,0x1133d,1},
    {0x11350,0x11350,1}, {0x1135d,0x11361,1}, {0x11400,0x11434,1}, {0x11447,0x1144a,1}, {0x11450,0x11459,2},
    {0x1145f,0x11461,1}, {0x11480,0x114af,1}, {0x114c4,0x114c5,1}, {0x114c7,0x114c7,1}, {0x114d0,0x114d9,2},
    {0x11580,0x115ae,1}, {0x115d8,0x115db,1}, {0x11600,0x1162f,1}, {0x11644,0x11644,1}, {0x11650,0x11659,2},
    {0x11680,0x116aa,1}, {0x116b8,0x116b8,1}, {0x116c0,0x116c9,2}, {0x11700,0x1171a,1}, {0x11730,0x1173b,2},
    {0x11740,0x11746,1}, {0x11800,0x1182b,1}, {0x118a0,0x118df,1}, {0x118e0,0x118f2,2}, {0x118ff,0x11906,1},
    {0x11909,0x11909,1}, {0x1190c,0x11913,1}, {0x11915,0x11916,1}, {0x11918,0x1192f,1}, {0x1193f,0x1193f,1},
    {0x11941,0x11941,1}, {0x11950,0x11959,2}, {0x119a0,0x119a7,1}, {0x119aa,0x119d0,1}, {0x119e1,0x119e1,1},
    {0x119e3,0x119e3,1}, {0x11a00,0x11a00,1}, {0x11a0b,0x11a32,1}, {0x11a3a,0x11a3a,1}, {0x11a50,0x11a50,1},
    {0x11a5c,0x11a89,1}, {0x11a9d,0x11a9d,1}, {0x11ab0,0x11af8,1}, {0x11c00,0x11c08,1}, {0x11c0a,0x11c2e,1},
    {0x11c40,0x11c40,1}, {0x11c50,0x11c6c,2}, {0x11c72,0x11c8f,1}, {0x11d00,0x11d06,1}, {0x11d08,0x11d09,1},
    {0x11d0b,0x11d30,1}, {0x11d46,0x11d46,1}, {0x11d50,0x11d59,2}, {0x11d60,0x11d65,1}, {0x11d67,0x11d68,1},
    {0x11d6a,0x11d89,1}, {0x11d98,0x11d98,1}, {0x11da0,0x11da9,2}, {0x11ee0,0x11ef2,1}, {0x11fb0,0x11fb0,1},
    {0x11fc0,0x11fd4,2}, {0x12000,0x12399,1}, {0x12400,0x1246e,2}, {0x12480,0x12543,1}, {0x12f90,0x12ff0,1},
    {0x13000,0x1342e,1}, {0x14400,0x14646,1}, {0x16800,0x16a38,1}, {0x16a40,0x16a5e,1}, {0x16a60,0x16a69,2},
    {0x16a70,0x16abe,1}, {0x16ac0,0x16ac9,2}, {0x16ad0,0x16aed,1}, {0x16b00,0x16b2f,1}, {0x16b40,0x16b43,1},
    {0x16b50,0x16b59,2}, {0x16b5b,0x16b61,2}, {0x16b63,0x16b77,1}, {0x16b7d,0x16b8f,1}, {0x16e40,0x16e7f,1},
    {0x16e80,0x16e96,2}, {0x16f00,0x16f4a,1}, {0x16f50,0x16f50,1}, {0x16f93,0x16f9f,1}, {0x16fe0,0x16fe1,1},
    {0x16fe3,0x16fe3,1}, {0x17000,0x187f7,1}, {0x18800,0x18cd5,1}, {0x18d00,0x18d08,1}, {0x1aff0,0x1aff3,1},
    {0x1aff5,0x1affb,1}, {0x1affd,0x1affe,1}, {0x1b000,0x1b122,1}, {0x1b150,0x1b152,1}, {0x1b164,0x1b167,1},
    {0x1b170,0x1b2fb,1}, {0x1bc00,0x1bc6a,1}, {0x1bc70,0x1bc7c,1}, {0x1bc80,0x1bc88,1}, {0x1bc90,0x1bc99,1},
    {0x1d2e0,0x1d2f3,2}, {0x1d360,0x1d378,2}, {0x1d400,0x1d454,1}, {0x1d456,0x1d49c,1}, {0x1d49e,0x1d49f,1},
    {0x1d4a2,0x1d4a2,1}, {0x1d4a5,0x1d4a6,1}, {0x1d4a9,0x1d4ac,1}, {0x1d4ae,0x1d4b9,1}, {0x1d4bb,0x1d4bb,1},
    {0x1d4bd,0x1d4c3,1}, {0x1d4c5,0x1d505,1}, {0x1d507,0x1d50a,1}, {0x1d50d,0x1d514,1}, {0x1d516,0x1d51c,1},
    {0x1d51e,0x1d539,1}, {0x1d53b,0x1d53e,1}, {0x1d540,0x1d544,1}, {0x1d546,0x1d546,1}, {0x1d54a,0x1d550,1},
    {0x1d552,0x1d6a5,1}, {0x1d6a8,0x1d6c0,1}, {0x1d6c2,0x1d6da,1}, {0x1d6dc,0x1d6fa,1}, {0x1d6fc,0x1d714,1},
    {0x1d716,0x1d734,1}, {0x1d736,0x1d74e,1}, {0x1d750,0x1d76e,1}, {0x1d770,0x1d788,1}, {0x1d78a,0x1d7a8,1},
    {0x1d7aa,0x1d7c2,1}, {0x1d7c4,0x1d7cb,1}, {0x1d7ce,0x1d7ff,2}, {0x1df00,0x1df1e,1}, {0x1e100,0x1e12c,1},
    {0x1e137,0x1e13d,1}, {0x1e140,0x1e149,2}, {0x1e14e,0x1e14e,1}, {0x1e290,0x1e2ad,1}, {0x1e2c0,0x1e2eb,1},
    {0x1e2f0,0x1e2f9,2}, {0x1e7e0,0x1e7e6,1}, {0x1e7e8,0x1e7eb,1}, {0x1e7ed,0x1e7ee,1}, {0x1e7f0,0x1e7fe,1},
    {0x1e800,0x1e8c4,1}, {0x1e8c7,0x1e8cf,2}, {0x1e900,0x1e943,1}, {0x1e94b,0x1e94b,1}, {0x1e950,0x1e959,2},
    {0x1ec71,0x1ecab,2}, {0x1ecad,0x1ecaf,2}, {0x1ecb1,0x1ecb4,2}, {0x1ed01,0x1ed2d,2}, {0x1ed2f,0x1ed3d,2},
    {0x1ee00,0x1ee03,1}, {0x1ee05,0x1ee1f,1}, {0x1ee21,0x1ee22,1}, {0x1ee24,0x1ee24,1}, {0x1ee27,0x1ee27,1},
    {0x1ee29,0x1ee32,1}, {0x1ee34,0x1ee37,1}, {0x1ee39,0x1ee39,1}, {0x1ee3b,0x1ee3b,1}, {0x1ee42,0x1ee42,1},
    {0x1ee47,0x1ee47,1}, {0x1ee49,0x1ee49,1}, {0x1ee4b,0x1ee4b,1}, {0x1ee4d,0x1ee4f,1}, {0x1ee51,0x1ee52,1},
    {0x1ee54,0x1ee54,1}, {0x1ee57,0x1ee57,1}, {0x1ee59,0x1ee59,1}, {0x1ee5b,0x1ee5b,1}, {0x1ee5d,0x1ee5d,1},
    {0x1ee5f,0x1ee5f,1}, {0x1ee61,0x1ee62,1}, {0x1ee64,0x1ee64,1}, {0x1ee67,0x1ee6a,1}, {0x1ee6c,0x1ee72,1},
    {0x1ee74,0x1ee77,1}, {0x1ee79,0x1ee7c,1}, {0x1ee7e,0x1ee7e,1}, {0x1ee80,0x1ee89,1}, {0x1ee8b,0x1ee9b,1},
    {0x1eea1,0x1eea3,1}, {0x1eea5,0x1eea9,1}, {0x1eeab,0x1eebb,1}, {0x1f100,0x1f10c,2}, {0x1fbf0,0x1fbf9,2},
    {0x20000,0x2a6df,1}, {0x2a700,0x2b738,1}, {0x2b740,0x2b81d,1}, {0x2b820,0x2cea1,1}, {0x2ceb0,0x2ebe0,1},
    {0x2f800,0x2fa1d,1}, {0x30000,0x3134a,1},
};
/* END unicode classes */
enum { MF__UC_OTHER, MF__UC_LETTER, MF__UC_NUMBER, MF__UC_SPACE };
/* the classes of the ASCII code points (the fast path; the same as mf__uc_ranges) */
static const unsigned char mf__uc_ascii[128] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3, 3, 3, 0, 0,  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0,
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0};
static int mf__uc_class_of(uint32_t cp) {
    int lo = 0, hi = (int)(sizeof mf__uc_ranges / sizeof mf__uc_ranges[0]) - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < mf__uc_ranges[mid][0]) hi = mid - 1;
        else if (cp > mf__uc_ranges[mid][1]) lo = mid + 1;
        else return (int)mf__uc_ranges[mid][2];
    }
    return MF__UC_OTHER;
}
/* The code point at s[pos] (pos < n) into *cp and its length in bytes, or 0 when s[pos] does not
   start a well-formed UTF-8 sequence (the Unicode standard's table 3-7: no overlong forms, no
   surrogates, nothing above U+10FFFF, nothing cut off by the end). */
static int mf__utf8_cp(const unsigned char *s, size_t n, size_t pos, uint32_t *cp) {
    unsigned c = s[pos], lo2 = 0x80, hi2 = 0xBF, k, i;
    if (c < 0x80) return (*cp = c), 1;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; if (c == 0xE0) lo2 = 0xA0; if (c == 0xED) hi2 = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; if (c == 0xF0) lo2 = 0x90; if (c == 0xF4) hi2 = 0x8F; }
    else return 0;
    if (n - pos < k || s[pos + 1] < lo2 || s[pos + 1] > hi2) return 0;
    *cp = c & (0x7F >> k);
    for (i = 1; i < k; i++) {
        if ((s[pos + i] & 0xC0) != 0x80) return 0;
        *cp = *cp << 6 | (s[pos + i] & 0x3F);
    }
    return (int)k;
}
/* The class of the code point at s[pos] (pos < n) and its length in bytes; a byte that does not
   start a well-formed sequence is one code point of its own, of class other (docs/math.md §17.3). */
static int mf__uc_at(const unsigned char *s, size_t n, size_t pos, int *len) {
    uint32_t cp;
    if (s[pos] < 0x80) return (*len = 1), mf__uc_ascii[s[pos]];
    if (!(*len = mf__utf8_cp(s, n, pos, &cp))) return (*len = 1), MF__UC_OTHER;
    return mf__uc_class_of(cp);
}
/* the end of the run of code points of class cls that starts at pos */
static size_t mf__uc_run_end(const unsigned char *s, size_t n, size_t pos, int cls) {
    while (pos < n) {
        int len;
        if (s[pos] < 0x80) { if (mf__uc_ascii[s[pos]] != cls) break; pos++; continue; }
        if (mf__uc_at(s, n, pos, &len) != cls) break;
        pos += (size_t)len;
    }
    return pos;
}
/* The end (exclusive) of the pre-token that starts at pos (pos < n): BPE merges never cross it.
   GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ by
   hand: the first alternative that matches at pos wins, each as long as it can be. */
static size_t mf__pretok_next(const unsigned char *s, size_t n, size_t pos) {
    int len, cls;
    if (s[pos] == '\'' && pos + 1 < n) {   /* the contractions, lower case only (as GPT-2) */
        unsigned char a = s[pos + 1], b = pos + 2 < n ? s[pos + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
    }
    if (s[pos] == ' ' && pos + 1 < n) {    /* " ?" before a letter, number or other run */
        cls = mf__uc_at(s, n, pos + 1, &len);
        if (cls != MF__UC_SPACE) return mf__uc_run_end(s, n, pos + 1 + (size_t)len, cls);
    }
    cls = mf__uc_at(s, n, pos, &len);
    if (cls == MF__UC_SPACE) {             /* \s+(?!\S)|\s+ */
        size_t e = pos + (size_t)len, last = pos;
        while (e < n && mf__uc_at(s, n, e, &len) == MF__UC_SPACE) { last = e; e += (size_t)len; }
        /* before a non-space, \s+(?!\S) gives back the run's last code point (to " ?\p{L}+" and
           the like); a run of one code point is matched whole by \s+ */
        return e < n && last > pos ? last : e;
    }
    return mf__uc_run_end(s, n, pos + (size_t)len, cls);
}

/* ---- byte-level BPE: encoding, GPT-2's files (docs/math.md §17.2, §17.4) ------------------------ */
#define MF__BPE_SCAN_MAX 32        /* pre-tokens up to this many bytes: scan for the best pair */
#define MF__BPE_CACHE_MAX 128      /* pre-tokens up to this many bytes go into the cache */
#define MF__BPE_CACHE_ENTRIES 65536 /* the cache starts over when it holds this many */
#define MF__BPE_NONE UINT64_MAX    /* "no merge" in the packed rank << 32 | result */

static uint64_t mf__hash_bytes(const unsigned char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n, v;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

static void mf__bmap_free(mf__bmap *m) { MF_FREE(m->slot); MF_FREE(m->keys); memset(m, 0, sizeof *m); }
static void mf__bmap_clear(mf__bmap *m) {
    uint32_t i;
    for (i = 0; m->slot && i <= m->mask; i++) m->slot[i].klen = -1;
    m->count = 0;
    m->keys_len = 0;
}
static mf__bslot *mf__bmap_find(const mf__bmap *m, const unsigned char *s, size_t n, uint64_t h) {
    uint32_t i;
    if (!m->slot) return NULL;
    for (i = (uint32_t)h & m->mask; m->slot[i].klen >= 0; i = (i + 1) & m->mask)
        if (m->slot[i].hash == h && (size_t)m->slot[i].klen == n && memcmp(m->keys + m->slot[i].koff, s, n) == 0)
            return &m->slot[i];
    return NULL;
}
/* a slot for a key known to be absent; NULL when out of memory */
static mf__bslot *mf__bmap_add(mf__bmap *m, const unsigned char *s, size_t n, uint64_t h) {
    uint32_t i;
    if (!m->slot || (uint64_t)(m->count + 1) * 2 > (uint64_t)m->mask + 1) {   /* keep the load <= 1/2 */
        uint32_t size = m->slot ? (m->mask + 1) * 2 : 1024, k;
        mf__bslot *old = m->slot, *ns = (mf__bslot *)MF_MALLOC((size_t)size * sizeof *ns);
        if (!ns || size < 1024) { MF_FREE(ns); return NULL; }
        for (k = 0; k < size; k++) ns[k].klen = -1;
        for (k = 0; old && k <= m->mask; k++)
            if (old[k].klen >= 0) {
                for (i = (uint32_t)old[k].hash & (size - 1); ns[i].klen >= 0; i = (i + 1) & (size - 1)) {}
                ns[i] = old[k];
            }
        MF_FREE(old);
        m->slot = ns;
        m->mask = size - 1;
    }
    if (m->keys_len + (int64_t)n > m->keys_cap) {
        int64_t cap = m->keys_cap ? m->keys_cap : 4096;
        unsigned char *nk;
        while (cap < m->keys_len + (int64_t)n) cap *= 2;
        if (!(nk = (unsigned char *)MF_REALLOC(m->keys, (size_t)cap))) return NULL;
        m->keys = nk;
        m->keys_cap = cap;
    }
    memcpy(m->keys + m->keys_len, s, n);
    for (i = (uint32_t)h & m->mask; m->slot[i].klen >= 0; i = (i + 1) & m->mask) {}
    m->slot[i].hash = h;
    m->slot[i].koff = m->keys_len;
    m->slot[i].klen = (int32_t)n;
    m->slot[i].val = 0;
    m->slot[i].n = 0;
    m->keys_len += (int64_t)n;
    m->count++;
    return &m->slot[i];
}

static void mf__bpe_free_tables(mf_tokenizer *t) {
    MF_FREE(t->mtab); t->mtab = NULL;
    mf__bmap_free(&t->cache);
    MF_FREE(t->cache_ids); t->cache_ids = NULL;
    t->cache_ids_len = t->cache_ids_cap = 0;
    MF_FREE(t->scratch); t->scratch = NULL;
    t->scratch_cap = 0;
}
/* the merge of the pair (a, b): rank << 32 | result, or MF__BPE_NONE */
static uint64_t mf__merge_get(const mf_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t i = (uint32_t)((key * 0x9E3779B97F4A7C15ULL) >> t->mshift);
    for (;; i = (i + 1) & t->mmask) {
        if (t->mtab[i].pair == key) return t->mtab[i].rank_result;
        if (t->mtab[i].pair == MF__BPE_NONE) return MF__BPE_NONE;
    }
}
/* 1 when token r's bytes are token a's followed by token b's */
static int mf__tok_is_concat(const mf_tokenizer *t, int32_t r, int32_t a, int32_t b) {
    int64_t la = t->tok_off[a + 1] - t->tok_off[a], lb = t->tok_off[b + 1] - t->tok_off[b];
    return t->tok_off[r + 1] - t->tok_off[r] == la + lb && memcmp(t->blob + t->tok_off[r], t->blob + t->tok_off[a], (size_t)la) == 0 &&
           memcmp(t->blob + t->tok_off[r] + la, t->blob + t->tok_off[b], (size_t)lb) == 0;
}
/* the vocabulary's invariants the encoder relies on; NULL or what is wrong */
static mf_tokenizer *mf__bpe_check(mf_tokenizer *t) {
    int b, r;
    if (t->n_vocab < 256 || !t->tok_off || !t->blob || (t->n_merges > 0 && !t->merges) || t->n_merges < 0)
        return mf__tok_fail(t, "BPE vocabulary: %d tokens and %d merges (needs the 256 bytes, token bytes and the merge list)", t->n_vocab, t->n_merges);
    for (b = 0; b < 256; b++) {
        int32_t id = t->byte_id[b];
        if (id < 0 || id >= t->n_vocab || t->tok_off[id + 1] - t->tok_off[id] != 1 || t->blob[t->tok_off[id]] != b)
            return mf__tok_fail(t, "BPE vocabulary: byte 0x%02x has id %d, which is not the one-byte token 0x%02x", b, (int)id, b);
    }
    for (r = 0; r < t->n_merges; r++) {
        const int32_t *m = t->merges[r];
        if (m[0] < 0 || m[0] >= t->n_vocab || m[1] < 0 || m[1] >= t->n_vocab || m[2] < 0 || m[2] >= t->n_vocab)
            return mf__tok_fail(t, "BPE vocabulary: merge %d (%d %d -> %d) has an id outside the %d tokens", r, (int)m[0], (int)m[1], (int)m[2], t->n_vocab);
        if (!mf__tok_is_concat(t, m[2], m[0], m[1]))
            return mf__tok_fail(t, "BPE vocabulary: merge %d (%d %d -> %d): the result's bytes are not the left token's followed by the right token's", r, (int)m[0], (int)m[1], (int)m[2]);
    }
    return t;
}
/* Build the encoder's lookup structures from tok_off / blob / byte_id / merges: every constructor
   of a BPE tokenizer (GPT-2's files, training, loading a file) calls it last. Checks the
   vocabulary (every byte has its token, every merge's result is its left token's bytes followed by
   its right token's) and builds the merge table (of a pair listed twice, the first rank counts).
   Returns t (failed when the vocabulary is inconsistent). */
static mf_tokenizer *mf__bpe_prepare(mf_tokenizer *t) {
    uint32_t size = 16, i;
    int bits = 4, r;
    if (!t || t->error[0]) return t;
    if (mf__bpe_check(t)->error[0]) return t;
    if (t->n_merges > (1 << 28)) return mf__tok_fail(t, "BPE vocabulary: %d merges; at most %d are supported", t->n_merges, 1 << 28);
    mf__bpe_free_tables(t);
    while (size < (uint32_t)t->n_merges * 2u) { size *= 2; bits++; }
    if (!(t->mtab = (mf__mslot *)MF_MALLOC((size_t)size * sizeof *t->mtab)))
        return mf__tok_fail(t, "out of memory for the merge table of %d merges", t->n_merges);
    for (i = 0; i < size; i++) t->mtab[i].pair = MF__BPE_NONE;
    t->mmask = size - 1;
    t->mshift = 64 - bits;
    for (r = 0; r < t->n_merges; r++) {
        uint64_t key = (uint64_t)(uint32_t)t->merges[r][0] << 32 | (uint32_t)t->merges[r][1];
        for (i = (uint32_t)((key * 0x9E3779B97F4A7C15ULL) >> t->mshift); t->mtab[i].pair != MF__BPE_NONE && t->mtab[i].pair != key; i = (i + 1) & t->mmask) {}
        if (t->mtab[i].pair == key) continue;
        t->mtab[i].pair = key;
        t->mtab[i].rank_result = (uint64_t)r << 32 | (uint32_t)t->merges[r][2];
    }
    return t;
}

/* BPE of a short pre-token (n <= MF__BPE_SCAN_MAX) in w[]: the packed merge of every adjacent pair
   in pr[], scanned for the lowest rank (the leftmost on a tie, as the definition). Returns the
   number of ids left in w. */
static int mf__bpe_scan(const mf_tokenizer *t, const unsigned char *s, int n, int32_t *w) {
    uint64_t pr[MF__BPE_SCAN_MAX];
    int i;
    for (i = 0; i < n; i++) w[i] = t->byte_id[s[i]];
    for (i = 0; i + 1 < n; i++) pr[i] = mf__merge_get(t, w[i], w[i + 1]);
    while (n > 1) {
        uint64_t best = pr[0];
        int at = 0;
        for (i = 1; i + 1 < n; i++) if (pr[i] < best) { best = pr[i]; at = i; }
        if (best == MF__BPE_NONE) break;
        w[at] = (int32_t)(uint32_t)best;   /* the result; the right token goes */
        memmove(w + at + 1, w + at + 2, (size_t)(n - at - 2) * sizeof *w);
        memmove(pr + at + 1, pr + at + 2, (size_t)(n - at - 3 > 0 ? n - at - 3 : 0) * sizeof *pr);
        n--;
        if (at > 0) pr[at - 1] = mf__merge_get(t, w[at - 1], w[at]);
        if (at + 1 < n) pr[at] = mf__merge_get(t, w[at], w[at + 1]);
    }
    return n;
}

/* min-heap of rank << 32 | node: the lowest rank first, the leftmost node on a tie */
static void mf__heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = v;
}
static uint64_t mf__heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0, c;
    while ((c = 2 * i + 1) < *n) {
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}
/* BPE of a long pre-token in O(n log n): the tokens form a linked list (a merged token keeps the
   left node's index, so node order is text order) and every adjacent pair's merge sits in a heap
   keyed by (rank, node); an entry is stale when its node died or its pair changed (docs/math.md
   §17.2: the same merges as the definition, in the same order). w[] receives the ids; returns how
   many, or -1 when out of memory. */
static int64_t mf__bpe_heap(mf_tokenizer *t, const unsigned char *s, size_t n, int32_t **out) {
    size_t need = n * (3 * sizeof(uint64_t) + 3 * sizeof(int32_t)), nh = 0, i;
    uint64_t *heap, *pr;
    int32_t *w, *nxt, *prv;
    int64_t k = 0;
    if (n > 0x7FFFFFFF) return -1;
    if (need > t->scratch_cap) {
        unsigned char *p = (unsigned char *)MF_REALLOC(t->scratch, need);
        if (!p) return -1;
        t->scratch = p;
        t->scratch_cap = need;
    }
    heap = (uint64_t *)t->scratch;          /* at most n - 1 first entries + 2 per merge < 3n */
    pr = heap + 2 * n;                      /* pr[i]: the merge of node i with its next */
    w = (int32_t *)(pr + n);
    nxt = w + n;
    prv = nxt + n;
    for (i = 0; i < n; i++) { w[i] = t->byte_id[s[i]]; nxt[i] = i + 1 < n ? (int32_t)(i + 1) : -1; prv[i] = (int32_t)i - 1; }
    for (i = 0; i + 1 < n; i++) {
        pr[i] = mf__merge_get(t, w[i], w[i + 1]);
        if (pr[i] != MF__BPE_NONE) mf__heap_push(heap, &nh, (pr[i] & 0xFFFFFFFF00000000ULL) | i);
    }
    while (nh > 0) {
        uint64_t e = mf__heap_pop(heap, &nh);
        int32_t a = (int32_t)(uint32_t)e, b;
        if (w[a] < 0 || nxt[a] < 0 || (pr[a] >> 32) != (e >> 32)) continue;   /* stale */
        b = nxt[a];
        w[a] = (int32_t)(uint32_t)pr[a];
        w[b] = -1;
        nxt[a] = nxt[b];
        if (nxt[b] >= 0) prv[nxt[b]] = a;
        if (prv[a] >= 0) {
            int32_t p = prv[a];
            pr[p] = mf__merge_get(t, w[p], w[a]);
            if (pr[p] != MF__BPE_NONE) mf__heap_push(heap, &nh, (pr[p] & 0xFFFFFFFF00000000ULL) | (uint32_t)p);
        }
        pr[a] = nxt[a] >= 0 ? mf__merge_get(t, w[a], w[nxt[a]]) : MF__BPE_NONE;
        if (pr[a] != MF__BPE_NONE) mf__heap_push(heap, &nh, (pr[a] & 0xFFFFFFFF00000000ULL) | (uint32_t)a);
    }
    for (i = 0;; i = (size_t)nxt[i]) { w[k++] = w[i]; if (nxt[i] < 0) break; }   /* node 0 never dies */
    *out = w;
    return k;
}

/* remember the ids of a pre-token (nothing happens when out of memory: the cache is an optimisation) */
static void mf__bpe_cache_put(mf_tokenizer *t, const unsigned char *s, size_t n, uint64_t h, const int32_t *w, int k) {
    mf__bslot *slot;
    if (t->cache.count >= MF__BPE_CACHE_ENTRIES) { mf__bmap_clear(&t->cache); t->cache_ids_len = 0; }
    if (t->cache_ids_len + k > t->cache_ids_cap) {
        int64_t cap = t->cache_ids_cap ? t->cache_ids_cap * 2 : 4096;
        int32_t *p = (int32_t *)MF_REALLOC(t->cache_ids, (size_t)cap * sizeof *p);
        if (!p) return;
        t->cache_ids = p;
        t->cache_ids_cap = cap;
    }
    if (!(slot = mf__bmap_add(&t->cache, s, n, h))) return;
    memcpy(t->cache_ids + t->cache_ids_len, w, (size_t)k * sizeof *w);
    slot->val = t->cache_ids_len;
    slot->n = k;
    t->cache_ids_len += k;
}

/* Encoding (docs/math.md §17.2): per pre-token, a byte's own id, the cached ids, or BPE (a scan for
   short pre-tokens, the heap for long ones); the result equals the definition's. */
static int64_t mf__bpe_encode(mf_tokenizer *t, const unsigned char *s, size_t n, int32_t *ids, int64_t cap) {
    int64_t out = 0;
    size_t pos, end;
    if (!t->mtab) return (mf__tok_fail(t, "mf_tokenizer_encode: the BPE tables were never built (a constructor must end with mf__bpe_prepare)"), -1);
    for (pos = 0; pos < n; pos = end) {
        size_t len;
        int32_t small[MF__BPE_SCAN_MAX], *w = small;
        int64_t k, i;
        end = mf__pretok_next(s, n, pos);
        len = end - pos;
        if (len == 1) {
            if (out < cap) ids[out] = t->byte_id[s[pos]];
            out++;
            continue;
        }
        if (len <= MF__BPE_CACHE_MAX) {
            uint64_t h = mf__hash_bytes(s + pos, len);
            const mf__bslot *hit = mf__bmap_find(&t->cache, s + pos, len, h);
            if (hit) { w = t->cache_ids + hit->val; k = hit->n; }
            else {
                k = len <= MF__BPE_SCAN_MAX ? mf__bpe_scan(t, s + pos, (int)len, small) : mf__bpe_heap(t, s + pos, len, &w);
                if (k < 0) return (mf__tok_fail(t, "mf_tokenizer_encode: out of memory"), -1);
                mf__bpe_cache_put(t, s + pos, len, h, w, (int)k);
            }
        } else if ((k = mf__bpe_heap(t, s + pos, len, &w)) < 0)
            return (mf__tok_fail(t, "mf_tokenizer_encode: out of memory for a pre-token of %zu bytes", len), -1);
        for (i = 0; i < k; i++, out++) if (out < cap) ids[out] = w[i];
    }
    return out;
}

/* the line (from 1) of position p in the text that starts at s */
static int mf__line_of(const char *s, const char *p) {
    int line = 1;
    for (; s < p; s++) line += *s == '\n';
    return line;
}

/* GPT-2's bytes_to_unicode (docs/math.md §17.2): the bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF stand
   for the code point of the same number, the 68 others, in increasing order, for U+0100-U+0143.
   Fills from_cp[324]: the byte of each code point below U+0144, -1 where none. */
static void mf__gpt2_unicode_map(int *from_cp) {
    int b, k = 0;
    for (b = 0; b < 324; b++) from_cp[b] = -1;
    for (b = 0; b < 256; b++) {
        int plain = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        from_cp[plain ? b : 256 + k++] = b;
    }
}
/* a token's text in GPT-2's files (UTF-8 of mapped code points) into its bytes; returns how many,
   or -1 when a code point is not one of the 256 */
static int mf__gpt2_unmap(const int *from_cp, const char *text, size_t n, unsigned char *out) {
    const unsigned char *s = (const unsigned char *)text;
    size_t pos = 0;
    int k = 0;
    while (pos < n) {
        uint32_t cp;
        int len = mf__utf8_cp(s, n, pos, &cp);
        if (!len || cp >= 324 || from_cp[cp] < 0) return -1;
        out[k++] = (unsigned char)from_cp[cp];
        pos += (size_t)len;
    }
    return k;
}

#define MF__GPT2_KEY_MAX 4096   /* the longest token text read from encoder.json */
/* encoder.json into t (tok_off, blob, n_vocab, byte_id) and the bytes -> id map */
static mf_tokenizer *mf__gpt2_encoder(mf_tokenizer *t, const char *path, const int *from_cp, mf__bmap *map) {
    size_t size = 0;
    const char *why;
    char *text = (char *)mf__read_file(path, &size, &why), *key = NULL;
    unsigned char *raw = NULL;
    int64_t *koff = NULL, kcap = 0, i;
    int32_t n = 0, max_id = -1;
    mf__json j;
    if (!text) return mf__tok_fail(t, "mf_tokenizer_gpt2: encoder.json \"%s\": %s", path ? path : "(null)", why);
    key = (char *)MF_MALLOC(MF__GPT2_KEY_MAX);
    raw = (unsigned char *)MF_MALLOC(MF__GPT2_KEY_MAX);
    j.p = text; j.end = text + size; j.bad = 0;
    if (!key || !raw) mf__tok_fail(t, "mf_tokenizer_gpt2: out of memory");
    else if (!mf__jchar(&j, '{')) mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" is not a JSON object (line %d); give GPT-2's encoder.json (token text -> id)", path, mf__line_of(text, j.p));
    else if (!mf__jchar(&j, '}'))
        do {
            const char *at;
            int64_t id;
            int len;
            mf__bslot *slot;
            mf__jws(&j);
            at = j.p;
            if (!mf__jstr(&j, key, MF__GPT2_KEY_MAX) || !mf__jchar(&j, ':')) { mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" line %d: malformed JSON (expected a \"token\": id pair; a string longer than %d bytes?); the file must be GPT-2's encoder.json", path, mf__line_of(text, at), MF__GPT2_KEY_MAX - 1); break; }
            mf__jws(&j);
            id = mf__jint(&j);
            mf__jws(&j);
            if (j.bad || id > 0x7FFFFFFE || (j.p < j.end && *j.p != ',' && *j.p != '}')) { mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" line %d: the id of \"%.60s\" is not an integer in 0..2147483646", path, mf__line_of(text, at), key); break; }
            if ((len = mf__gpt2_unmap(from_cp, key, strlen(key), raw)) <= 0) { mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" line %d: the token \"%.60s\" is %s; every token is written with GPT-2's 256 byte characters (docs/math.md §17.2)", path, mf__line_of(text, at), key, len ? "not made of GPT-2's byte characters" : "empty"); break; }
            if (mf__bmap_find(map, raw, (size_t)len, mf__hash_bytes(raw, (size_t)len))) { mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" line %d: the token \"%.60s\" appears twice; every token must have one id", path, mf__line_of(text, at), key); break; }
            /* ids are 0..N-1 and each entry takes at least 4 bytes ("x":0), so a larger id is a gap
               (refused below anyway): refuse it before sizing the id table by it */
            if (id > (int64_t)(size / 4)) { mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" line %d: id %lld of \"%.60s\" is larger than this file can hold tokens (%zu bytes); the ids must be 0..N-1 without gaps", path, mf__line_of(text, at), (long long)id, key, size); break; }
            if (id >= kcap) {
                int64_t c = kcap ? kcap : 1024, *p;
                while (c <= id) c *= 2;
                if (!(p = (int64_t *)MF_REALLOC(koff, (size_t)c * sizeof *p))) { mf__tok_fail(t, "mf_tokenizer_gpt2: out of memory"); break; }
                for (i = kcap; i < c; i++) p[i] = -1;
                koff = p;
                kcap = c;
            }
            if (koff[id] >= 0) { mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" line %d: id %lld of \"%.60s\" is already the id of another token; ids must be unique", path, mf__line_of(text, at), (long long)id, key); break; }
            if (!(slot = mf__bmap_add(map, raw, (size_t)len, mf__hash_bytes(raw, (size_t)len)))) { mf__tok_fail(t, "mf_tokenizer_gpt2: out of memory"); break; }
            slot->val = id;
            koff[id] = 0;   /* seen; the slot is looked up after the last add (the table moves as it grows) */
            n++;
            if (id > max_id) max_id = (int32_t)id;
        } while (mf__jchar(&j, ','));
    if (!t->error[0] && !mf__jchar(&j, '}')) mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" line %d: malformed JSON (expected ',' or '}' after an entry)", path, mf__line_of(text, j.p));
    if (!t->error[0]) { mf__jws(&j); if (j.p != j.end) mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" line %d: text after the JSON object", path, mf__line_of(text, j.p)); }
    if (!t->error[0] && n != max_id + 1)
        for (i = 0; i <= max_id; i++) if (koff[i] < 0) { mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\": no token has id %lld, but ids go up to %d; the ids must be 0..N-1 without gaps", path, (long long)i, (int)max_id); break; }
    if (!t->error[0] && n < 256) mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" has %d tokens; GPT-2's encoder.json has one for each of the 256 bytes and more", path, (int)n);
    MF_FREE(text); MF_FREE(key); MF_FREE(raw);
    if (!t->error[0]) {
        uint32_t s;
        for (s = 0; s <= map->mask; s++) if (map->slot[s].klen >= 0) koff[map->slot[s].val] = s;
        t->tok_off = (int64_t *)MF_MALLOC((size_t)(n + 1) * sizeof *t->tok_off);
        t->blob = (unsigned char *)MF_MALLOC((size_t)map->keys_len + 1);
        if (!t->tok_off || !t->blob) mf__tok_fail(t, "mf_tokenizer_gpt2: out of memory for %d tokens", (int)n);
        else {
            t->n_vocab = n;
            t->tok_off[0] = 0;
            for (i = 0; i < n; i++) {
                const mf__bslot *sl = &map->slot[koff[i]];
                memcpy(t->blob + t->tok_off[i], map->keys + sl->koff, (size_t)sl->klen);
                t->tok_off[i + 1] = t->tok_off[i] + sl->klen;
            }
            for (i = 0; i < 256; i++) {
                unsigned char b = (unsigned char)i;
                const mf__bslot *sl = mf__bmap_find(map, &b, 1, mf__hash_bytes(&b, 1));
                if (!sl) { mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" has no token for the byte 0x%02x; GPT-2's encoder.json has all 256", path, (int)i); break; }
                t->byte_id[i] = (int32_t)sl->val;
            }
        }
    }
    MF_FREE(koff);
    return t;
}

/* the id of a merge part (GPT-2's byte characters) or -1 */
static int32_t mf__gpt2_part_id(const int *from_cp, const mf__bmap *map, const char *s, size_t n, unsigned char *raw) {
    int len = n < MF__GPT2_KEY_MAX ? mf__gpt2_unmap(from_cp, s, n, raw) : -1;
    const mf__bslot *sl = len > 0 ? mf__bmap_find(map, raw, (size_t)len, mf__hash_bytes(raw, (size_t)len)) : NULL;
    return sl ? (int32_t)sl->val : -1;
}
/* vocab.bpe into t->merges: "#version..." then "left right" per line, in rank order */
static mf_tokenizer *mf__gpt2_merges(mf_tokenizer *t, const char *path, const int *from_cp, const mf__bmap *map) {
    size_t size = 0;
    const char *why;
    char *text = (char *)mf__read_file(path, &size, &why), *p, *end;
    unsigned char *raw = (unsigned char *)MF_MALLOC(2 * MF__GPT2_KEY_MAX);
    int line = 0, cap = 0;
    if (!text || !raw) { MF_FREE(text); MF_FREE(raw); return mf__tok_fail(t, "mf_tokenizer_gpt2: vocab.bpe \"%s\": %s", path ? path : "(null)", text ? "out of memory" : why); }
    for (p = text, end = text + size; p < end && !t->error[0]; ) {
        char *nl = (char *)memchr(p, '\n', (size_t)(end - p)), *eol = nl ? nl : end, *sp;
        int32_t a, b, r;
        line++;
        if (eol > p && eol[-1] == '\r') eol--;
        if (line == 1 && eol - p >= 8 && memcmp(p, "#version", 8) == 0) { p = nl ? nl + 1 : end; continue; }
        if (eol == p) { p = nl ? nl + 1 : end; continue; }   /* a blank line (the last one) */
        sp = (char *)memchr(p, ' ', (size_t)(eol - p));
        if (!sp || sp == p || sp + 1 == eol || memchr(sp + 1, ' ', (size_t)(eol - sp - 1))) {
            mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" line %d: \"%.*s\" is not a merge \"left right\"; the file must be GPT-2's vocab.bpe", path, line, (int)(eol - p < 60 ? eol - p : 60), p);
            break;
        }
        a = mf__gpt2_part_id(from_cp, map, p, (size_t)(sp - p), raw);
        b = mf__gpt2_part_id(from_cp, map, sp + 1, (size_t)(eol - sp - 1), raw);
        r = -1;
        if (a >= 0 && b >= 0) {
            int la = (int)(t->tok_off[a + 1] - t->tok_off[a]), lb = (int)(t->tok_off[b + 1] - t->tok_off[b]);
            const mf__bslot *sl;
            memcpy(raw, t->blob + t->tok_off[a], (size_t)la);
            memcpy(raw + la, t->blob + t->tok_off[b], (size_t)lb);
            sl = mf__bmap_find(map, raw, (size_t)(la + lb), mf__hash_bytes(raw, (size_t)(la + lb)));
            r = sl ? (int32_t)sl->val : -1;
        }
        if (a < 0 || b < 0 || r < 0) {
            mf__tok_fail(t, "mf_tokenizer_gpt2: \"%s\" line %d: the merge \"%.*s\": %s is not a token of the encoder.json; use the vocab.bpe that belongs to it", path, line, (int)(eol - p < 60 ? eol - p : 60), p,
                         a < 0 ? "the left part" : b < 0 ? "the right part" : "the merged token");
            break;
        }
        if (t->n_merges == cap) {
            int32_t (*m)[3] = (int32_t (*)[3])MF_REALLOC(t->merges, (size_t)(cap = cap ? cap * 2 : 1024) * sizeof *m);
            if (!m) { mf__tok_fail(t, "mf_tokenizer_gpt2: out of memory"); break; }
            t->merges = m;
        }
        t->merges[t->n_merges][0] = a;
        t->merges[t->n_merges][1] = b;
        t->merges[t->n_merges][2] = r;
        t->n_merges++;
        p = nl ? nl + 1 : end;
    }
    MF_FREE(text); MF_FREE(raw);
    return t;
}

MFDEF mf_tokenizer *mf_tokenizer_gpt2(const char *encoder_json_path, const char *vocab_bpe_path) {
    mf_tokenizer *t = mf__tok_new(MF_TOK_BPE);
    mf__bmap map;
    int from_cp[324];
    if (!t) return NULL;
    memset(&map, 0, sizeof map);
    mf__gpt2_unicode_map(from_cp);
    mf__gpt2_encoder(t, encoder_json_path, from_cp, &map);
    if (!t->error[0]) mf__gpt2_merges(t, vocab_bpe_path, from_cp, &map);
    mf__bmap_free(&map);
    return mf__bpe_prepare(t);
}
/* ---- byte-level BPE: training (docs/math.md §17.4) ----------------------------------------------- */
/* The trainer's state. Words are the distinct pre-tokens of the text with their frequencies, each a
   run of token ids that the merges shorten in place. Pairs are the adjacent (left, right) ids with
   their counts (summed over the words, weighted by frequency) and the words they were added in; a
   word may since have lost the pair (the merge then finds nothing in it), but every word holding
   the pair is listed, so a merge visits only the words it changes. The heap orders pairs by
   (count desc, key asc) lazily: an entry may hold an older, higher count and is refreshed when it
   reaches the top, which is enough because a pair's count never grows once the merge that made
   its newest id is over (docs/math.md §17.4). */
#define MF__BPE_MAX_VOCAB (1 << 24)
#define MF__BPE_AHEAD 8 /* words a merge prefetches ahead */
#if defined(__GNUC__) || defined(__clang__)
#define MF__BPE_PREFETCH(p) __builtin_prefetch(p)
#else
#define MF__BPE_PREFETCH(p) ((void)(p))
#endif
typedef struct { int64_t count; uint64_t key; int32_t pair; } mf__bpe_top;
typedef struct {
    uint64_t key;               /* left << 32 | right: the tie rule orders pairs by it */
    int64_t count;
    int32_t *words;             /* the words it was added in, each once */
    int64_t n_words, cap_words;
} mf__bpe_pair;
/* a word: sym[off .. off + len) (while counting: text[off .. off + len)), freq times in the text */
typedef struct { int64_t off, len, freq; } mf__bpe_word;
typedef struct {
    const unsigned char *text;
    int32_t *sym;                           /* the words' ids, one run per word */
    mf__bpe_word *words;
    int64_t n_words, cap_words;
    int32_t *w_table;  uint64_t w_mask;     /* word bytes -> word + 1 (0: empty), while counting */
    mf__bpe_pair *pairs;  int64_t n_pairs, cap_pairs;
    int32_t *p_table;  uint64_t p_mask;     /* pair key -> pair + 1 (0: empty) */
    mf__bpe_top *heap;  int64_t n_heap, cap_heap;
} mf__bpe_trainer;

/* p grown (by doubling) to hold need elements of size sz; NULL when out of memory (p is then
   untouched and the caller still owns it). *cap changes only on success. */
static void *mf__bpe_grow(void *p, int64_t *cap, int64_t need, size_t sz) {
    int64_t c = *cap > 0 ? *cap : 16;
    void *q;
    if (need <= *cap && p) return p;
    while (c < need) c *= 2;
    q = MF_REALLOC(p, (size_t)c * sz);
    if (q) *cap = c;
    return q;
}

/* ---- the index tables ---- */
/* the open-addressing index over items 0..n-1 (slot = item + 1, 0 = empty; load kept <= 1/2),
   rebuilt at twice its size (min_cap at first) with each item's hash. 0, or -1 out of memory. */
static int mf__bpe_index_grow(int32_t **table, uint64_t *mask, int64_t n, uint64_t min_cap,
                              uint64_t (*hash)(const mf__bpe_trainer *, int64_t), const mf__bpe_trainer *tr) {
    uint64_t cap = *table ? 2 * (*mask + 1) : min_cap, i;
    int64_t k;
    int32_t *tab = (int32_t *)MF_MALLOC((size_t)cap * sizeof *tab);
    if (!tab) return -1;
    memset(tab, 0, (size_t)cap * sizeof *tab);
    for (k = 0; k < n; k++) {
        for (i = hash(tr, k) & (cap - 1); tab[i]; i = (i + 1) & (cap - 1)) {}
        tab[i] = (int32_t)(k + 1);
    }
    MF_FREE(*table);
    *table = tab;
    *mask = cap - 1;
    return 0;
}
static uint64_t mf__bpe_word_hash(const mf__bpe_trainer *tr, int64_t w) {
    return mf__hash_bytes(tr->text + tr->words[w].off, (size_t)tr->words[w].len);
}
static uint64_t mf__bpe_pair_hash(const mf__bpe_trainer *tr, int64_t p) { return mf__mix64(tr->pairs[p].key); }

/* ---- counting the distinct pre-tokens ---- */
/* one occurrence of the pre-token text[off .. off + len): a new word or one more of a known one */
static int mf__bpe_count_word(mf__bpe_trainer *tr, int64_t off, int64_t len) {
    const unsigned char *s = tr->text + off;
    uint64_t i;
    int64_t k = tr->n_words;
    mf__bpe_word *nw;
    if ((uint64_t)tr->n_words * 2 >= (tr->w_table ? tr->w_mask + 1 : 0) && mf__bpe_index_grow(&tr->w_table, &tr->w_mask, tr->n_words, 1024, mf__bpe_word_hash, tr)) return -1;
    for (i = mf__hash_bytes(s, (size_t)len) & tr->w_mask; tr->w_table[i]; i = (i + 1) & tr->w_mask) {
        mf__bpe_word *w = &tr->words[tr->w_table[i] - 1];
        if (w->len == len && !memcmp(tr->text + w->off, s, (size_t)len)) { w->freq++; return 0; }
    }
    if (k >= INT32_MAX - 1) return -2; /* word ids are int32 */
    if (!(nw = (mf__bpe_word *)mf__bpe_grow(tr->words, &tr->cap_words, k + 1, sizeof *nw))) return -1;
    tr->words = nw;
    nw[k].off = off; nw[k].len = len; nw[k].freq = 1;
    tr->w_table[i] = (int32_t)(k + 1);
    tr->n_words = k + 1;
    return 0;
}
/* the distinct pre-tokens of the text (in order of first appearance), then each as its byte ids
   (id = byte value) in sym. 0, -1 out of memory, -2 too many distinct pre-tokens */
static int mf__bpe_count_words(mf__bpe_trainer *tr, size_t n) {
    size_t pos = 0, end;
    int64_t w, at = 0, i;
    int rc;
    for (; pos < n; pos = end) {
        end = mf__pretok_next(tr->text, n, pos);
        if (end <= pos || end > n) end = n; /* never loop forever on a faulty pre-tokenizer */
        if ((rc = mf__bpe_count_word(tr, (int64_t)pos, (int64_t)(end - pos))) != 0) return rc;
    }
    MF_FREE(tr->w_table);
    tr->w_table = NULL;
    for (w = 0; w < tr->n_words; w++) at += tr->words[w].len;
    tr->sym = (int32_t *)MF_MALLOC((size_t)(at ? at : 1) * sizeof *tr->sym);
    if (!tr->sym) return -1;
    for (w = 0, at = 0; w < tr->n_words; w++) {
        for (i = 0; i < tr->words[w].len; i++) tr->sym[at + i] = tr->text[tr->words[w].off + i];
        tr->words[w].off = at; /* from here on an offset into sym */
        at += tr->words[w].len;
    }
    return 0;
}

/* ---- pairs ---- */
/* the pair (left, right), made (count 0) when new; -1 out of memory or too many pairs */
static int64_t mf__bpe_pair_of(mf__bpe_trainer *tr, int32_t left, int32_t right) {
    uint64_t key = (uint64_t)left << 32 | (uint64_t)right, i;
    mf__bpe_pair *np;
    if ((uint64_t)tr->n_pairs * 2 >= (tr->p_table ? tr->p_mask + 1 : 0) && mf__bpe_index_grow(&tr->p_table, &tr->p_mask, tr->n_pairs, 4096, mf__bpe_pair_hash, tr)) return -1;
    for (i = mf__mix64(key) & tr->p_mask; tr->p_table[i]; i = (i + 1) & tr->p_mask)
        if (tr->pairs[tr->p_table[i] - 1].key == key) return tr->p_table[i] - 1;
    if (tr->n_pairs >= INT32_MAX - 1) return -1;
    np = (mf__bpe_pair *)mf__bpe_grow(tr->pairs, &tr->cap_pairs, tr->n_pairs + 1, sizeof *np);
    if (!np) return -1;
    tr->pairs = np;
    memset(&np[tr->n_pairs], 0, sizeof *np);
    np[tr->n_pairs].key = key;
    tr->p_table[i] = (int32_t)(tr->n_pairs + 1);
    return tr->n_pairs++;
}
/* count (left, right) delta more times, as found in word w; a pair that gains lists w (once: a
   pair gains only while one word at a time is scanned, so comparing with the last entry is enough) */
static int mf__bpe_pair_add(mf__bpe_trainer *tr, int32_t left, int32_t right, int64_t delta, int32_t w) {
    int64_t p = mf__bpe_pair_of(tr, left, right);
    mf__bpe_pair *pr;
    if (p < 0) return -1;
    pr = &tr->pairs[p];
    pr->count += delta;
    if (delta > 0 && (pr->n_words == 0 || pr->words[pr->n_words - 1] != w)) {
        int32_t *nw = (int32_t *)mf__bpe_grow(pr->words, &pr->cap_words, pr->n_words + 1, sizeof *nw);
        if (!nw) return -1;
        pr->words = nw;
        nw[pr->n_words++] = w;
    }
    return 0;
}

/* ---- the lazy max-heap: the best pair first (higher count; equal counts: smaller key) ---- */
static int mf__bpe_before(const mf__bpe_top *a, const mf__bpe_top *b) {
    return a->count > b->count || (a->count == b->count && a->key < b->key);
}
static int mf__bpe_push(mf__bpe_trainer *tr, int64_t p) {
    mf__bpe_top e, *h = (mf__bpe_top *)mf__bpe_grow(tr->heap, &tr->cap_heap, tr->n_heap + 1, sizeof *h);
    int64_t i = tr->n_heap++;
    if (!h) { tr->n_heap--; return -1; }
    tr->heap = h;
    e.count = tr->pairs[p].count; e.key = tr->pairs[p].key; e.pair = (int32_t)p;
    for (; i > 0 && mf__bpe_before(&e, &h[(i - 1) / 2]); i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = e;
    return 0;
}
static mf__bpe_top mf__bpe_pop(mf__bpe_trainer *tr) {
    mf__bpe_top *h = tr->heap, top = h[0], last = h[--tr->n_heap];
    int64_t i = 0, c;
    for (; (c = 2 * i + 1) < tr->n_heap; i = c) {
        if (c + 1 < tr->n_heap && mf__bpe_before(&h[c + 1], &h[c])) c++;
        if (!mf__bpe_before(&h[c], &last)) break;
        h[i] = h[c];
    }
    if (tr->n_heap > 0) h[i] = last;
    return top;
}
/* the best pair by its current count (stale entries refreshed or dropped), or -1 when none is left */
static int64_t mf__bpe_best(mf__bpe_trainer *tr) {
    while (tr->n_heap > 0) {
        mf__bpe_top e = mf__bpe_pop(tr);
        int64_t now = tr->pairs[e.pair].count;
        if (now == e.count) return e.pair;
        if (now > 0 && mf__bpe_push(tr, e.pair)) return -2; /* now < e.count: back in its place */
    }
    return -1;
}

/* ---- merging ---- */
/* replace every (a, b) in word w, left to right, by c, and update the counts of the pairs around
   each occurrence: the left neighbour is the already rewritten one (it may be a c just made), the
   right one the old one, so "a b a b" loses (a,b) twice and (b,a) once and gains (c,c) once */
static int mf__bpe_merge_word(mf__bpe_trainer *tr, int32_t w, int32_t a, int32_t b, int32_t c) {
    int32_t *s = tr->sym + tr->words[w].off;
    int64_t len = tr->words[w].len, f = tr->words[w].freq, i = 0, j = 0;
    while (i < len) {
        if (i + 1 < len && s[i] == a && s[i + 1] == b) {
            if (j > 0 && (mf__bpe_pair_add(tr, s[j - 1], a, -f, w) || mf__bpe_pair_add(tr, s[j - 1], c, f, w))) return -1;
            if (i + 2 < len && (mf__bpe_pair_add(tr, b, s[i + 2], -f, w) || mf__bpe_pair_add(tr, c, s[i + 2], f, w))) return -1;
            if (mf__bpe_pair_add(tr, a, b, -f, w)) return -1;
            s[j++] = c;
            i += 2;
        } else {
            s[j++] = s[i++];
        }
    }
    tr->words[w].len = j;
    return 0;
}
/* merge pair p into the new id c in every word listed for it; the pairs this made (all contain c,
   so they are exactly the ones numbered from the first new one on) go into the heap */
static int mf__bpe_merge(mf__bpe_trainer *tr, int64_t p, int32_t c) {
    mf__bpe_pair *pr = &tr->pairs[p];
    int32_t a = (int32_t)(pr->key >> 32), b = (int32_t)(pr->key & 0xffffffffu), *list = pr->words;
    int64_t k, n = pr->n_words, first_new = tr->n_pairs;
    int rc = 0;
    pr->words = NULL; pr->n_words = pr->cap_words = 0; /* (a, b) never gains again */
    for (k = 0; k < n && !rc; k++) {
        /* the words lie all over memory: ask for them ahead (the latency dominates the merges) */
        if (k + 2 * MF__BPE_AHEAD < n) MF__BPE_PREFETCH(&tr->words[list[k + 2 * MF__BPE_AHEAD]]);
        if (k + MF__BPE_AHEAD < n) MF__BPE_PREFETCH(tr->sym + tr->words[list[k + MF__BPE_AHEAD]].off);
        rc = mf__bpe_merge_word(tr, list[k], a, b, c);
    }
    MF_FREE(list);
    for (k = first_new; k < tr->n_pairs && !rc; k++)
        if (tr->pairs[k].count > 0) rc = mf__bpe_push(tr, k);
    return rc;
}
/* every adjacent pair of every word, counted, then all into the heap */
static int mf__bpe_count_pairs(mf__bpe_trainer *tr) {
    int64_t w, i, p;
    for (w = 0; w < tr->n_words; w++) {
        const int32_t *s = tr->sym + tr->words[w].off;
        for (i = 0; i + 1 < tr->words[w].len; i++)
            if (mf__bpe_pair_add(tr, s[i], s[i + 1], tr->words[w].freq, (int32_t)w)) return -1;
    }
    for (p = 0; p < tr->n_pairs; p++)
        if (mf__bpe_push(tr, p)) return -1;
    return 0;
}
static void mf__bpe_trainer_free(mf__bpe_trainer *tr) {
    int64_t p;
    for (p = 0; p < tr->n_pairs; p++) MF_FREE(tr->pairs[p].words);
    MF_FREE(tr->pairs); MF_FREE(tr->p_table); MF_FREE(tr->heap);
    MF_FREE(tr->sym); MF_FREE(tr->words); MF_FREE(tr->w_table);
}

/* ---- the vocabulary being built ---- */
typedef struct { int64_t cap_tok, cap_blob, cap_merges; } mf__bpe_caps;
/* the 256 single bytes, ids 0..255 = byte values */
static int mf__bpe_vocab_bytes(mf_tokenizer *t, mf__bpe_caps *caps) {
    int b;
    t->tok_off = (int64_t *)mf__bpe_grow(NULL, &caps->cap_tok, 257, sizeof *t->tok_off);
    t->blob = (unsigned char *)mf__bpe_grow(NULL, &caps->cap_blob, 256, 1);
    if (!t->tok_off || !t->blob) return -1;
    for (b = 0; b < 256; b++) { t->blob[b] = (unsigned char)b; t->byte_id[b] = b; t->tok_off[b] = b; }
    t->tok_off[256] = 256;
    t->n_vocab = 256;
    return 0;
}
/* the token left + right as the next id, and the merge that makes it */
static int mf__bpe_vocab_add(mf_tokenizer *t, mf__bpe_caps *caps, int32_t left, int32_t right) {
    int64_t ll = t->tok_off[left + 1] - t->tok_off[left], lr = t->tok_off[right + 1] - t->tok_off[right];
    int64_t end = t->tok_off[t->n_vocab];
    void *q;
    if (!(q = mf__bpe_grow(t->tok_off, &caps->cap_tok, t->n_vocab + 2, sizeof *t->tok_off))) return -1;
    t->tok_off = (int64_t *)q;
    if (!(q = mf__bpe_grow(t->blob, &caps->cap_blob, end + ll + lr, 1))) return -1;
    t->blob = (unsigned char *)q;
    if (!(q = mf__bpe_grow(t->merges, &caps->cap_merges, t->n_merges + 1, sizeof *t->merges))) return -1;
    t->merges = (int32_t (*)[3])q;
    memcpy(t->blob + end, t->blob + t->tok_off[left], (size_t)ll);
    memcpy(t->blob + end + ll, t->blob + t->tok_off[right], (size_t)lr);
    t->tok_off[t->n_vocab + 1] = end + ll + lr;
    t->merges[t->n_merges][0] = left; t->merges[t->n_merges][1] = right; t->merges[t->n_merges][2] = t->n_vocab;
    t->n_merges++;
    t->n_vocab++;
    return 0;
}

/* the merges, best pair first, until vocab_size ids or the best pair is rarer than min_freq */
static int mf__bpe_train_loop(mf_tokenizer *t, mf__bpe_trainer *tr, mf__bpe_caps *caps, int vocab_size,
                              int64_t min_freq, const mf_bpe_options *opt) {
    int total = vocab_size - 256, every = total / 100 > 0 ? total / 100 : 1;
    void (*progress)(void *, int, int) = opt ? opt->progress : NULL;
    if (progress) progress(opt->user, 0, total);
    while (t->n_vocab < vocab_size) {
        int64_t p = mf__bpe_best(tr);
        if (p == -2) return -1;
        if (p < 0 || tr->pairs[p].count < min_freq) break;
        if (mf__bpe_vocab_add(t, caps, (int32_t)(tr->pairs[p].key >> 32), (int32_t)(tr->pairs[p].key & 0xffffffffu)) ||
            mf__bpe_merge(tr, p, t->n_vocab - 1))
            return -1;
        if (progress && t->n_merges % every == 0 && t->n_vocab < vocab_size) progress(opt->user, t->n_merges, total);
    }
    if (progress) progress(opt->user, t->n_merges, total);
    return 0;
}

MFDEF mf_tokenizer *mf_tokenizer_train_bpe(const void *text, size_t n, int vocab_size, const mf_bpe_options *opt) {
    mf_tokenizer *t = mf__tok_new(MF_TOK_BPE);
    mf__bpe_trainer tr;
    mf__bpe_caps caps;
    int64_t min_freq = opt && opt->min_frequency ? opt->min_frequency : 2;
    int rc;
    if (!t) return NULL;
    if (!text || n == 0)
        return mf__tok_fail(t, "mf_tokenizer_train_bpe: the text is %s; BPE learns its merges from a non-empty text", text ? "empty (n = 0)" : "NULL");
    if (vocab_size < 256 || vocab_size > MF__BPE_MAX_VOCAB)
        return mf__tok_fail(t, "mf_tokenizer_train_bpe: vocab_size %d is out of range; it counts the 256 single bytes plus the merges, so it must be in 256..%d", vocab_size, MF__BPE_MAX_VOCAB);
    if (min_freq < 0)
        return mf__tok_fail(t, "mf_tokenizer_train_bpe: min_frequency %d is negative; use 0 (the default, 2) or a count >= 1", (int)min_freq);
    memset(&tr, 0, sizeof tr);
    memset(&caps, 0, sizeof caps);
    tr.text = (const unsigned char *)text;
    rc = mf__bpe_vocab_bytes(t, &caps);
    if (!rc) rc = mf__bpe_count_words(&tr, n);
    if (!rc) rc = mf__bpe_count_pairs(&tr);
    if (!rc) rc = mf__bpe_train_loop(t, &tr, &caps, vocab_size, min_freq, opt);
    if (rc == -2)
        mf__tok_fail(t, "mf_tokenizer_train_bpe: the text has more than %d distinct pre-tokens; train on a part of it", INT32_MAX - 2);
    else if (rc)
        mf__tok_fail(t, "mf_tokenizer_train_bpe: out of memory after %d merges (%lld distinct pre-tokens, %lld pairs); train on a smaller text or a smaller vocab_size",
                     t->n_merges, (long long)tr.n_words, (long long)tr.n_pairs);
    mf__bpe_trainer_free(&tr);
    return rc ? t : mf__bpe_prepare(t);
}
/* ---- the tokenizer file (docs/math.md §17.5) ----------------------------------------------------- */
static const char *mf__tok_kind_name(mf_tokenizer_kind k) { return k == MF_TOK_BYTES ? "bytes" : k == MF_TOK_CHARS ? "chars" : "bpe"; }

/* Which ids the file lists as extras: every token that is not a single byte's token and not made
   by a merge from tokens made before it (for a BPE vocabulary, <|endoftext|> and the like).
   extra[n_vocab] is filled with 0/1; returns how many, or -1 when out of memory. */
static int mf__tok_extras(const mf_tokenizer *t, unsigned char *extra) {
    unsigned char *made = (unsigned char *)MF_MALLOC((size_t)t->n_vocab);
    int b, r, i, n = 0;
    if (!made) return -1;
    memset(made, 0, (size_t)t->n_vocab);
    memset(extra, 0, (size_t)t->n_vocab);
    for (b = 0; b < 256; b++) if (t->byte_id[b] >= 0) made[t->byte_id[b]] = 1;
    for (r = 0; r < t->n_merges; r++) {
        for (i = 0; i < 2; i++) if (!made[t->merges[r][i]]) made[t->merges[r][i]] = extra[t->merges[r][i]] = 1;
        made[t->merges[r][2]] = 1;
    }
    for (i = 0; i < t->n_vocab; i++) { if (!made[i]) extra[i] = 1; n += extra[i]; }
    MF_FREE(made);
    return n;
}

MFDEF int mf_tokenizer_save(const mf_tokenizer *t, const char *path, char *err, size_t err_size) {
    unsigned char *extra;
    char why[1024];
    mf__afile w;
    int b, i, r, n_bytes = 0, n_extra;
    if (err && err_size) err[0] = 0;
    if (mf_tokenizer_error(t)) return mf__data_fail(err, err_size, "mf_tokenizer_save: %s", mf_tokenizer_error(t));
    if (!path || !path[0]) return mf__data_fail(err, err_size, "mf_tokenizer_save: the path is NULL or empty");
    for (b = 0; b < 256; b++) n_bytes += t->byte_id[b] >= 0;
    extra = (unsigned char *)MF_MALLOC((size_t)t->n_vocab);
    if (!extra || (n_extra = mf__tok_extras(t, extra)) < 0) {
        MF_FREE(extra);
        return mf__data_fail(err, err_size, "mf_tokenizer_save: out of memory");
    }
    if (mf__afile_open(&w, path, "mf_tokenizer_save", why, sizeof why) < 0) { MF_FREE(extra); return mf__data_fail(err, err_size, "%s", why); }
    mf__afile_printf(&w, "metaformer-tokenizer 1\nkind %s\nvocab_size %d\nbytes %d\n", mf__tok_kind_name(t->kind), t->n_vocab, n_bytes);
    for (b = 0; b < 256; b++) if (t->byte_id[b] >= 0) mf__afile_printf(&w, "%02x %d\n", b, (int)t->byte_id[b]);
    mf__afile_printf(&w, "extras %d\n", n_extra);
    for (i = 0; i < t->n_vocab && !w.err; i++)
        if (extra[i]) {
            int64_t k;
            mf__afile_printf(&w, "%d ", i);
            for (k = t->tok_off[i]; k < t->tok_off[i + 1]; k++) mf__afile_printf(&w, "%02x", t->blob[k]);
            mf__afile_put(&w, "\n", 1);
        }
    mf__afile_printf(&w, "merges %d\n", t->n_merges);
    for (r = 0; r < t->n_merges && !w.err; r++) mf__afile_printf(&w, "%d %d %d\n", (int)t->merges[r][0], (int)t->merges[r][1], (int)t->merges[r][2]);
    mf__afile_put(&w, "end\n", 4);
    MF_FREE(extra);
    return mf__afile_commit(&w, why, sizeof why) < 0 ? mf__data_fail(err, err_size, "%s", why) : 0;
}

/* ---- reading it: one line at a time, every field checked ---- */
#define MF__TOKEN_MAX_BYTES (1 << 20)   /* a longer token means a corrupt file */
typedef struct {
    mf_tokenizer *t;
    const char *path;
    char *p, *end;            /* the rest of the file */
    int line;
    char *f[4];               /* the current line's fields */
    int nf;
} mf__tfile;
/* the next line split at single spaces into at most 4 fields; 0 at the end of the file */
static int mf__tf_next(mf__tfile *r) {
    char *nl, *q;
    if (r->p >= r->end) { r->nf = 0; return 0; }
    nl = (char *)memchr(r->p, '\n', (size_t)(r->end - r->p));
    if (!nl) nl = r->end;
    *nl = 0;
    r->line++;
    r->nf = 0;
    for (q = r->p; r->nf < 4; ) {
        r->f[r->nf++] = q;
        if (!(q = strchr(q, ' '))) break;
        *q++ = 0;
    }
    if (r->nf == 4 && strchr(r->f[3], ' ')) r->nf = 5;   /* too many: no line has more than 3 */
    r->p = nl + 1;
    return 1;
}
static mf_tokenizer *mf__tf_fail(mf__tfile *r, const char *what) {
    return mf__tok_fail(r->t, "mf_tokenizer_load: \"%s\" line %d: %s; the file is corrupt or not written by mf_tokenizer_save (make it again)", r->path, r->line, what);
}
/* a decimal integer in [lo, hi] and nothing else; -1 when it is not */
static int64_t mf__tf_int(const char *s, int64_t lo, int64_t hi) {
    int64_t v = 0;
    int k = 0;
    for (; s[k] >= '0' && s[k] <= '9' && k < 12; k++) v = v * 10 + (s[k] - '0');
    return k == 0 || s[k] || (k > 1 && s[0] == '0') || v < lo || v > hi ? -1 : v;
}
static int mf__hexval(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }
/* "NAME COUNT": COUNT in [0, hi]; -1 (and t failed) otherwise */
static int64_t mf__tf_count(mf__tfile *r, const char *name, int64_t hi) {
    int64_t v;
    char msg[96];
    if (!mf__tf_next(r)) return (mf__tf_fail(r, "the file ends early"), -1);
    snprintf(msg, sizeof msg, "expected \"%s N\" with N in 0..%lld", name, (long long)hi);
    if (r->nf != 2 || strcmp(r->f[0], name) != 0 || (v = mf__tf_int(r->f[1], 0, hi)) < 0) return (mf__tf_fail(r, msg), -1);
    return v;
}

/* the vocabulary being read: each id's bytes in a growing arena, in the order they are defined */
typedef struct { int64_t *off, *len; unsigned char *bytes; int64_t n, cap; } mf__tdefs;
static int mf__tdefs_add(mf__tdefs *d, int32_t id, const unsigned char *a, int64_t la, const unsigned char *b, int64_t lb) {
    if (d->n + la + lb > d->cap) {
        int64_t cap = d->cap ? d->cap : 4096;
        unsigned char *p;
        /* a and b may point into the old arena: their offsets there, taken before it moves (none
           while d->n is 0, when d->bytes may be NULL and no offset may be added to it) */
        int64_t in_a = d->n && a >= d->bytes && a < d->bytes + d->n ? a - d->bytes : -1;
        int64_t in_b = d->n && b && b >= d->bytes && b < d->bytes + d->n ? b - d->bytes : -1;
        while (cap < d->n + la + lb) cap *= 2;
        if (!(p = (unsigned char *)MF_REALLOC(d->bytes, (size_t)cap))) return -1;
        if (in_a >= 0) a = p + in_a;
        if (in_b >= 0) b = p + in_b;
        d->bytes = p;
        d->cap = cap;
    }
    memcpy(d->bytes + d->n, a, (size_t)la);
    if (lb) memcpy(d->bytes + d->n + la, b, (size_t)lb);
    d->off[id] = d->n;
    d->len[id] = la + lb;
    d->n += la + lb;
    return 0;
}

/* the "bytes" block: "HH id" per line */
static void mf__tf_bytes(mf__tfile *r, mf__tdefs *d, int n_vocab) {
    int64_t k, n = mf__tf_count(r, "bytes", 256);
    int last = -1;
    for (k = 0; k < n && !r->t->error[0]; k++) {
        int hi, lo;
        int64_t id;
        unsigned char b;
        if (!mf__tf_next(r)) { mf__tf_fail(r, "the file ends inside the bytes block"); break; }
        if (r->nf != 2 || strlen(r->f[0]) != 2 || (hi = mf__hexval(r->f[0][0])) < 0 || (lo = mf__hexval(r->f[0][1])) < 0 || (id = mf__tf_int(r->f[1], 0, n_vocab - 1)) < 0) { mf__tf_fail(r, "expected \"HH id\": a byte in lower-case hex and its id below vocab_size"); break; }
        b = (unsigned char)(hi * 16 + lo);
        if (b <= last) { mf__tf_fail(r, "the bytes are not in increasing order (or one is listed twice)"); break; }
        if (d->len[id] >= 0) { mf__tf_fail(r, "this id is defined twice"); break; }
        last = b;
        r->t->byte_id[b] = (int32_t)id;
        if (mf__tdefs_add(d, (int32_t)id, &b, 1, NULL, 0)) { mf__tok_fail(r->t, "mf_tokenizer_load: out of memory"); break; }
    }
}
/* the "extras" block: "id hex" per line */
static void mf__tf_extras(mf__tfile *r, mf__tdefs *d, int n_vocab) {
    int64_t k, n = r->t->error[0] ? 0 : mf__tf_count(r, "extras", n_vocab);
    unsigned char *buf = NULL;
    for (k = 0; k < n && !r->t->error[0]; k++) {
        size_t len, i;
        int64_t id;
        if (!mf__tf_next(r)) { mf__tf_fail(r, "the file ends inside the extras block"); break; }
        len = r->nf == 2 ? strlen(r->f[1]) : 0;
        if (r->nf != 2 || (id = mf__tf_int(r->f[0], 0, n_vocab - 1)) < 0 || len == 0 || len % 2 || len / 2 > MF__TOKEN_MAX_BYTES) { mf__tf_fail(r, "expected \"id hex\": an id below vocab_size and the token's bytes in hex"); break; }
        if (d->len[id] >= 0) { mf__tf_fail(r, "this id is defined twice"); break; }
        if (!(buf = (unsigned char *)MF_REALLOC(buf, len / 2))) { mf__tok_fail(r->t, "mf_tokenizer_load: out of memory"); break; }
        for (i = 0; i < len / 2; i++) {
            int hi = mf__hexval(r->f[1][2 * i]), lo = mf__hexval(r->f[1][2 * i + 1]);
            if (hi < 0 || lo < 0) break;
            buf[i] = (unsigned char)(hi * 16 + lo);
        }
        if (i < len / 2) { mf__tf_fail(r, "the token's bytes are not lower-case hex"); break; }
        if (mf__tdefs_add(d, (int32_t)id, buf, (int64_t)(len / 2), NULL, 0)) { mf__tok_fail(r->t, "mf_tokenizer_load: out of memory"); break; }
    }
    MF_FREE(buf);
}
/* the "merges" block: "left right result" per line, in rank order */
static void mf__tf_merges(mf__tfile *r, mf__tdefs *d, int n_vocab) {
    mf_tokenizer *t = r->t;
    int64_t k, n = t->error[0] ? 0 : mf__tf_count(r, "merges", 0x7FFFFFFF);
    if (n > (r->end - r->p) / 6) { mf__tf_fail(r, "more merges than the rest of the file can hold (a merge line has at least 6 bytes)"); return; }
    if (n > 0 && !(t->merges = (int32_t (*)[3])MF_MALLOC((size_t)n * sizeof *t->merges))) { mf__tok_fail(t, "mf_tokenizer_load: out of memory"); return; }
    for (k = 0; k < n && !t->error[0]; k++) {
        int64_t v[3];
        int i;
        if (!mf__tf_next(r)) { mf__tf_fail(r, "the file ends inside the merges block"); break; }
        if (r->nf != 3) { mf__tf_fail(r, "expected a merge \"left right result\" (three ids)"); break; }
        for (i = 0; i < 3; i++) if ((v[i] = mf__tf_int(r->f[i], 0, n_vocab - 1)) < 0) break;
        if (i < 3) { mf__tf_fail(r, "an id of the merge is not a number below vocab_size"); break; }
        if (d->len[v[0]] < 0 || d->len[v[1]] < 0) { mf__tf_fail(r, "the merge uses an id that no byte, extra or earlier merge defines"); break; }
        if (d->len[v[2]] >= 0) {   /* already defined: its bytes must be left + right */
            int64_t la = d->len[v[0]];
            if (d->len[v[2]] != la + d->len[v[1]] || memcmp(d->bytes + d->off[v[2]], d->bytes + d->off[v[0]], (size_t)la) != 0 ||
                memcmp(d->bytes + d->off[v[2]] + la, d->bytes + d->off[v[1]], (size_t)d->len[v[1]]) != 0) { mf__tf_fail(r, "the merge's result is not the left token's bytes followed by the right token's"); break; }
        } else if (d->len[v[0]] + d->len[v[1]] > MF__TOKEN_MAX_BYTES) { mf__tf_fail(r, "the merge makes a token longer than 1 MiB"); break; }
        else if (mf__tdefs_add(d, (int32_t)v[2], d->bytes + d->off[v[0]], d->len[v[0]], d->bytes + d->off[v[1]], d->len[v[1]])) { mf__tok_fail(t, "mf_tokenizer_load: out of memory"); break; }
        for (i = 0; i < 3; i++) t->merges[k][i] = (int32_t)v[i];
        t->n_merges = (int)(k + 1);
    }
}
/* the vocabulary read into t: tokens in id order, and what each kind requires of it */
static void mf__tf_finish(mf__tfile *r, mf__tdefs *d, int n_vocab, mf_tokenizer_kind kind) {
    mf_tokenizer *t = r->t;
    int64_t i, total = 0;
    int b, n_bytes = 0;
    for (i = 0; i < n_vocab; i++) {
        if (d->len[i] < 0) { mf__tok_fail(t, "mf_tokenizer_load: \"%s\": id %lld is not defined (vocab_size is %d); the file is corrupt or not written by mf_tokenizer_save (make it again)", r->path, (long long)i, n_vocab); return; }
        total += d->len[i];
    }
    for (b = 0; b < 256; b++) n_bytes += t->byte_id[b] >= 0;
    if (kind == MF_TOK_BPE && n_bytes != 256) { mf__tok_fail(t, "mf_tokenizer_load: \"%s\": a BPE vocabulary lists all 256 bytes, this one %d; the file is corrupt (make it again)", r->path, n_bytes); return; }
    if (kind != MF_TOK_BPE) {
        int k = 0;
        if (t->n_merges || n_vocab != n_bytes || (kind == MF_TOK_BYTES && n_bytes != 256)) { mf__tok_fail(t, "mf_tokenizer_load: \"%s\": a %s vocabulary has only single bytes (%s), this one %d tokens, %d bytes, %d merges; the file is corrupt (make it again)", r->path, mf__tok_kind_name(kind), kind == MF_TOK_BYTES ? "all 256" : "at least one", n_vocab, n_bytes, t->n_merges); return; }
        for (b = 0; b < 256; b++) if (t->byte_id[b] >= 0 && t->byte_id[b] != k++) { mf__tok_fail(t, "mf_tokenizer_load: \"%s\": the ids of a %s vocabulary follow the byte values (0, 1, ...), byte 0x%02x has %d; the file is corrupt (make it again)", r->path, mf__tok_kind_name(kind), b, (int)t->byte_id[b]); return; }
    }
    t->tok_off = (int64_t *)MF_MALLOC((size_t)(n_vocab + 1) * sizeof *t->tok_off);
    t->blob = (unsigned char *)MF_MALLOC(total ? (size_t)total : 1);
    if (!t->tok_off || !t->blob) { mf__tok_fail(t, "mf_tokenizer_load: out of memory for %d tokens", n_vocab); return; }
    t->tok_off[0] = 0;
    for (i = 0; i < n_vocab; i++) {
        memcpy(t->blob + t->tok_off[i], d->bytes + d->off[i], (size_t)d->len[i]);
        t->tok_off[i + 1] = t->tok_off[i] + d->len[i];
    }
    t->n_vocab = n_vocab;
}

MFDEF mf_tokenizer *mf_tokenizer_load(const char *path) {
    mf_tokenizer *t = mf__tok_new(MF_TOK_BYTES);
    mf__tfile r;
    mf__tdefs d;
    const char *why;
    size_t size = 0;
    char *text;
    int64_t i, n_vocab = 0;
    mf_tokenizer_kind kind = MF_TOK_BYTES;
    if (!t) return NULL;
    if (!(text = (char *)mf__read_file(path, &size, &why))) return mf__tok_fail(t, "mf_tokenizer_load: \"%s\": %s", path ? path : "(null)", why);
    memset(&r, 0, sizeof r);
    memset(&d, 0, sizeof d);
    r.t = t; r.path = path; r.p = text; r.end = text + size;
    if (!mf__tf_next(&r) || r.nf != 2 || strcmp(r.f[0], "metaformer-tokenizer") != 0)
        mf__tok_fail(t, "mf_tokenizer_load: \"%s\" is not a tokenizer file (its first line is not \"metaformer-tokenizer 1\"); make one with mf_tokenizer_save or `tokenize` (docs/math.md §17.5)", path);
    else if (strcmp(r.f[1], "1") != 0)
        mf__tok_fail(t, "mf_tokenizer_load: \"%s\" is a tokenizer file of version %.20s; this library reads version 1 (update the library or make the file again)", path, r.f[1]);
    else if (!mf__tf_next(&r) || r.nf != 2 || strcmp(r.f[0], "kind") != 0 || (strcmp(r.f[1], "bytes") && strcmp(r.f[1], "chars") && strcmp(r.f[1], "bpe")))
        mf__tf_fail(&r, "expected \"kind bytes\", \"kind chars\" or \"kind bpe\"");
    else {
        kind = strcmp(r.f[1], "bpe") == 0 ? MF_TOK_BPE : strcmp(r.f[1], "chars") == 0 ? MF_TOK_CHARS : MF_TOK_BYTES;
        t->kind = kind;
        /* every id takes a line of the file: a larger vocab_size is corrupt (and not allocated) */
        n_vocab = mf__tf_count(&r, "vocab_size", (int64_t)size < 0x7FFFFFFF ? (int64_t)size : 0x7FFFFFFF);
        if (n_vocab == 0) mf__tf_fail(&r, "vocab_size is 0");
    }
    if (!t->error[0]) {
        d.off = (int64_t *)MF_MALLOC((size_t)n_vocab * sizeof *d.off);
        d.len = (int64_t *)MF_MALLOC((size_t)n_vocab * sizeof *d.len);
        if (!d.off || !d.len) mf__tok_fail(t, "mf_tokenizer_load: out of memory");
        else for (i = 0; i < n_vocab; i++) d.len[i] = -1;
    }
    if (!t->error[0]) mf__tf_bytes(&r, &d, (int)n_vocab);
    if (!t->error[0]) mf__tf_extras(&r, &d, (int)n_vocab);
    if (!t->error[0]) mf__tf_merges(&r, &d, (int)n_vocab);
    if (!t->error[0] && (!mf__tf_next(&r) || r.nf != 1 || strcmp(r.f[0], "end") != 0)) mf__tf_fail(&r, "expected \"end\" after the merges (the file is cut short or has extra lines)");
    if (!t->error[0] && r.p < r.end) { r.line++; mf__tf_fail(&r, "text after \"end\""); }
    if (!t->error[0]) mf__tf_finish(&r, &d, (int)n_vocab, kind);
    MF_FREE(text); MF_FREE(d.off); MF_FREE(d.len); MF_FREE(d.bytes);
    return kind == MF_TOK_BPE ? mf__bpe_prepare(t) : t;
}

/* ==== [mf:data] ============================================================================= */
/* token shards and the loaders (docs/math.md §12, §17.6) */
#if !defined(METAFORMER_NO_MMAP) && (defined(__unix__) || defined(__APPLE__))
/* sys/mman.h, sys/stat.h, fcntl.h and unistd.h declare these names under any feature-test
   macros (strict -std=c99 hides fileno, which is not used) */
#include <sys/types.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
#define MF__MMAP 1
#else
#define MF__MMAP 0
#endif

#define MF__LLMC_MAGIC 20240520
#define MF__LLMC_MAGIC_U32 20240801 /* llm.c's LLaMA-3 shards: uint32 tokens */
#define MF__LLMC_HEADER 1024        /* 256 int32 */
#define MF__DATA_ERR 512

static uint32_t mf__le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void mf__put_le32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}

MFDEF int mf_shard_write(const char *path, mf_shard_format format, const int32_t *ids, int64_t n, char *err,
                         size_t err_size) {
    unsigned char header[MF__LLMC_HEADER], buf[8192];
    char why[1024];
    mf__afile w;
    int64_t i, k;
    if (err && err_size) err[0] = '\0';
    if (!path || (n > 0 && !ids) || n < 0)
        return mf__data_fail(err, err_size, "mf_shard_write: %s", !path ? "path is NULL" : n < 0 ? "n is negative" : "ids is NULL");
    if (format != MF_SHARD_LLMC && format != MF_SHARD_RAW16)
        return mf__data_fail(err, err_size, "mf_shard_write: format %d is not MF_SHARD_LLMC or MF_SHARD_RAW16 (a written shard needs its format named)", (int)format);
    if (format == MF_SHARD_LLMC && n > INT32_MAX)
        return mf__data_fail(err, err_size, "mf_shard_write: %lld tokens do not fit an llm.c header (an int32 count, at most %d); split them into several shards", (long long)n, INT32_MAX);
    for (i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] > 65535)
            return mf__data_fail(err, err_size, "mf_shard_write: id %ld at position %lld is outside 0..65535: uint16 shard formats hold at most 65,536 ids (use a smaller vocabulary)", (long)ids[i], (long long)i);
    if (mf__afile_open(&w, path, "mf_shard_write", why, sizeof why) < 0) return mf__data_fail(err, err_size, "%s", why);
    if (format == MF_SHARD_LLMC) {
        memset(header, 0, sizeof header);
        mf__put_le32(header, MF__LLMC_MAGIC);
        mf__put_le32(header + 4, 1);
        mf__put_le32(header + 8, (uint32_t)n);
        mf__afile_put(&w, header, sizeof header);
    }
    for (i = 0; !w.err && i < n; i += k) {
        k = n - i < (int64_t)(sizeof buf / 2) ? n - i : (int64_t)(sizeof buf / 2);
        for (int64_t j = 0; j < k; j++) { buf[2 * j] = (unsigned char)ids[i + j]; buf[2 * j + 1] = (unsigned char)(ids[i + j] >> 8); }
        mf__afile_put(&w, buf, 2 * (size_t)k);
    }
    return mf__afile_commit(&w, why, sizeof why) < 0 ? mf__data_fail(err, err_size, "%s", why) : 0;
}

/* ---- the token stream ---------------------------------------------------------------------- */
typedef struct mf__shard {
    char *path;
    int64_t first, count;           /* its tokens are [first, first + count) of the stream */
    int64_t offset;                 /* bytes before the first token (the llm.c header) */
    const unsigned char *map;       /* mmap: the whole file; NULL with the stdio fallback */
    size_t map_len;
    FILE *f;                        /* the stdio fallback */
} mf__shard;

struct mf_tokens {
    mf__shard *shards;
    int n_shards;
    int64_t count;
    const int32_t *ids;             /* a stream over an array: no shards */
    int vocab;                      /* 0: ids are not checked */
    char error[MF__DATA_ERR];
};

static mf_tokens *mf__tokens_fail(mf_tokens *s, const char *fmt, ...) {
    va_list ap;
    if (!s || s->error[0]) return s; /* keep the first error */
    va_start(ap, fmt);
    vsnprintf(s->error, sizeof s->error, fmt, ap);
    va_end(ap);
    return s;
}
static mf_tokens *mf__tokens_new(void) {
    mf_tokens *s = (mf_tokens *)MF_MALLOC(sizeof *s);
    if (s) memset(s, 0, sizeof *s);
    return s;
}

/* the file's size and its first bytes (up to head_cap), and the shard open for reading */
static int mf__shard_map(mf_tokens *s, mf__shard *sh, int64_t *size, unsigned char *head, size_t head_cap) {
#if MF__MMAP
    struct stat st;
    int fd = open(sh->path, O_RDONLY);
    if (fd < 0) return (mf__tokens_fail(s, "cannot open the shard \"%s\" (does it exist? is it readable?)", sh->path), -1);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return (mf__tokens_fail(s, "\"%s\" is not a regular file; give token shard files", sh->path), -1);
    }
    *size = (int64_t)st.st_size;
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) { close(fd); return (mf__tokens_fail(s, "cannot memory-map \"%s\" (%lld bytes)", sh->path, (long long)*size), -1); }
        sh->map = (const unsigned char *)m;
        sh->map_len = (size_t)st.st_size;
        memcpy(head, sh->map, (size_t)*size < head_cap ? (size_t)*size : head_cap);
    }
    close(fd); /* the mapping stays valid */
    return 0;
#else
    long end;
    if (!(sh->f = fopen(sh->path, "rb"))) return (mf__tokens_fail(s, "cannot open the shard \"%s\" (does it exist? is it readable?)", sh->path), -1);
    if (fseek(sh->f, 0, SEEK_END) != 0 || (end = ftell(sh->f)) < 0 || fseek(sh->f, 0, SEEK_SET) != 0)
        return (mf__tokens_fail(s, "cannot find the size of \"%s\" (is it a regular file?)", sh->path), -1);
    *size = (int64_t)end;
    if (fread(head, 1, (size_t)end < head_cap ? (size_t)end : head_cap, sh->f) != ((size_t)end < head_cap ? (size_t)end : head_cap))
        return (mf__tokens_fail(s, "cannot read \"%s\"", sh->path), -1);
    return 0;
#endif
}

/* does the beginning of the file look like text (every byte printable or whitespace)? */
static int mf__looks_like_text(const unsigned char *p, size_t n) {
    size_t i;
    if (n < 64) return 0;
    for (i = 0; i < n; i++)
        if (!((p[i] >= 0x20 && p[i] < 0x7f) || p[i] == '\n' || p[i] == '\r' || p[i] == '\t')) return 0;
    return 1;
}

/* open one file: detect or check its format, find its tokens */
static int mf__shard_open(mf_tokens *s, mf__shard *sh, mf_shard_format format) {
    unsigned char head[256];
    int64_t size = 0;
    uint32_t magic;
    if (mf__shard_map(s, sh, &size, head, sizeof head) < 0) return -1;
    if (size == 0) return (mf__tokens_fail(s, "the shard \"%s\" is empty (0 bytes); a shard holds at least one token", sh->path), -1);
    magic = size >= 4 ? mf__le32(head) : 0;
    if (format == MF_SHARD_AUTO && magic == MF__LLMC_MAGIC_U32)
        return (mf__tokens_fail(s, "\"%s\" is an llm.c shard of uint32 tokens (magic %d, LLaMA-3); only uint16 tokens (magic %d) are read", sh->path, MF__LLMC_MAGIC_U32, MF__LLMC_MAGIC), -1);
    if (format == MF_SHARD_LLMC || (format == MF_SHARD_AUTO && magic == MF__LLMC_MAGIC)) {
        uint32_t version, count;
        int64_t want;
        if (size < MF__LLMC_HEADER)
            return (mf__tokens_fail(s, "\"%s\" has %lld bytes, less than llm.c's %d-byte header (truncated, or not an llm.c shard?)", sh->path, (long long)size, MF__LLMC_HEADER), -1);
        if (magic != MF__LLMC_MAGIC)
            return (mf__tokens_fail(s, "\"%s\" is not an llm.c shard: its magic is %lu, llm.c's is %d (a raw uint16 file needs the raw16 format)", sh->path, (unsigned long)magic, MF__LLMC_MAGIC), -1);
        version = mf__le32(head + 4);
        count = mf__le32(head + 8);
        if (version != 1)
            return (mf__tokens_fail(s, "\"%s\": llm.c shard version %lu; only version 1 (uint16 tokens) is read", sh->path, (unsigned long)version), -1);
        want = MF__LLMC_HEADER + 2 * (int64_t)count;
        if (size != want)
            return (mf__tokens_fail(s, "\"%s\": its llm.c header says %lu tokens, so the file should have %lld bytes, but it has %lld (truncated?)", sh->path, (unsigned long)count, (long long)want, (long long)size), -1);
        if (count == 0) return (mf__tokens_fail(s, "the llm.c shard \"%s\" holds 0 tokens; a shard holds at least one token", sh->path), -1);
        sh->offset = MF__LLMC_HEADER;
        sh->count = (int64_t)count;
        return 0;
    }
    if (format == MF_SHARD_AUTO && (size >= 9 && head[8] == '{' && mf__le32(head + 4) == 0))
        return (mf__tokens_fail(s, "\"%s\" looks like a safetensors checkpoint, not a token shard", sh->path), -1);
    if (format == MF_SHARD_AUTO && mf__looks_like_text(head, size < (int64_t)sizeof head ? (size_t)size : sizeof head))
        return (mf__tokens_fail(s, "\"%s\" looks like text, not a token shard: tokenize it first (build/tokenize), or force the raw16 format if it really is uint16 tokens", sh->path), -1);
    if (size % 2)
        return (mf__tokens_fail(s, "\"%s\" has an odd size (%lld bytes): raw shards are uint16 tokens, 2 bytes each (truncated, or not a token shard?)", sh->path, (long long)size), -1);
    sh->offset = 0;
    sh->count = size / 2;
    return 0;
}

MFDEF mf_tokens *mf_tokens_open(const char *const *paths, int n_paths, mf_shard_format format) {
    mf_tokens *s = mf__tokens_new();
    int i;
    if (!s) return NULL;
    if (!paths || n_paths < 1) return mf__tokens_fail(s, "mf_tokens_open: no shard files given (paths %s, n_paths %d)", paths ? "set" : "NULL", n_paths);
    if (format != MF_SHARD_AUTO && format != MF_SHARD_LLMC && format != MF_SHARD_RAW16)
        return mf__tokens_fail(s, "mf_tokens_open: unknown format %d (MF_SHARD_AUTO, MF_SHARD_LLMC or MF_SHARD_RAW16)", (int)format);
    if (!(s->shards = (mf__shard *)MF_MALLOC((size_t)n_paths * sizeof *s->shards))) return mf__tokens_fail(s, "out of memory opening %d shards", n_paths);
    memset(s->shards, 0, (size_t)n_paths * sizeof *s->shards);
    for (i = 0; i < n_paths; i++) {
        mf__shard *sh = &s->shards[i];
        size_t len;
        if (!paths[i]) return mf__tokens_fail(s, "mf_tokens_open: paths[%d] is NULL", i);
        len = strlen(paths[i]);
        s->n_shards++;
        if (!(sh->path = (char *)MF_MALLOC(len + 1))) return mf__tokens_fail(s, "out of memory");
        memcpy(sh->path, paths[i], len + 1);
        if (mf__shard_open(s, sh, format) < 0) return s;
        sh->first = s->count;
        s->count += sh->count;
    }
    return s;
}

MFDEF mf_tokens *mf_tokens_from_ids(const int32_t *ids, int64_t n) {
    mf_tokens *s = mf__tokens_new();
    if (!s) return NULL;
    if (n < 0 || (n > 0 && !ids)) return mf__tokens_fail(s, "mf_tokens_from_ids: %s", n < 0 ? "n is negative" : "ids is NULL");
    s->ids = ids;
    s->count = n;
    return s;
}

MFDEF const char *mf_tokens_error(const mf_tokens *s) {
    if (!s) return "the token stream is NULL (out of memory when it was made?)";
    return s->error[0] ? s->error : NULL;
}
MFDEF int64_t mf_tokens_count(const mf_tokens *s) { return mf_tokens_error(s) ? -1 : s->count; }
MFDEF int mf_tokens_files(const mf_tokens *s) { return s ? s->n_shards : 0; }
MFDEF void mf_tokens_set_vocab(mf_tokens *s, int vocab) { if (s) s->vocab = vocab > 0 ? vocab : 0; }

/* the shard holding token pos: binary search over the first token of each */
static int mf__shard_at(const mf_tokens *s, int64_t pos) {
    int lo = 0, hi = s->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->shards[mid].first <= pos) lo = mid; else hi = mid - 1;
    }
    return lo;
}

/* n tokens of one shard from its token i into out */
static int mf__shard_read(mf_tokens *s, mf__shard *sh, int64_t i, int64_t n, int32_t *out) {
    const unsigned char *p;
    int64_t k;
#if !MF__MMAP
    unsigned char buf[4096];
    int64_t done = 0;
    if (fseek(sh->f, (long)(sh->offset + 2 * i), SEEK_SET) != 0)
        return (mf__tokens_fail(s, "cannot seek in \"%s\" (over 2 GB without mmap?)", sh->path), -1);
    while (done < n) {
        int64_t m = n - done < (int64_t)sizeof buf / 2 ? n - done : (int64_t)sizeof buf / 2;
        if (fread(buf, 2, (size_t)m, sh->f) != (size_t)m) return (mf__tokens_fail(s, "cannot read \"%s\" (did it change?)", sh->path), -1);
        for (k = 0; k < m; k++) out[done + k] = (int32_t)(buf[2 * k] | buf[2 * k + 1] << 8);
        done += m;
    }
    p = NULL; (void)p;
#else
    (void)s; /* a mapped file cannot fail to read */
    p = sh->map + sh->offset + 2 * i;
    for (k = 0; k < n; k++) out[k] = (int32_t)(p[2 * k] | p[2 * k + 1] << 8);
#endif
    return 0;
}

static int mf__tokens_check_vocab(mf_tokens *s, int64_t start, int64_t n, const int32_t *out) {
    int64_t k;
    for (k = 0; k < n; k++)
        if (out[k] < 0 || out[k] >= s->vocab) {
            int64_t pos = start + k;
            if (s->n_shards) {
                const mf__shard *sh = &s->shards[mf__shard_at(s, pos)];
                return (mf__tokens_fail(s, "token id %ld at position %lld of the stream (token %lld of \"%s\") is outside the vocabulary of %d ids: the data was made with another tokenizer", (long)out[k], (long long)pos, (long long)(pos - sh->first), sh->path, s->vocab), -1);
            }
            return (mf__tokens_fail(s, "token id %ld at position %lld is outside the vocabulary of %d ids", (long)out[k], (long long)pos, s->vocab), -1);
        }
    return 0;
}

MFDEF int mf_tokens_read(mf_tokens *s, int64_t start, int64_t n, int32_t *out) {
    int64_t done = 0;
    if (mf_tokens_error(s)) return -1;
    if (n < 0 || start < 0 || start > s->count - n || (n > 0 && !out))
        return (mf__tokens_fail(s, "mf_tokens_read: tokens [%lld, %lld) are outside the stream of %lld tokens%s", (long long)start, (long long)(start + n), (long long)s->count, n > 0 && !out ? " (or out is NULL)" : ""), -1);
    if (!s->n_shards) memcpy(out, s->ids + start, (size_t)n * sizeof *out);
    while (s->n_shards && done < n) {
        int i = mf__shard_at(s, start + done);
        mf__shard *sh = &s->shards[i];
        int64_t at = start + done - sh->first, m = sh->count - at < n - done ? sh->count - at : n - done;
        if (mf__shard_read(s, sh, at, m, out + done) < 0) return -1;
        done += m;
    }
    return s->vocab ? mf__tokens_check_vocab(s, start, n, out) : 0;
}

MFDEF void mf_tokens_close(mf_tokens *s) {
    int i;
    if (!s) return;
    for (i = 0; i < s->n_shards; i++) {
#if MF__MMAP
        if (s->shards[i].map) munmap((void *)s->shards[i].map, s->shards[i].map_len);
#endif
        if (s->shards[i].f) fclose(s->shards[i].f);
        MF_FREE(s->shards[i].path);
    }
    MF_FREE(s->shards);
    MF_FREE(s);
}

/* ---- the loaders (docs/math.md §12) --------------------------------------------------------- */
/* splitmix64: the same numbers as examples/common.h's next_random, so a loader state written by
   the examples replays the same batches */
static uint64_t mf__loader_random(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    return mf__mix64(z);
}
static int64_t mf__loader_below(uint64_t *s, int64_t n) { return (int64_t)(mf__loader_random(s) % (uint64_t)n); }

static int mf__loader_fail(mf_loader *L, const char *fmt, ...) {
    va_list ap;
    if (L->error[0]) return -1;
    va_start(ap, fmt);
    vsnprintf(L->error, sizeof L->error, fmt, ap);
    va_end(ap);
    return -1;
}

/* rows of a global batch: every rank's batch (docs/math.md §18.1) */
static int64_t mf__loader_global(const mf_loader *L) { return (int64_t)L->cfg.batch * (L->cfg.world > 1 ? L->cfg.world : 1); }

MFDEF int mf_loader_init(mf_loader *L, mf_tokens *tokens, const mf_loader_config *cfg) {
    int64_t total;
    if (!L) return -1;
    memset(L, 0, sizeof *L);
    if (!cfg) return mf__loader_fail(L, "mf_loader_init: cfg is NULL");
    L->cfg = *cfg;
    L->tokens = tokens;
    if (mf_tokens_error(tokens)) return mf__loader_fail(L, "mf_loader_init: %s", mf_tokens_error(tokens));
    if (cfg->batch < 1 || cfg->seq_len < 1) return mf__loader_fail(L, "mf_loader_init: batch %d and seq_len %d must be >= 1", cfg->batch, cfg->seq_len);
    if (cfg->world < 0 || cfg->rank < 0 || cfg->rank >= (cfg->world ? cfg->world : 1))
        return mf__loader_fail(L, "mf_loader_init: rank %d of world %d: the rank must be in 0 .. world - 1 (world 0 means 1)", cfg->rank, cfg->world);
    if (cfg->world == 0) L->cfg.world = 1;
    if ((int64_t)cfg->batch * L->cfg.world > INT32_MAX)
        return mf__loader_fail(L, "mf_loader_init: batch %d times world %d is too large", cfg->batch, L->cfg.world);
    total = mf_tokens_count(tokens);
    if (cfg->start < 0 || cfg->count < 0 || cfg->start > total || cfg->count > total - cfg->start)
        return mf__loader_fail(L, "mf_loader_init: the range [%lld, +%lld) is outside the stream of %lld tokens", (long long)cfg->start, (long long)cfg->count, (long long)total);
    if (cfg->count == 0) L->cfg.count = total - cfg->start;
    L->windows = (L->cfg.count - 1) / cfg->seq_len;
    L->column = L->cfg.count / mf__loader_global(L);
    L->state.rng = 0x5eed0000ULL ^ cfg->seed * 0x9e3779b97f4a7c15ULL;
    L->state.epoch_rng = 0;
    L->state.epoch_pos = L->windows;   /* the first batch starts an epoch */
    L->state.seq_pos = L->column - 1;  /* the first batch starts a pass */
    if (cfg->sequential && L->column < 2)
        return mf__loader_fail(L, "batch %d x world %d cuts %lld tokens into columns of fewer than 2 tokens; the sequential loader needs a smaller batch or more data", cfg->batch, L->cfg.world, (long long)L->cfg.count);
    if (!cfg->sequential && L->windows < 1)
        return mf__loader_fail(L, "%lld tokens hold no window of seq_len + 1 = %d tokens; use more data or a smaller seq_len", (long long)L->cfg.count, cfg->seq_len + 1);
    if (!(L->row = (int32_t *)MF_MALLOC((size_t)(cfg->seq_len + 1) * sizeof *L->row))) return mf__loader_fail(L, "out of memory");
    if (!cfg->sequential && !(L->perm = (int64_t *)MF_MALLOC((size_t)L->windows * sizeof *L->perm)))
        return mf__loader_fail(L, "out of memory for the order of %lld windows", (long long)L->windows);
    return 0;
}

static void mf__loader_new_epoch(mf_loader *L) {
    int64_t i;
    L->state.epoch_rng = L->state.rng;
    for (i = 0; i < L->windows; i++) L->perm[i] = i;
    for (i = L->windows - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = mf__loader_below(&L->state.rng, i + 1), t = L->perm[i];
        L->perm[i] = L->perm[j]; L->perm[j] = t;
    }
    L->state.epoch_pos = 0;
}

/* ids [at, at + n + 1) of the range: row n of inputs into x, the targets (shifted by one) into y */
static int mf__loader_row(mf_loader *L, int64_t at, int n, int32_t *x, int32_t *y) {
    if (mf_tokens_read(L->tokens, L->cfg.start + at, n + 1, L->row) < 0) return mf__loader_fail(L, "%s", mf_tokens_error(L->tokens));
    memcpy(x, L->row, (size_t)n * sizeof *x);
    memcpy(y, L->row + 1, (size_t)n * sizeof *y);
    return 0;
}

MFDEF int mf_loader_next(mf_loader *L, int32_t *x, int32_t *y, int *rows, int *Tb) {
    int b, T, fresh;
    int64_t g, first;
    if (!L || L->error[0] || (!L->perm && !L->cfg.sequential)) return L ? mf__loader_fail(L, "mf_loader_next: the loader was not initialised") : -1;
    if (!x || !y || !rows || !Tb) return mf__loader_fail(L, "mf_loader_next: x, y, rows and Tb must not be NULL");
    T = L->cfg.seq_len;
    first = (int64_t)L->cfg.rank * L->cfg.batch;
    if (L->cfg.sequential) {
        int64_t n = L->column;
        fresh = L->state.seq_pos >= n - 1;
        if (fresh) L->state.seq_pos = 0;
        *Tb = (int)(n - 1 - L->state.seq_pos < T ? n - 1 - L->state.seq_pos : T);
        *rows = L->cfg.batch;
        for (b = 0; b < L->cfg.batch; b++) /* this rank's columns: rank * batch + b of the global batch */
            if (mf__loader_row(L, (first + b) * n + L->state.seq_pos, *Tb, x + b * *Tb, y + b * *Tb) < 0) return -1;
        L->state.seq_pos += *Tb;
        return fresh;
    }
    fresh = L->state.epoch_pos >= L->windows;
    if (fresh) mf__loader_new_epoch(L);
    /* every rank draws the offsets of the whole global batch (the state stays the same on all ranks)
       and reads its own rows [first, first + batch) of it */
    for (g = 0, b = 0; g < mf__loader_global(L) && L->state.epoch_pos < L->windows; g++) {
        int64_t start = L->perm[L->state.epoch_pos++] * T, room = L->cfg.count - (start + T + 1);
        start += mf__loader_below(&L->state.rng, (room < T - 1 ? room : T - 1) + 1);
        if (g < first || g >= first + L->cfg.batch) continue;
        if (mf__loader_row(L, start, T, x + b * T, y + b * T) < 0) return -1;
        b++;
    }
    *rows = b;
    *Tb = T;
    return fresh;
}

MFDEF int64_t mf_loader_batches(const mf_loader *L) {
    if (!L || L->cfg.seq_len < 1 || L->cfg.batch < 1) return 0;
    if (L->cfg.sequential) return (L->column - 1 + L->cfg.seq_len - 1) / L->cfg.seq_len;
    return (L->windows + mf__loader_global(L) - 1) / mf__loader_global(L);
}

/* replay the interrupted epoch's shuffle from its starting RNG, then continue the saved stream */
MFDEF void mf_loader_restore(mf_loader *L, const mf_loader_state *st) {
    if (!L || !st) return;
    if (L->perm && st->epoch_pos < L->windows) { L->state.rng = st->epoch_rng; mf__loader_new_epoch(L); }
    L->state.epoch_rng = st->epoch_rng;
    L->state.rng = st->rng;
    L->state.epoch_pos = st->epoch_pos >= 0 && st->epoch_pos < L->windows ? st->epoch_pos : L->windows;
    L->state.seq_pos = st->seq_pos >= 0 && st->seq_pos < L->column ? st->seq_pos : L->column - 1;
}

MFDEF void mf_loader_free(mf_loader *L) {
    if (!L) return;
    MF_FREE(L->perm);
    MF_FREE(L->row);
    L->perm = NULL;
    L->row = NULL;
}
#endif /* METAFORMER_NO_DATA */

/* ==== [mf:optim] ============================================================================ */
MFDEF mf_optimizer mf_optimizer_default(mf_optimizer_kind kind, float lr) {
    mf_optimizer o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.beta1 = 0.9f; o.beta2 = 0.999f; o.eps = 1e-8f;
    o.weight_decay = kind == MF_OPT_ADAMW ? 0.01f : 0.0f;
    o.schedule.kind = MF_SCHED_CONSTANT;
    o.schedule.lr = lr;
    return o;
}

MFDEF float mf_schedule_lr(const mf_schedule *s, int64_t t) {
    double lr, w;
    if (!s) return 0.0f;
    if (t < 1) t = 1;
    lr = s->lr; w = s->warmup > 0 ? s->warmup : 1;
    switch (s->kind) {
    case MF_SCHED_WARMUP:
        return (float)((double)t < w && s->warmup > 0 ? 1e-8 + (double)t * lr / w : lr);
    case MF_SCHED_NOAM: {
        double a = 1.0 / sqrt((double)t), b = (double)t * pow(w, -1.5);
        return (float)(lr / sqrt((double)(s->d_model > 0 ? s->d_model : 1)) * (a < b ? a : b));
    }
    case MF_SCHED_COSINE: {
        double span = (double)s->total_steps - w;
        if ((double)t < w && s->warmup > 0) return (float)(lr * (double)t / w);
        if (span <= 0 || (double)t >= (double)s->total_steps) return s->min_lr;
        return (float)(s->min_lr + 0.5 * (lr - s->min_lr) * (1.0 + cos(M_PI * ((double)t - w) / span)));
    }
    default:
        return (float)lr;
    }
}

MFDEF int64_t mf_optimizer_steps(const mf_ctx *ctx) { return ctx ? ctx->opt_t : 0; }

/* The trainable parameters are processed in chunks of MF__PCHUNK elements, chunk c by thread
   c % threads, in one parallel region: per-tensor loops would fork and join once per tensor, and
   the small tensors would stay serial. */
#define MF__PCHUNK 16384
static int mf__trainable(const mf_ctx *ctx, int i) { return ctx->params[i]->requires_grad; }

/* sum of x[i]^2 in double, in a fixed order: MF__SSQ_LANES running sums (x[i] in sum i mod
   MF__SSQ_LANES, a vector's worth of independent chains the compiler keeps in registers), then
   added pairwise. The squares are exact in double. */
#define MF__SSQ_LANES 32
static double mf__sumsq(const float *x, int64_t n) {
    double s[MF__SSQ_LANES];
    int64_t k = 0, full = n - n % MF__SSQ_LANES;
    int l, w;
    for (l = 0; l < MF__SSQ_LANES; l++) s[l] = 0;
    for (; k < full; k += MF__SSQ_LANES)
        for (l = 0; l < MF__SSQ_LANES; l++) s[l] += (double)x[k + l] * x[k + l];
    for (l = 0; k + l < n; l++) s[l] += (double)x[k + l] * x[k + l];
    for (w = MF__SSQ_LANES / 2; w >= 1; w /= 2)
        for (l = 0; l < w; l++) s[l] += s[l + w];
    return s[0];
}

/* CPU: the global L2 norm of the trainable gradients (chunks summed in order: the same norm for
   any thread count); -1 when out of memory (in ctx) */
static double mf__grad_norm(mf_ctx *ctx) {
    double ss = 0, *part;
    int64_t nch = 0, total = 0, c;
    int i;
    for (i = 0; i < ctx->n_params; i++)
        if (mf__trainable(ctx, i)) { nch += (ctx->params[i]->ne + MF__PCHUNK - 1) / MF__PCHUNK; total += ctx->params[i]->ne; }
    if (!(part = (double *)mf__alloc(ctx, (size_t)(nch + 1) * sizeof(double)))) return -1;
    MF__PARALLEL(ctx, 2.0 * (double)total)
    {
        int tid = MF__TID(), nth = MF__NTH(), j;
        int64_t ch = 0, lo;
        for (j = 0; j < ctx->n_params; j++) {
            const mf_tensor *p = ctx->params[j];
            if (!mf__trainable(ctx, j)) continue;
            for (lo = 0; lo < p->ne; lo += MF__PCHUNK, ch++)
                if (ch % nth == tid) part[ch] = mf__sumsq(p->grad + lo, (p->ne - lo < MF__PCHUNK ? p->ne : lo + MF__PCHUNK) - lo);
        }
    }
    for (c = 0; c < nch; c++) ss += part[c];
    return sqrt(ss);
}
/* the factor clipping applies to the gradients of norm `norm` (1: none) */
static float mf__clip_factor(float norm, float max_norm) {
    return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f;
}

static float mf__clip_grad_norm(mf_ctx *ctx, float max_norm) {
    double ss;
    int64_t total = 0;
    int i;
    float norm, f;
    if (!mf_ok(ctx)) return 0.0f;
    if (ctx->be) { /* one reduction over all the gradients; scaled on the device */
        ss = ctx->be->grad_sumsq(ctx, 0, ctx->p_used);
        if (ss < 0) return 0.0f;
        norm = (float)sqrt(ss);
        if (max_norm > 0 && norm > max_norm) ctx->be->grad_scale(ctx, 0, ctx->p_used, max_norm / (norm + 1e-6f));
        return norm;
    }
    if ((ss = mf__grad_norm(ctx)) < 0) return 0.0f;
    norm = (float)ss;
    if ((f = mf__clip_factor(norm, max_norm)) == 1.0f) return norm;
    for (i = 0; i < ctx->n_params; i++) if (mf__trainable(ctx, i)) total += ctx->params[i]->ne;
    MF__PARALLEL(ctx, (double)total)
    {
        int tid = MF__TID(), nth = MF__NTH(), j;
        int64_t ch = 0, lo;
        for (j = 0; j < ctx->n_params; j++) {
            mf_tensor *p = ctx->params[j];
            if (!mf__trainable(ctx, j)) continue;
            for (lo = 0; lo < p->ne; lo += MF__PCHUNK, ch++) {
                int64_t hi = p->ne - lo < MF__PCHUNK ? p->ne : lo + MF__PCHUNK, k;
                if (ch % nth != tid) continue;
                for (k = lo; k < hi; k++) p->grad[k] *= f;
            }
        }
    }
    return norm;
}

/* fn: the public function checking, named in the message */
static int mf__check_optimizer(mf_ctx *ctx, const mf_optimizer *o, const char *fn) {
    if (!o) return (mf__fail(ctx, "%s: the optimizer config is NULL (start from mf_optimizer_default)", fn), -1);
    if ((int)o->kind < MF_OPT_ADAM || (int)o->kind > MF_OPT_SGD)
        return (mf__fail(ctx, "%s: unknown optimizer kind %d (MF_OPT_ADAM, MF_OPT_ADAM_LABML, "
                         "MF_OPT_ADAMW or MF_OPT_SGD)", fn, (int)o->kind), -1);
    if ((int)o->schedule.kind < MF_SCHED_CONSTANT || (int)o->schedule.kind > MF_SCHED_COSINE)
        return (mf__fail(ctx, "%s: unknown schedule kind %d (MF_SCHED_CONSTANT, MF_SCHED_WARMUP, "
                         "MF_SCHED_NOAM or MF_SCHED_COSINE)", fn, (int)o->schedule.kind), -1);
    if (!(o->schedule.lr >= 0))
        return (mf__fail(ctx, "%s: lr %g is negative or NaN; it must be >= 0", fn, (double)o->schedule.lr), -1);
    if (!(o->weight_decay >= 0))
        return (mf__fail(ctx, "%s: weight_decay %g is negative or NaN; it must be >= 0", fn, (double)o->weight_decay), -1);
    if (o->kind != MF_OPT_SGD && !(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1))
        return (mf__fail(ctx, "%s: betas (%g, %g) must both be in [0, 1) (PyTorch: 0.9, 0.999)", fn,
                         (double)o->beta1, (double)o->beta2), -1);
    if (o->kind != MF_OPT_SGD && !(o->eps > 0))
        return (mf__fail(ctx, "%s: eps %g must be > 0 (PyTorch: 1e-8)", fn, (double)o->eps), -1);
    if (o->kind == MF_OPT_SGD && !(o->momentum >= 0))
        return (mf__fail(ctx, "%s: momentum %g is negative or NaN; it must be >= 0", fn, (double)o->momentum), -1);
    if (o->kind == MF_OPT_SGD && o->nesterov && !(o->momentum > 0))
        return (mf__fail(ctx, "%s: nesterov needs momentum > 0 (as in torch.optim.SGD)", fn), -1);
    if ((o->schedule.kind == MF_SCHED_WARMUP || o->schedule.kind == MF_SCHED_NOAM) && o->schedule.warmup <= 0)
        return (mf__fail(ctx, "%s: the %s schedule needs warmup > 0 steps, got %d", fn,
                         o->schedule.kind == MF_SCHED_NOAM ? "Noam" : "warm-up", o->schedule.warmup), -1);
    if (o->schedule.kind == MF_SCHED_NOAM && o->schedule.d_model <= 0)
        return (mf__fail(ctx, "%s: the Noam schedule needs d_model > 0, got %d", fn, o->schedule.d_model), -1);
    if (o->schedule.kind == MF_SCHED_COSINE && o->schedule.total_steps <= o->schedule.warmup)
        return (mf__fail(ctx, "%s: the cosine schedule needs total_steps (%d) > warmup (%d)", fn,
                         o->schedule.total_steps, o->schedule.warmup), -1);
    if (o->schedule.kind == MF_SCHED_COSINE && !(o->schedule.min_lr >= 0))
        return (mf__fail(ctx, "%s: the cosine schedule's min_lr %g must be >= 0", fn, (double)o->schedule.min_lr), -1);
    return 0;
}

/* A parameter no backward reached since the last mf_zero_grad and whose gradient is all zero
   has no gradient this step (torch: grad is None) and is skipped: no decay, no momentum. */
static int mf__no_gradient(const mf_ctx *ctx, int i) {
    const mf_tensor *p = ctx->params[i];
    int64_t k;
    if (ctx->p_touched[i]) return 0;
    for (k = 0; k < p->ne; k++) if (p->grad[k] != 0.0f) return 0;
    return 1;
}

/* the update of one parameter: its coefficients, computed before the parallel sweep */
typedef struct mf__opt_job {
    int param;       /* index; -1: no update this step */
    int first;       /* SGD: the first step sets the momentum buffer */
    float lr, step, rc2, decay;
} mf__opt_job;

/* elements [lo, hi) of parameter j->param (the moments hold the flat floats from ctx->mom_lo on)
   with the gradient times gs (the clipping factor, 1: none), leaving the
   gradient zero when zero is set (mf_train_update: each float read once, in the same pass) */
static void mf__opt_update(mf_ctx *ctx, const mf_optimizer *o, const mf__opt_job *j, int64_t lo, int64_t hi, float gs,
                           int zero) {
    const mf_tensor *p = ctx->params[j->param];
    float *w = p->data + lo, *g = p->grad + lo, *m = ctx->p_m + (p->offset + lo - ctx->mom_lo);
    float *v = ctx->p_v + (p->offset + lo - ctx->mom_lo);
    float b1 = o->beta1, b2 = o->beta2, wd = o->weight_decay, eps = o->eps, step = j->step, decay = j->decay;
    int64_t k = 0;
    hi -= lo;
    switch (o->kind) {
    case MF_OPT_ADAM:
    case MF_OPT_ADAMW:
    case MF_OPT_ADAM_LABML: {
        /* Adam / AdamW: w -= step * m / (sqrt(v) * rc2 + eps) (rc2 = 1 / sqrt(1 - b2^t)); labml:
           w -= step * m / (sqrt(v) + eps), eps before the correction (rc2 = 1); AdamW and labml
           decay w first, Adam adds wd * w to the gradient */
        const float gw = o->kind == MF_OPT_ADAM ? wd : 0.0f, rc2 = j->rc2;
        const mf__av vb1 = mf__av_set1(b1), vb2 = mf__av_set1(b2), va1 = mf__av_set1(1.0f - b1);
        const mf__av va2 = mf__av_set1(1.0f - b2), vgw = mf__av_set1(gw), vdec = mf__av_set1(decay);
        const mf__av vst = mf__av_set1(step), vrc = mf__av_set1(rc2), veps = mf__av_set1(eps), vgs = mf__av_set1(gs);
        for (; k + MF__AW <= hi; k += MF__AW) {
            mf__av wk = mf__av_load(w + k), gk = mf__av_load(g + k);
            if (gs != 1.0f) gk = mf__av_mul(gk, vgs);
            gk = mf__av_add(gk, mf__av_mul(vgw, wk));
            if (zero) mf__av_store(g + k, mf__av_zero());
            mf__av mk = mf__av_add(mf__av_mul(vb1, mf__av_load(m + k)), mf__av_mul(va1, gk));
            mf__av vk = mf__av_add(mf__av_mul(vb2, mf__av_load(v + k)), mf__av_mul(mf__av_mul(va2, gk), gk));
            wk = mf__av_mul(wk, vdec);
            mf__av_store(m + k, mk);
            mf__av_store(v + k, vk);
            mf__av_store(w + k, mf__av_sub(wk, mf__av_div(mf__av_mul(vst, mk),
                                                          mf__av_add(mf__av_mul(mf__av_sqrt(vk), vrc), veps))));
        }
        for (; k < hi; k++) {
            float gk = (gs != 1.0f ? g[k] * gs : g[k]) + gw * w[k];
            if (zero) g[k] = 0.0f;
            w[k] *= decay;
            m[k] = b1 * m[k] + (1.0f - b1) * gk;
            v[k] = b2 * v[k] + (1.0f - b2) * gk * gk;
            w[k] -= step * m[k] / (sqrtf(v[k]) * rc2 + eps);
        }
        break;
    }
    default: { /* SGD; m is the momentum buffer (torch: the first step sets buf = g) */
        float mu = o->momentum, lr = j->lr;
        for (; k < hi; k++) {
            float gk = (gs != 1.0f ? g[k] * gs : g[k]) + wd * w[k];
            if (zero) g[k] = 0.0f;
            if (mu > 0) {
                m[k] = j->first ? gk : mu * m[k] + gk;
                gk = o->nesterov ? gk + mu * m[k] : m[k];
            }
            w[k] -= lr * gk;
        }
        break;
    }
    }
}

/* The step's coefficients of every parameter (jobs[i].param -1: no update), counting the step;
   the elements of those with a gradient in *total. NULL on error. */
static mf__opt_job *mf__opt_jobs(mf_ctx *ctx, const mf_optimizer *o, int64_t *total_out) {
    int i;
    float b1, b2;
    int64_t total = 0;
    mf__opt_job *jobs;
    if (!(jobs = (mf__opt_job *)mf__alloc(ctx, (size_t)(ctx->n_params + 1) * sizeof(mf__opt_job)))) return NULL;
    ctx->opt_t++;
    b1 = o->beta1; b2 = o->beta2;
    for (i = 0; i < ctx->n_params; i++) {
        const mf_tensor *p = ctx->params[i];
        mf__opt_job *j = &jobs[i];
        int64_t t;
        float lr, c1, c2;
        j->param = -1;
        if (!p->requires_grad || mf__no_gradient(ctx, i)) continue;
        /* each parameter counts its own updates, like torch's per-parameter state["step"]: one
           created or unfrozen later starts its bias correction (and labml's schedule) at 1 */
        t = ++ctx->p_steps[i];
        lr = mf_schedule_lr(&o->schedule, o->kind == MF_OPT_ADAM_LABML ? t : ctx->opt_t);
        c1 = (float)(1.0 - pow(b1, (double)t));   /* bias corrections, in double: 1 - b2^t in */
        c2 = (float)(1.0 - pow(b2, (double)t));   /* float would lose 3-4 digits at small t */
        j->param = i; j->first = t == 1; j->lr = lr;
        if (o->kind == MF_OPT_ADAM_LABML) {
            j->step = lr * sqrtf(c2) / c1; j->rc2 = 1.0f; j->decay = 1.0f - o->schedule.lr * o->weight_decay;
        } else {
            j->step = lr / c1; j->rc2 = 1.0f / sqrtf(c2);
            j->decay = o->kind == MF_OPT_ADAMW ? 1.0f - lr * o->weight_decay : 1.0f;
        }
        total += p->ne;
    }
    *total_out = total;
    return jobs;
}

/* One update of every parameter that has a gradient, its gradient times gs; zero: every gradient
   is left zero (as mf_zero_grad), the updated ones in the same pass. The moments live in flat buffers. */
static int mf__optimizer_sweep(mf_ctx *ctx, const mf_optimizer *o, float gs, int zero) {
    int64_t total;
    mf__opt_job *jobs;
    if (!(jobs = mf__opt_jobs(ctx, o, &total))) return -1;
    MF__PARALLEL(ctx, 10.0 * (double)total)
    {
        int tid = MF__TID(), nth = MF__NTH(), k;
        int64_t ch = 0, lo;
        for (k = 0; k < ctx->n_params; k++) {
            const mf__opt_job *j = &jobs[k];
            int64_t n = ctx->params[k]->ne;
            if (j->param < 0 && !zero) continue;
            for (lo = 0; lo < n; lo += MF__PCHUNK, ch++) {
                int64_t hi = n - lo < MF__PCHUNK ? n : lo + MF__PCHUNK;
                if (ch % nth != tid) continue;
                if (j->param >= 0) mf__opt_update(ctx, o, j, lo, hi, gs, zero);
                else memset(ctx->params[k]->grad + lo, 0, (size_t)(hi - lo) * sizeof(float));
            }
        }
    }
    if (zero) memset(ctx->p_touched, 0, (size_t)ctx->n_params);
    return 0;
}
/* what mf_optimizer_step and mf_train_update check first: 0, or -1 (the error in ctx) */
static int mf__optimizer_ready(mf_ctx *ctx, const mf_optimizer *o, const char *fn) {
    if (!mf_ok(ctx)) return -1;
    if (mf__check_optimizer(ctx, o, fn) < 0) return -1;
    if (ctx->mom_n)
        return (mf__fail(ctx, "%s: the optimizer moments are sharded (ZeRO-1): step with mf_dist_optimizer_step", fn), -1);
    return mf__alloc_moments(ctx);
}
static int mf__optimizer_step(mf_ctx *ctx, const mf_optimizer *o) {
    if (mf__optimizer_ready(ctx, o, "mf_optimizer_step") < 0) return -1;
    if (ctx->be) return ctx->be->optimizer_step(ctx, o);
    return mf__optimizer_sweep(ctx, o, 1.0f, 0);
}
/* CPU: the norm in one pass over the gradients, then clipping, the update and the zeroing in a
   second; a CUDA context runs the three calls */
static float mf__train_update(mf_ctx *ctx, const mf_optimizer *o, float max_norm) {
    double norm;
    if (mf__optimizer_ready(ctx, o, "mf_train_update") < 0) return -1.0f;
    if (ctx->be) {
        float nf = mf__clip_grad_norm(ctx, max_norm);
        if (mf_ok(ctx) && isfinite(nf)) mf__optimizer_step(ctx, o);
        mf__zero_grad(ctx);
        return mf_ok(ctx) ? nf : -1.0f;
    }
    if ((norm = mf__grad_norm(ctx)) < 0) return -1.0f;
    if (!isfinite((float)norm)) { mf__zero_grad(ctx); return (float)norm; }
    if (mf__optimizer_sweep(ctx, o, mf__clip_factor((float)norm, max_norm), 1) < 0) return -1.0f;
    return (float)norm;
}
/* the public entry points of the above, timed while profiling (mf_set_profile) */
MFDEF float mf_clip_grad_norm(mf_ctx *ctx, float max_norm) {
    mf__prof_mark m;
    float norm;
    if (!ctx || !ctx->profile) return mf__clip_grad_norm(ctx, max_norm);
    m = mf__prof_begin(ctx);
    norm = mf__clip_grad_norm(ctx, max_norm);
    mf__prof_end(ctx, "clip_grad_norm", MF__PROF_OTHER, m);
    return norm;
}
MFDEF int mf_optimizer_step(mf_ctx *ctx, const mf_optimizer *o) {
    mf__prof_mark m;
    int r;
    if (!ctx || !ctx->profile) return mf__optimizer_step(ctx, o);
    m = mf__prof_begin(ctx);
    r = mf__optimizer_step(ctx, o);
    mf__prof_end(ctx, "optimizer_step", MF__PROF_OTHER, m);
    return r;
}
MFDEF float mf_train_update(mf_ctx *ctx, const mf_optimizer *o, float max_norm) {
    mf__prof_mark m;
    float norm;
    if (!ctx) return -1.0f;
    if (!ctx->profile) return mf__train_update(ctx, o, max_norm);
    m = mf__prof_begin(ctx);
    norm = mf__train_update(ctx, o, max_norm);
    mf__prof_end(ctx, "train_update", MF__PROF_OTHER, m);
    return norm;
}

#ifdef METAFORMER_MPI
/* ==== [mf:dist] ============================================================================= */
#include <limits.h>
/* Data-parallel training (docs/math.md §18.3-18.7). The transport is a table of functions, so MPI
   (host buffers) and NCCL (device buffers, its own stream) share the bucketing, the backward hook,
   ZeRO-1 and the checkpoints. Each returns 0, or -1 with the error in d. */
typedef struct mf__dist_transport {
    const char *name;                                                         /* "mpi", "nccl" */
    int (*allreduce_start)(mf_dist *d, mf_ctx *ctx, float *buf, int64_t n);   /* in-place average */
    int (*wait_all)(mf_dist *d, mf_ctx *ctx); /* every started reduction done, visible to the compute stream */
    int (*reduce_scatter)(mf_dist *d, mf_ctx *ctx, float *buf, int64_t shard); /* average; rank r's shard [r*shard, (r+1)*shard) */
    int (*all_gather)(mf_dist *d, mf_ctx *ctx, float *buf, int64_t shard);
    int (*broadcast)(mf_dist *d, mf_ctx *ctx, float *buf, int64_t n, int root);
} mf__dist_transport;

/* a bucket: the flat gradient floats [lo, hi), whole parameters; ready once the backward has passed
   tape op ready_at (INT_MAX: from the start, -1: only in mf_dist_sync) */
typedef struct mf__dist_bucket { int64_t lo, hi; int ready_at; } mf__dist_bucket;

struct mf_dist {
    MPI_Comm comm;               /* a duplicate of the caller's: our collectives never meet theirs */
    int rank, world, local_rank;
    mf_dist_config cfg;
    const mf__dist_transport *tr;
    void *nccl;              /* the NCCL transport's state ([cu:dist]); NULL: none */
    char err[MF__ERRLEN];
    mf_ctx *ctx;                 /* attached */
    mf__dist_bucket *bk;
    int n_bk;
    int next;                    /* the next bucket to start (they start from the last one down) */
    int planned;                 /* the buckets' ready_at are computed for this step's tape */
    int no_sync;
    int stray;                   /* a backward ran after this step's averages had started */
    int last_op;                 /* the tape op the hook saw last (a new backward starts higher) */
    int started_in_backward;     /* buckets the backward hook started in this step, and in the last one */
    int last_in_backward;
    int local_fail;              /* a reduction failed to start here (d->err): reported by mf_dist_sync */
    /* MPI: the reductions under way */
    MPI_Request *req;
    float **req_buf;
    int64_t *req_n;
    int n_req, cap_req;
    /* ZeRO-1: the flat buffer padded to npad = world * shard floats; rank r owns [r*shard, (r+1)*shard) */
    int64_t shard, npad;
    float *tmp;                  /* shard floats (the reduce-scatter's result) */
    int *first;                  /* per parameter: the first tape op that reads it (scratch) */
};

#ifdef METAFORMER_NCCL
/* The NCCL transport for contexts on the GPU, in metaformer_cuda.cuh's [cu:dist]: mf_dist_new picks the
   local rank's GPU (mf__nccl_pick_device), mf_dist_attach of a CUDA context opens the communicator
   (collective: the unique id made by rank 0 goes over d->comm) and sets d->tr to the NCCL transport,
   mf_dist_free closes it. 0, or -1 with the error in d->err (on every rank for mf__nccl_open). */
static int mf__nccl_pick_device(mf_dist *d);
static int mf__nccl_open(mf_dist *d, mf_ctx *ctx);
static void mf__nccl_close(mf_dist *d);
#endif
static int mf__dist_fail(mf_dist *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->err, sizeof d->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- the MPI transport (host buffers; MPI counts are int: long buffers go in pieces) ---- */
#define MF__MPI_PIECE ((int64_t)1 << 30)
static int mf__mpi_allreduce_start(mf_dist *d, mf_ctx *ctx, float *buf, int64_t n) {
    (void)ctx;
    for (; n > 0; buf += MF__MPI_PIECE, n -= MF__MPI_PIECE) {
        int64_t len = n < MF__MPI_PIECE ? n : MF__MPI_PIECE;
        if (d->n_req == d->cap_req) return mf__dist_fail(d, "mf_dist: more gradient reductions than buckets (an internal error)");
        if (MPI_Iallreduce(MPI_IN_PLACE, buf, (int)len, MPI_FLOAT, MPI_SUM, d->comm, &d->req[d->n_req]) != MPI_SUCCESS)
            return mf__dist_fail(d, "MPI_Iallreduce failed");
        d->req_buf[d->n_req] = buf; d->req_n[d->n_req] = len; d->n_req++;
    }
    return 0;
}
static void mf__dist_scale(float *x, int64_t n, float f) {
    int64_t k;
    for (k = 0; k < n; k++) x[k] *= f;
}
static int mf__mpi_wait_all(mf_dist *d, mf_ctx *ctx) {
    int i, rc = MPI_Waitall(d->n_req, d->req, MPI_STATUSES_IGNORE);
    (void)ctx;
    for (i = 0; i < d->n_req; i++) mf__dist_scale(d->req_buf[i], d->req_n[i], 1.0f / (float)d->world);
    d->n_req = 0;
    return rc == MPI_SUCCESS ? 0 : mf__dist_fail(d, "MPI_Waitall failed");
}
static int mf__mpi_reduce_scatter(mf_dist *d, mf_ctx *ctx, float *buf, int64_t shard) {
    (void)ctx;
    if (MPI_Reduce_scatter_block(buf, d->tmp, (int)shard, MPI_FLOAT, MPI_SUM, d->comm) != MPI_SUCCESS)
        return mf__dist_fail(d, "MPI_Reduce_scatter_block failed");
    memcpy(buf + d->rank * shard, d->tmp, (size_t)shard * sizeof(float));
    mf__dist_scale(buf + d->rank * shard, shard, 1.0f / (float)d->world);
    return 0;
}
static int mf__mpi_all_gather(mf_dist *d, mf_ctx *ctx, float *buf, int64_t shard) {
    (void)ctx;
    return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)shard, MPI_FLOAT, d->comm) == MPI_SUCCESS
           ? 0 : mf__dist_fail(d, "MPI_Allgather failed");
}
static int mf__mpi_broadcast(mf_dist *d, mf_ctx *ctx, float *buf, int64_t n, int root) {
    (void)ctx;
    for (; n > 0; buf += MF__MPI_PIECE, n -= MF__MPI_PIECE)
        if (MPI_Bcast(buf, (int)(n < MF__MPI_PIECE ? n : MF__MPI_PIECE), MPI_FLOAT, root, d->comm) != MPI_SUCCESS)
            return mf__dist_fail(d, "MPI_Bcast failed");
    return 0;
}
static const mf__dist_transport mf__dist_mpi = {
    "mpi", mf__mpi_allreduce_start, mf__mpi_wait_all, mf__mpi_reduce_scatter, mf__mpi_all_gather, mf__mpi_broadcast
};

/* ---- failure agreement: the first failed rank's reason reaches every rank ---- */
/* ok = 0 on a failed rank (why: its reason, or NULL for ctx's error). Returns 0 when every rank is
   ok; else -1 on every rank, "rank r: why" in d->err and (failing it) in ctx. */
static int mf__dist_agree(mf_dist *d, mf_ctx *ctx, int ok, const char *why) {
    int mine = ok ? d->world : d->rank, first = d->world;
    char msg[MF__ERRLEN];
    if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, d->comm) != MPI_SUCCESS)
        return mf__dist_fail(d, "MPI_Allreduce failed (the failure agreement)");
    if (first == d->world) return 0;
    memset(msg, 0, sizeof msg);
    if (d->rank == first)
        snprintf(msg, sizeof msg, "rank %d: %.490s", first, why ? why : ctx && !mf_ok(ctx) ? mf_error(ctx) : d->err[0] ? d->err : "failed");
    MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first, d->comm);
    snprintf(d->err, sizeof d->err, "%s", msg);
    if (ctx) { snprintf(ctx->err, sizeof ctx->err, "%s", msg); ctx->failed = 1; }
    return -1;
}
MFDEF int mf_dist_check(mf_dist *d, mf_ctx *ctx, int ok, const char *why) {
    if (!d) return (mf__fail(ctx, "mf_dist_check: the mf_dist is NULL (make it with mf_dist_new)"), -1);
    return mf__dist_agree(d, ctx, ok && (!ctx || mf_ok(ctx)), ok ? NULL : why);
}

MFDEF mf_dist_config mf_dist_config_default(void) {
    mf_dist_config c;
    memset(&c, 0, sizeof c);
    c.bucket_floats = (int64_t)1 << 20;
    return c;
}

static void mf__dist_new_fail(char *err, size_t size, const char *fmt, ...) {
    va_list ap;
    if (!err || !size) return;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
}
MFDEF mf_dist *mf_dist_new(MPI_Comm comm, const mf_dist_config *cfg, char *err, size_t err_size) {
    mf_dist *d;
    MPI_Comm local;
    int inited = 0;
    mf_dist_config c = cfg ? *cfg : mf_dist_config_default();
    if (MPI_Initialized(&inited) != MPI_SUCCESS || !inited)
        return (mf__dist_new_fail(err, err_size, "mf_dist_new: MPI is not initialised (call MPI_Init first)"), (mf_dist *)NULL);
    if (comm == MPI_COMM_NULL)
        return (mf__dist_new_fail(err, err_size, "mf_dist_new: the communicator is MPI_COMM_NULL"), (mf_dist *)NULL);
    if (c.bucket_floats < 1 || (c.zero1 != 0 && c.zero1 != 1) || (c.no_overlap != 0 && c.no_overlap != 1))
        return (mf__dist_new_fail(err, err_size, "mf_dist_new: bad config (bucket_floats %lld must be >= 1, zero1 and no_overlap "
                              "0 or 1; start from mf_dist_config_default)", (long long)c.bucket_floats), (mf_dist *)NULL);
    if (!(d = (mf_dist *)mf__xmalloc(sizeof *d))) return (mf__dist_new_fail(err, err_size, "out of memory: mf_dist"), (mf_dist *)NULL);
    memset(d, 0, sizeof *d);
    d->cfg = c;
    d->tr = &mf__dist_mpi;
    if (MPI_Comm_dup(comm, &d->comm) != MPI_SUCCESS) {
        MF_FREE(d);
        return (mf__dist_new_fail(err, err_size, "mf_dist_new: MPI_Comm_dup failed"), (mf_dist *)NULL);
    }
    MPI_Comm_rank(d->comm, &d->rank);
    MPI_Comm_size(d->comm, &d->world);
    if (MPI_Comm_split_type(d->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_rank(local, &d->local_rank);
        MPI_Comm_free(&local);
    }
#ifdef METAFORMER_NCCL
    if (mf__nccl_pick_device(d) < 0) { /* one GPU per rank: the local rank's */
        mf__dist_new_fail(err, err_size, "%s", d->err);
        MPI_Comm_free(&d->comm);
        MF_FREE(d);
        return NULL;
    }
#endif
    return d;
}
MFDEF int mf_dist_rank(const mf_dist *d) { return d ? d->rank : 0; }
MFDEF int mf_dist_world(const mf_dist *d) { return d ? d->world : 1; }
MFDEF int mf_dist_local_rank(const mf_dist *d) { return d ? d->local_rank : 0; }
MFDEF uint64_t mf_dist_seed(const mf_dist *d, uint64_t seed) {
    return (!d || d->rank == 0) ? seed : mf__mix64(seed ^ mf__mix64((uint64_t)d->rank + 0x9e3779b97f4a7c15ULL));
}
MFDEF const char *mf_dist_error(const mf_dist *d) { return d ? d->err : "mf_dist is NULL"; }
MFDEF int mf_dist_no_sync(mf_dist *d, int on) {
    int old;
    if (!d) return 0;
    old = d->no_sync; d->no_sync = on != 0;
    return old;
}

/* ---- the buckets and the backward hook ---- */
/* Each bucket's ready_at from this step's tape: a parameter's gradient is final once the backward
   has passed the first tape op that reads it. A parameter no op reads as an input but a forward
   touched (a fused op that reads it from its own state, the feedback recurrence) is final only at
   the end: -1. Frozen and untouched parameters are final from the start. */
static void mf__dist_plan(mf_dist *d, mf_ctx *ctx) {
    int i, k, b = 0;
    for (i = 0; i < ctx->n_params; i++) d->first[i] = INT_MAX;
    for (i = 0; i < ctx->tape_len; i++)
        for (k = 0; k < MF_MAX_SRC; k++) {
            const mf_tensor *s = ctx->tape[i]->src[k];
            int j;
            if (s && s->is_param && d->first[j = mf__param_index(ctx, s)] > i) d->first[j] = i;
        }
    for (i = 0; i < ctx->n_params; i++)
        if (d->first[i] == INT_MAX && ctx->p_touched[i] && ctx->params[i]->requires_grad) d->first[i] = -1;
    for (b = 0; b < d->n_bk; b++) d->bk[b].ready_at = INT_MAX;
    for (i = 0, b = 0; i < ctx->n_params; i++) {
        while (ctx->params[i]->offset >= d->bk[b].hi) b++;
        if (d->first[i] < d->bk[b].ready_at) d->bk[b].ready_at = d->first[i];
    }
}
static int mf__dist_start(mf_dist *d, mf_ctx *ctx, int b) {
    return d->tr->allreduce_start(d, ctx, ctx->p_grad + d->bk[b].lo, d->bk[b].hi - d->bk[b].lo);
}
/* mf_backward's hook after tape op i: start the buckets that are final, from the last one down (the
   same order on every rank: MPI matches the collectives of a communicator by their order) */
static void mf__dist_hook(mf_ctx *ctx, void *user, int i) {
    mf_dist *d = (mf_dist *)user;
    if (d->no_sync || d->cfg.no_overlap || d->local_fail) return;
    if (!d->planned) { mf__dist_plan(d, ctx); d->planned = 1; d->last_op = INT_MAX; }
    else if (i >= d->last_op) d->stray = 1; /* a second backward in this step */
    if (d->stray) return;
    d->last_op = i;
    while (d->next >= 0 && d->bk[d->next].ready_at >= i) {
        if (mf__dist_start(d, ctx, d->next) < 0) { d->local_fail = 1; return; }
        d->next--; d->started_in_backward++;
    }
}

/* ---- attach: the same parameters everywhere, rank 0's values, the buckets ---- */
/* "name [shape] (frozen)" of parameter i */
static void mf__dist_param_str(const mf_ctx *ctx, int i, char *buf, size_t size) {
    char sh[64];
    const mf_tensor *p = ctx->params[i];
    snprintf(buf, size, "\"%s\" %s%s", p->name, mf_shape_str(p, sh, sizeof sh), p->requires_grad ? "" : " (frozen)");
}
/* the parameter list as text, one per line (the caller frees it) */
static char *mf__dist_param_list(const mf_ctx *ctx, int *len) {
    mf__buf h = {NULL, 0, 0, 0};
    char one[700];
    int i;
    for (i = 0; i < ctx->n_params; i++) {
        mf__dist_param_str(ctx, i, one, sizeof one);
        mf__buf_str(&h, one);
        mf__buf_str(&h, "\n");
    }
    mf__buf_str(&h, "");
    if (h.oom) { MF_FREE(h.s); return NULL; }
    *len = (int)h.len + 1;
    return h.s;
}
/* why this rank's list differs from rank 0's (mine, theirs: the lists), into why */
static void mf__dist_first_difference(const char *mine, const char *theirs, char *why, size_t size) {
    int line = 0;
    while (*mine && *theirs) {
        const char *a = strchr(mine, '\n'), *b = strchr(theirs, '\n');
        if (a - mine != b - theirs || memcmp(mine, theirs, (size_t)(a - mine)) != 0) {
            snprintf(why, size, "mf_dist_attach: parameter %d is %.*s here but %.*s on rank 0 (every rank must build the "
                     "same model config)", line, (int)(a - mine), mine, (int)(b - theirs), theirs);
            return;
        }
        mine = a + 1; theirs = b + 1; line++;
    }
    snprintf(why, size, "mf_dist_attach: this rank has %s parameters than rank 0 (parameter %d is %s here; every rank "
             "must build the same model config)", *mine ? "more" : "fewer", line, *mine ? "present" : "missing");
}
static uint64_t mf__dist_checksum(const float *x, int64_t n);
/* the parameters' checksum (a CUDA context's copied to the host first; 0 when that fails: the
   ranks then disagree, or all fail alike) */
static uint64_t mf__dist_param_checksum(mf_ctx *ctx) {
    float *h;
    uint64_t sum;
    if (!ctx->be) return mf__dist_checksum(ctx->p_data, ctx->p_used);
    if (!(h = (float *)mf__xmalloc((size_t)ctx->p_used * sizeof(float)))) return 0;
    sum = ctx->be->copy(ctx, h, ctx->p_data, (size_t)ctx->p_used * sizeof(float), MF__D2H) == 0 ? mf__dist_checksum(h, ctx->p_used) : 0;
    MF_FREE(h);
    return sum;
}
static uint64_t mf__dist_checksum(const float *x, int64_t n) {
    uint64_t h = 0x243f6a8885a308d3ULL;
    int64_t k;
    for (k = 0; k < n; k++) {
        uint32_t u;
        memcpy(&u, &x[k], 4);
        h = mf__mix64(h ^ u);
    }
    return h;
}
/* the buckets over the flat gradient buffer: whole parameters, about bucket_floats each */
static int mf__dist_layout(mf_dist *d, mf_ctx *ctx) {
    int i, n = 0;
    int64_t lo = 0;
    if (!(d->bk = (mf__dist_bucket *)mf__xmalloc((size_t)(ctx->n_params + 1) * sizeof *d->bk)) ||
        !(d->first = (int *)mf__xmalloc((size_t)(ctx->n_params + 1) * sizeof(int))))
        return mf__dist_fail(d, "out of memory: the gradient buckets");
    for (i = 0; i < ctx->n_params; i++) {
        const mf_tensor *p = ctx->params[i];
        int64_t end = i + 1 < ctx->n_params ? ctx->params[i + 1]->offset : ctx->p_used;
        if (end - lo >= d->cfg.bucket_floats || i + 1 == ctx->n_params || p->offset + p->ne - lo >= d->cfg.bucket_floats) {
            d->bk[n].lo = lo; d->bk[n].hi = end; d->bk[n].ready_at = -1;
            n++; lo = end;
        }
    }
    d->n_bk = n;
    d->next = n - 1;
    for (i = 0, n = 0; i < d->n_bk; i++) n += (int)((d->bk[i].hi - d->bk[i].lo + MF__MPI_PIECE - 1) / MF__MPI_PIECE);
    /* every request slot now, so that starting a bucket never allocates (nor fails) mid-step */
    d->cap_req = n + 1;
    d->req = (MPI_Request *)mf__xmalloc((size_t)d->cap_req * sizeof *d->req);
    d->req_buf = (float **)mf__xmalloc((size_t)d->cap_req * sizeof *d->req_buf);
    d->req_n = (int64_t *)mf__xmalloc((size_t)d->cap_req * sizeof *d->req_n);
    if (!d->req || !d->req_buf || !d->req_n) return mf__dist_fail(d, "out of memory: the list of gradient reductions");
    return 0;
}

/* ZeRO-1: this rank's moments, zeroed, in the context's memory (the GPU's for a CUDA context), and on
   the host d->tmp, the MPI reduce-scatter's result (NCCL's lands in place) */
static int mf__dist_shard_moments(mf_dist *d, mf_ctx *ctx) {
    size_t bytes = (size_t)d->shard * sizeof(float);
    if (mf__mem_grant(ctx, 2 * bytes, "optimizer moments") < 0) return mf__dist_fail(d, "%s", mf_error(ctx));
    if (!ctx->be && !(d->tmp = (float *)mf__xmalloc(bytes)))
        return mf__dist_fail(d, "out of memory: ZeRO-1's buffer of a shard (%lld floats)", (long long)d->shard);
    ctx->p_m = (float *)mf__dmalloc(ctx, bytes, "ZeRO-1 optimizer moments");
    ctx->p_v = ctx->p_m ? (float *)mf__dmalloc(ctx, bytes, "ZeRO-1 optimizer moments") : NULL;
    if (!ctx->p_v || mf__dzero(ctx, ctx->p_m, bytes) < 0 || mf__dzero(ctx, ctx->p_v, bytes) < 0) {
        mf__dfree(ctx, ctx->p_m); mf__dfree(ctx, ctx->p_v); ctx->p_m = ctx->p_v = NULL;
        return mf__dist_fail(d, "ZeRO-1 moments of %lld floats: %s", (long long)d->shard,
                             mf_ok(ctx) ? "out of memory" : mf_error(ctx));
    }
    ctx->mom_lo = d->rank * d->shard; ctx->mom_n = d->shard;
    return 0;
}

MFDEF int mf_dist_attach(mf_dist *d, mf_ctx *ctx) {
    char why[MF__ERRLEN] = "";
    char *mine = NULL, *theirs = NULL;
    int len = 0, len0 = 0, ok = 1;
    uint64_t sum, lo_hi[2], red[2];
    if (!d) return (mf__fail(ctx, "mf_dist_attach: the mf_dist is NULL (make it with mf_dist_new)"), -1);
    if (!ctx) snprintf(why, sizeof why, "mf_dist_attach: the context is NULL");
    else if (d->ctx) snprintf(why, sizeof why, "mf_dist_attach: this mf_dist is attached already (one context per mf_dist)");
    else if (!mf_ok(ctx)) snprintf(why, sizeof why, "%s", mf_error(ctx));
#ifndef METAFORMER_NCCL
    else if (ctx->be) snprintf(why, sizeof why, "mf_dist_attach: the MPI transport averages host buffers; a CUDA context needs "
                               "the NCCL build (METAFORMER_NCCL)");
#endif
    else if (ctx->n_params == 0) snprintf(why, sizeof why, "mf_dist_attach: the context has no parameters (make the model first)");
    else if (ctx->bw_hook) snprintf(why, sizeof why, "mf_dist_attach: the context has a backward hook already (another mf_dist?)");
    else if (!(mine = mf__dist_param_list(ctx, &len))) snprintf(why, sizeof why, "out of memory: the parameter list");
    if (mf__dist_agree(d, ctx, why[0] == 0, why) < 0) { MF_FREE(mine); return -1; }
#ifdef METAFORMER_NCCL
    if (ctx->be && mf__nccl_open(d, ctx) < 0) { MF_FREE(mine); return -1; } /* collective; d->tr: NCCL */
#endif
    /* the same parameters: rank 0's list against every rank's */
    if (d->rank == 0) len0 = len;
    MPI_Bcast(&len0, 1, MPI_INT, 0, d->comm);
    if (!(theirs = (char *)mf__xmalloc((size_t)len0))) { ok = 0; snprintf(why, sizeof why, "out of memory: the parameter list"); }
    if (theirs && d->rank == 0) memcpy(theirs, mine, (size_t)len0);
    if (mf__dist_agree(d, ctx, ok, why) < 0) { MF_FREE(mine); MF_FREE(theirs); return -1; }
    MPI_Bcast(theirs, len0, MPI_CHAR, 0, d->comm);
    if (ok && (len != len0 || memcmp(mine, theirs, (size_t)len) != 0)) { ok = 0; mf__dist_first_difference(mine, theirs, why, sizeof why); }
    MF_FREE(mine); MF_FREE(theirs);
    if (mf__dist_agree(d, ctx, ok, why) < 0) return -1;
    /* rank 0's values, checked */
    if (d->tr->broadcast(d, ctx, ctx->p_data, ctx->p_used, 0) < 0) return mf__dist_agree(d, ctx, 0, d->err);
    sum = mf__dist_param_checksum(ctx);
    lo_hi[0] = sum; lo_hi[1] = ~sum;
    MPI_Allreduce(lo_hi, red, 2, MPI_UINT64_T, MPI_MIN, d->comm);
    if (mf__dist_agree(d, ctx, red[0] == sum && red[1] == ~sum, "mf_dist_attach: the parameters differ from rank 0's after the broadcast") < 0)
        return -1;
    ctx->seed = mf_dist_seed(d, ctx->seed);
    ok = mf__dist_layout(d, ctx) == 0;
    if (ok && d->cfg.zero1) { /* the padded flat buffer and this rank's moments only */
        d->shard = (ctx->p_used + d->world - 1) / d->world;
        d->shard = (d->shard + 15) & ~(int64_t)15;
        d->npad = d->shard * d->world;
        if (d->shard > INT_MAX) ok = 0, mf__dist_fail(d, "mf_dist_attach: a ZeRO-1 shard of %lld floats is too long for MPI's int "
                                                      "counts; use more ranks", (long long)d->shard);
        else if (ctx->p_m) ok = 0, mf__dist_fail(d, "mf_dist_attach: ZeRO-1 must be attached before the first optimizer step "
                                                 "or checkpoint load (the moments exist already); resume with mf_dist_load");
        else if (mf__param_reserve(ctx, d->npad, 1) < 0) ok = 0, mf__dist_fail(d, "%s", mf_error(ctx));
        else {
            mf__param_fit(ctx, d->npad);
            mf__param_zero_new(ctx, ctx->p_used, d->npad); /* the pad past the parameters, which the shards read */
            if (mf__dist_shard_moments(d, ctx) < 0) ok = 0;
        }
    }
    if (mf__dist_agree(d, ctx, ok, d->err) < 0) return -1;
    d->ctx = ctx;
    if (!d->cfg.zero1) { ctx->bw_hook = mf__dist_hook; ctx->bw_hook_user = d; }
    return 0;
}

/* ---- the step: failure agreement, the averages, clipping, the update ---- */
MFDEF int mf_dist_sync(mf_dist *d, mf_ctx *ctx, double *sums, int n_sums) {
    int rc, ok, nn[2], red[2];
    char why[MF__ERRLEN] = "";
    if (!d) return (mf__fail(ctx, "mf_dist_sync: the mf_dist is NULL (make it with mf_dist_new)"), -1);
    if (!d->ctx || ctx != d->ctx) snprintf(why, sizeof why, "mf_dist_sync: the context is not the one attached with mf_dist_attach");
    else if (n_sums < 0 || (n_sums > 0 && !sums)) snprintf(why, sizeof why, "mf_dist_sync: %d sums need an array of that many doubles", n_sums);
    else if (d->local_fail) snprintf(why, sizeof why, "%s", d->err);
    else if (d->stray) snprintf(why, sizeof why, "mf_dist_sync: a second mf_backward ran after the gradient average had started; "
                                "call mf_dist_no_sync(d, 1) before the backwards of the micro-batches before the last one");
    ok = why[0] == 0 && mf_ok(ctx);
    if (d->ctx) { /* the same collectives on every rank, failed or not: the buckets not started yet, the touched parameters */
        if (!d->cfg.zero1)
            for (; d->next >= 0; d->next--)
                if (mf__dist_start(d, d->ctx, d->next) < 0) ok = 0, snprintf(why, sizeof why, "%s", d->err);
        MPI_Allreduce(MPI_IN_PLACE, d->ctx->p_touched, d->ctx->n_params, MPI_UNSIGNED_CHAR, MPI_MAX, d->comm);
    }
    nn[0] = n_sums; nn[1] = -n_sums;
    MPI_Allreduce(nn, red, 2, MPI_INT, MPI_MIN, d->comm);
    if (ok && red[0] != -red[1]) ok = 0, snprintf(why, sizeof why, "mf_dist_sync: the ranks pass different numbers of sums (%d here)", n_sums);
    rc = mf__dist_agree(d, ctx, ok, why[0] ? why : NULL);
    if (d->ctx && !d->cfg.zero1) { /* a transport error on one rank fails every rank */
        ok = d->tr->wait_all(d, d->ctx) == 0;
        if (rc == 0) rc = mf__dist_agree(d, ctx, ok, ok ? NULL : d->err);
    }
    if (rc == 0 && d->cfg.zero1) {
        ok = d->tr->reduce_scatter(d, ctx, ctx->p_grad, d->shard) == 0;
        rc = mf__dist_agree(d, ctx, ok, ok ? NULL : d->err);
    }
    if (rc == 0 && n_sums > 0) MPI_Allreduce(MPI_IN_PLACE, sums, n_sums, MPI_DOUBLE, MPI_SUM, d->comm);
    d->planned = 0; d->stray = 0; d->next = d->n_bk - 1;
    d->last_in_backward = d->started_in_backward; d->started_in_backward = 0;
    return rc;
}

/* ZeRO-1: the part [a, b) of parameter i inside this rank's shard (a == b: none) */
static void mf__dist_in_shard(const mf_dist *d, const mf_ctx *ctx, int i, int64_t *a, int64_t *b) {
    const mf_tensor *p = ctx->params[i];
    int64_t lo = d->rank * d->shard, hi = lo + d->shard;
    *a = p->offset > lo ? p->offset : lo;
    *b = p->offset + p->ne < hi ? p->offset + p->ne : hi;
    if (*b < *a) *b = *a;
    *a -= p->offset; *b -= p->offset;
}

/* ZeRO-1 clipping: the sum of squares of this rank's shard of the trainable gradients (-1: failed,
   in ctx), and their scaling by f; a CUDA context's on the device */
static double mf__dist_shard_sumsq(mf_dist *d, mf_ctx *ctx) {
    double ss = 0;
    int i;
    if (ctx->be) return ctx->be->grad_sumsq(ctx, d->rank * d->shard, (d->rank + 1) * d->shard);
    for (i = 0; i < ctx->n_params; i++) {
        int64_t a, b;
        if (!ctx->params[i]->requires_grad) continue;
        mf__dist_in_shard(d, ctx, i, &a, &b);
        if (b > a) ss += mf__sumsq(ctx->params[i]->grad + a, b - a);
    }
    return ss;
}
static void mf__dist_shard_scale(mf_dist *d, mf_ctx *ctx, float f) {
    int i;
    if (ctx->be) { ctx->be->grad_scale(ctx, d->rank * d->shard, (d->rank + 1) * d->shard, f); return; }
    for (i = 0; i < ctx->n_params; i++) {
        int64_t a, b, k;
        if (!ctx->params[i]->requires_grad) continue;
        mf__dist_in_shard(d, ctx, i, &a, &b);
        for (k = a; k < b; k++) ctx->params[i]->grad[k] *= f;
    }
}

MFDEF float mf_dist_clip_grad_norm(mf_dist *d, mf_ctx *ctx, float max_norm) {
    double ss, all[2] = {0, 0}, mine[2];
    float norm;
    if (!d || !d->cfg.zero1) return mf_clip_grad_norm(ctx, max_norm); /* the averaged gradients are the same everywhere */
    /* every rank joins the sum (a failed one, or one passing another context, adds a failure), so
       none waits for a missing rank */
    ss = ctx && ctx == d->ctx && mf_ok(ctx) ? mf__dist_shard_sumsq(d, ctx) : -1;
    mine[0] = ss < 0 ? 0 : ss; mine[1] = ss < 0;
    MPI_Allreduce(mine, all, 2, MPI_DOUBLE, MPI_SUM, d->comm);
    if (all[1] > 0) return 0.0f; /* mf_dist_optimizer_step then fails on every rank */
    norm = (float)sqrt(all[0]);
    if (max_norm > 0 && norm > max_norm) mf__dist_shard_scale(d, ctx, max_norm / (norm + 1e-6f));
    return norm;
}

MFDEF int mf_dist_optimizer_step(mf_dist *d, mf_ctx *ctx, const mf_optimizer *o) {
    int64_t total;
    mf__opt_job *jobs = NULL;
    int i, ok;
    if (!d) return (mf__fail(ctx, "mf_dist_optimizer_step: the mf_dist is NULL (make it with mf_dist_new)"), -1);
    if (!d->ctx || ctx != d->ctx)
        return mf__dist_agree(d, ctx, 0, "mf_dist_optimizer_step: the context is not the one attached with mf_dist_attach");
    if (!d->cfg.zero1) return mf__dist_agree(d, ctx, mf_optimizer_step(ctx, o) == 0, NULL);
    ok = mf_ok(ctx) && mf__check_optimizer(ctx, o, "mf_dist_optimizer_step") == 0;
    if (ok && ctx->be) ok = ctx->be->optimizer_step(ctx, o) == 0; /* over the shard [mom_lo, mom_lo + mom_n) */
    else if (ok) ok = (jobs = mf__opt_jobs(ctx, o, &total)) != NULL;
    if (mf__dist_agree(d, ctx, ok, NULL) < 0) return -1;
    for (i = 0; jobs && i < ctx->n_params; i++) { /* this rank's shard (its moments), serial: a shard is 1 / world of the work */
        int64_t a, b;
        if (jobs[i].param < 0) continue;
        mf__dist_in_shard(d, ctx, i, &a, &b);
        if (a < b) mf__opt_update(ctx, o, &jobs[i], a, b, 1.0f, 0);
    }
    ok = d->tr->all_gather(d, ctx, ctx->p_data, d->shard) == 0;
    return mf__dist_agree(d, ctx, ok, ok ? NULL : d->err);
}

/* ---- checkpoints on any world size ---- */
/* The model state's tensors hold batch rows first (the relative mixer's memories [B, len, D]); an
   int array named "*.lengths" holds the rows in element 0 (mf__xl_state). */
static int mf__dist_is_rows(const char *name) {
    size_t n = strlen(name);
    return n >= 8 && strcmp(name + n - 8, ".lengths") == 0;
}
/* every rank's n floats at src gathered on rank 0 in rank order into dst (world * n floats; NULL on
   the other ranks); src and dst in the context's memory (a CUDA context's go through the host) */
static int mf__dist_gather(mf_dist *d, mf_ctx *ctx, const float *src, int64_t n, float *dst) {
    const float *hs = src;
    float *hbuf = NULL, *hd = dst;
    int ok = 1;
    if (ctx->be) {
        hbuf = (float *)mf__xmalloc((size_t)(n * (d->rank == 0 ? d->world + 1 : 1)) * sizeof(float) + 1);
        ok = hbuf && mf__ddownload(ctx, hbuf, src, (size_t)n * sizeof(float)) == 0;
        hs = hbuf; hd = hbuf && d->rank == 0 ? hbuf + n : NULL;
    }
    if (mf__dist_agree(d, ctx, ok, "out of memory: the host copy of a gathered buffer") < 0) { MF_FREE(hbuf); return -1; }
    MPI_Gather(hs, (int)n, MPI_FLOAT, hd, (int)n, MPI_FLOAT, 0, d->comm);
    if (ctx->be && d->rank == 0) ok = mf__dupload(ctx, dst, hd, (size_t)(n * d->world) * sizeof(float)) == 0;
    MF_FREE(hbuf);
    return mf__dist_agree(d, ctx, ok, NULL);
}

/* the state of every rank, gathered on rank 0 in rank order (the rows of rank 0, then rank 1, ...);
   x[i].data of the float tensors points into *bufs (rank 0; freed by the caller) */
static int mf__dist_gather_state(mf_dist *d, mf_ctx *ctx, mf__xtensor *x, int nx, float **bufs) {
    uint64_t h = 0x9e3779b97f4a7c15ULL, lo_hi[2], red[2];
    int i, ok = 1;
    float *at;
    for (i = 0; i < nx; i++) { /* the same pieces everywhere: names, shapes and the int values */
        h = mf__mix64(h ^ mf__dist_checksum((const float *)(const void *)x[i].name, (int64_t)(sizeof x[i].name / 4)));
        h = mf__mix64(h ^ (uint64_t)x[i].ne ^ ((uint64_t)x[i].i32 << 40));
        if (x[i].i32) h = mf__mix64(h ^ mf__dist_checksum((const float *)(const void *)x[i].ints, x[i].ne));
    }
    lo_hi[0] = h; lo_hi[1] = ~h;
    MPI_Allreduce(lo_hi, red, 2, MPI_UINT64_T, MPI_MIN, d->comm);
    if (mf__dist_agree(d, ctx, red[0] == h && red[1] == ~h, "mf_dist_save: the ranks' model states differ in shape (every rank "
                       "must run the same batch size and memory lengths)") < 0) return -1;
    if (d->rank == 0) {
        int64_t total = 0;
        for (i = 0; i < nx; i++) if (!x[i].i32) total += x[i].ne * d->world;
        ok = (*bufs = (float *)mf__dmalloc(ctx, (size_t)(total ? total : 1) * sizeof(float), "the gathered model state")) != NULL;
    }
    if (mf__dist_agree(d, ctx, ok, NULL) < 0) return -1;
    at = d->rank == 0 ? *bufs : NULL;
    for (i = 0; i < nx; i++) {
        if (x[i].i32) {
            if (mf__dist_is_rows(x[i].name)) x[i].ints[0] *= d->world;
            continue;
        }
        if (x[i].ne * d->world > INT_MAX) return mf__dist_agree(d, ctx, 0, "mf_dist_save: a model state tensor too long for MPI's int counts");
        if (mf__dist_gather(d, ctx, x[i].data, x[i].ne, at) < 0) return -1;
        x[i].shape[0] *= d->world; x[i].ne *= d->world;
        if (at) { x[i].data = at; at += x[i].ne; }
    }
    return 0;
}

/* ZeRO-1: every rank's moments gathered into full buffers on rank 0 (*m, *v in the context's memory,
   freed by the caller with mf__dfree; NULL elsewhere). For the moment the whole buffers exist on rank
   0 while it writes the file (on a GPU: device memory of twice the parameters). */
static int mf__dist_gather_moments(mf_dist *d, mf_ctx *ctx, float **m, float **v) {
    int ok = 1;
    size_t bytes = (size_t)ctx->p_cap * sizeof(float);
    *m = *v = NULL;
    if (d->rank == 0) {
        *m = (float *)mf__dmalloc(ctx, bytes, "the gathered optimizer moments");
        *v = *m ? (float *)mf__dmalloc(ctx, bytes, "the gathered optimizer moments") : NULL;
        ok = *v && mf__dzero(ctx, *m, bytes) == 0 && mf__dzero(ctx, *v, bytes) == 0;
    }
    if (mf__dist_agree(d, ctx, ok, NULL) < 0 || mf__dist_gather(d, ctx, ctx->p_m, d->shard, *m) < 0 ||
        mf__dist_gather(d, ctx, ctx->p_v, d->shard, *v) < 0) {
        mf__dfree(ctx, *m); mf__dfree(ctx, *v); *m = *v = NULL;
        return -1;
    }
    return 0;
}
/* swap the moment buffers of ctx with (*m, *v, *lo, *n): whole ones for mf__save / mf__load_ckpt */
static void mf__dist_swap_moments(mf_ctx *ctx, float **m, float **v, int64_t *lo, int64_t *n) {
    float *tm = ctx->p_m, *tv = ctx->p_v;
    int64_t tl = ctx->mom_lo, tn = ctx->mom_n;
    ctx->p_m = *m; ctx->p_v = *v; ctx->mom_lo = *lo; ctx->mom_n = *n;
    *m = tm; *v = tv; *lo = tl; *n = tn;
}

static int mf__dist_model_ok(mf_dist *d, mf_model *m, const char *fn, char *why, size_t size) {
    if (!m) snprintf(why, size, "%s: the model is NULL", fn);
    else if (!d->ctx || m->ctx != d->ctx) snprintf(why, size, "%s: the model's context is not the one attached with mf_dist_attach", fn);
    else if (!mf_ok(m->ctx)) snprintf(why, size, "%s", mf_error(m->ctx));
    return why[0] == 0;
}

MFDEF int mf_dist_save(mf_dist *d, mf_model *m, const char *path, const char *const *meta_kv, int n_meta) {
    mf__state_io io;
    char why[MF__ERRLEN] = "";
    float *bufs = NULL, *fm = NULL, *fv = NULL;
    int i, rc = -1;
    mf_ctx *ctx = m ? m->ctx : NULL;
    if (!d) return (mf__fail(ctx, "mf_dist_save: the mf_dist is NULL (make it with mf_dist_new)"), -1);
    memset(&io, 0, sizeof io);
    io.mode = MF__STATE_SAVE; io.m = m;
    if (mf__dist_model_ok(d, m, "mf_dist_save", why, sizeof why) && m->fam->state && m->fam->state(m, &io) < 0)
        snprintf(why, sizeof why, "%s", mf_error(ctx));
    if (mf__dist_agree(d, ctx, why[0] == 0, why[0] ? why : NULL) < 0) goto done;
    if (mf__dist_gather_state(d, ctx, io.t, io.n, &bufs) < 0) goto done;
    if (d->cfg.zero1 && mf__dist_gather_moments(d, ctx, &fm, &fv) < 0) goto done;
    if (d->rank == 0) {
        int64_t lo = 0, n = 0;
        char xval[512];
        const char *xkey = mf__mixer_meta(m, xval, sizeof xval);
        if (d->cfg.zero1) mf__dist_swap_moments(ctx, &fm, &fv, &lo, &n);
        rc = mf__save(ctx, path, 1, meta_kv, n_meta, io.t, io.n, xkey, xval);
        if (d->cfg.zero1) mf__dist_swap_moments(ctx, &fm, &fv, &lo, &n);
    }
    rc = mf__dist_agree(d, ctx, d->rank != 0 || rc == 0, NULL);
done:
    for (i = 0; i < io.n; i++) { MF_FREE(io.t[i].ints); if (ctx) mf__dfree(ctx, io.t[i].owned); }
    MF_FREE(io.t);
    if (ctx) { mf__dfree(ctx, bufs); mf__dfree(ctx, fm); mf__dfree(ctx, fv); }
    return rc < 0 ? -1 : 0;
}

/* This rank's rows of the model state in an open checkpoint, in place: every "__state__." tensor
   keeps rows [rank * B / world, (rank + 1) * B / world) of its B (a view: offsets and shape), every
   "*.lengths" array says B / world. 0, or -1 with why when the rows do not split evenly. */
static int mf__dist_state_rows(mf_dist *d, mf__ckpt *c, char *why, size_t size) {
    int i;
    for (i = 0; i < c->n; i++) {
        mf__entry *e = &c->e[i];
        uint64_t bytes = e->end - e->begin;
        if (strncmp(e->name, "__state__.", 10) != 0) continue;
        if (e->i32 && mf__dist_is_rows(e->name) && bytes >= 4) {
            int32_t rows;
            unsigned char *at = c->file + (c->data - c->file) + e->begin;
            memcpy(&rows, at, 4);
            if (rows % d->world)
                return snprintf(why, size, "mf_dist_load: the checkpoint's memories hold %d batch rows, which %d ranks cannot "
                                "split evenly (run a world size that divides %d, with batch %d / world per rank)",
                                (int)rows, d->world, (int)rows, (int)rows), -1;
            rows /= d->world;
            memcpy(at, &rows, 4);
        } else if (e->f32 && e->ndim >= 1) {
            if (e->shape[0] % d->world)
                return snprintf(why, size, "mf_dist_load: the state tensor \"%.200s\" has %d batch rows, which %d ranks cannot split "
                                "evenly", e->name, e->shape[0], d->world), -1;
            e->begin += bytes / (uint64_t)d->world * (uint64_t)d->rank;
            e->end = e->begin + bytes / (uint64_t)d->world;
            e->shape[0] /= d->world;
        }
    }
    return 0;
}

MFDEF int mf_dist_load(mf_dist *d, mf_model *m, const char *path) {
    mf__ckpt c;
    char why[MF__ERRLEN] = "";
    const char *err;
    int rc = -1, opened = 0;
    mf_ctx *ctx = m ? m->ctx : NULL;
    if (!d) return (mf__fail(ctx, "mf_dist_load: the mf_dist is NULL (make it with mf_dist_new)"), -1);
    memset(&c, 0, sizeof c);
    if (mf__dist_model_ok(d, m, "mf_dist_load", why, sizeof why)) {
        if (!path) snprintf(why, sizeof why, "mf_dist_load: path is NULL");
        else if ((err = mf__ckpt_open(&c, path))) snprintf(why, sizeof why, "mf_dist_load: \"%s\": %s", path, err);
        else opened = 1, mf__dist_state_rows(d, &c, why, sizeof why);
    }
    if (mf__dist_agree(d, ctx, why[0] == 0, why[0] ? why : NULL) == 0) {
        float *fm = NULL, *fv = NULL;
        int64_t lo = 0, n = 0;
        if (d->cfg.zero1) mf__dist_swap_moments(ctx, &fm, &fv, &lo, &n); /* mf__load_ckpt makes whole ones */
        rc = mf__load_ckpt(ctx, &c, path, 1, m);
        if (d->cfg.zero1) {
            mf__dist_swap_moments(ctx, &fm, &fv, &lo, &n);
            if (rc >= 0 && (mf__dcopy(ctx, ctx->p_m, fm + ctx->mom_lo, (size_t)ctx->mom_n * sizeof(float)) < 0 ||
                            mf__dcopy(ctx, ctx->p_v, fv + ctx->mom_lo, (size_t)ctx->mom_n * sizeof(float)) < 0))
                rc = -1;
            mf__dfree(ctx, fm); mf__dfree(ctx, fv);
        }
        if (rc >= 0) ctx->seed = mf_dist_seed(d, ctx->seed); /* the file holds rank 0's seed */
        if (mf__dist_agree(d, ctx, rc >= 0, NULL) < 0) rc = -1;
    }
    if (opened) mf__ckpt_close(&c);
    return rc;
}

MFDEF void mf_dist_free(mf_dist *d) {
    if (!d) return;
    if (d->ctx && d->ctx->bw_hook_user == d) { d->ctx->bw_hook = NULL; d->ctx->bw_hook_user = NULL; }
    if (d->n_req) MPI_Waitall(d->n_req, d->req, MPI_STATUSES_IGNORE);
#ifdef METAFORMER_NCCL
    mf__nccl_close(d);
#endif
    MPI_Comm_free(&d->comm);
    MF_FREE(d->bk); MF_FREE(d->first); MF_FREE(d->req); MF_FREE(d->req_buf); MF_FREE(d->req_n); MF_FREE(d->tmp);
    MF_FREE(d);
}
#endif /* METAFORMER_MPI */

/* ---- every op ------------------------------------------------------------------------------------
   The descriptors of [mf:ops] and of the families' sections (a family's ops under its switch), here
   after the last section that defines one. Nothing in the library walks it: the tests do. Each op
   needs an example (tests/op_examples.h) that tests/test_ops.c checks against the op's properties
   and tests/test_cuda_ops.cpp runs on both backends, and a row in metaformer_cuda.cuh's mf__cu_ops. */
#if defined(__GNUC__) || defined(__clang__)
#define MF__READ_BY_TESTS __attribute__((unused))
#else
#define MF__READ_BY_TESTS
#endif
static MF__READ_BY_TESTS const mf__op *const mf__ops[] = {
    &mf__op_matmul, &mf__op_head_matmul, &mf__op_linear, &mf__op_add, &mf__op_sub, &mf__op_mul,
    &mf__op_scale, &mf__op_relu, &mf__op_gelu, &mf__op_sigmoid, &mf__op_silu, &mf__op_exp,
    &mf__op_softmax, &mf__op_log_softmax, &mf__op_cross_entropy, &mf__op_mse, &mf__op_layernorm,
    &mf__op_embedding, &mf__op_dropout, &mf__op_reshape, &mf__op_permute, &mf__op_concat, &mf__op_slice,
    &mf__op_roll, &mf__op_sum, &mf__op_mean, &mf__op_sum_axis, &mf__op_conv1d, &mf__op_avg_pool,
    &mf__op_avg_pool_sub, &mf__op_attention, &mf__op_elu1, &mf__op_reciprocal,
#ifndef METAFORMER_NO_XL
    &mf__op_rel_attention,
#endif
#ifndef METAFORMER_NO_FASTWEIGHTS
    &mf__op_dpfp, &mf__op_fast_weights, &mf__op_linear_attention,
#endif
#ifndef METAFORMER_NO_FEEDBACK
    &mf__op_feedback_attention, &mf__op_feedback,
#endif
};
#define MF__N_OPS ((int)(sizeof mf__ops / sizeof mf__ops[0]))

#ifdef METAFORMER_CUDA
#include "metaformer_cuda.cuh"
#else
#define MF__NO_CUDA "this build has no CUDA: compile the implementation file with nvcc and -DMETAFORMER_CUDA (see docs/cuda.md)"
MFDEF int mf_cuda_available(char *why, size_t size) {
    if (why && size) snprintf(why, size, "%s", MF__NO_CUDA);
    return 0;
}
MFDEF int mf_ctx_set_device(mf_ctx *ctx, mf_device dev) {
    if (!mf_ok(ctx)) return -1;
    if (dev == MF_DEVICE_CPU) return 0;
    if (dev == MF_DEVICE_CUDA) return (mf__fail(ctx, "mf_ctx_set_device: %s", MF__NO_CUDA), -1);
    return (mf__fail(ctx, "mf_ctx_set_device: unknown device %d (MF_DEVICE_CPU or MF_DEVICE_CUDA)", (int)dev), -1);
}
MFDEF int mf_cuda_set_tf32(mf_ctx *ctx, int on) { (void)ctx; (void)on; return -1; }
#endif
MFDEF int mf_ctx_set_precision(mf_ctx *ctx, mf_precision p) {
#ifdef METAFORMER_CUDA
    if (ctx && ctx->be) return mf__cu_set_precision(ctx, p);
#endif
    return mf__precision_on_cpu(ctx, p);
}
MFDEF mf_precision mf_ctx_precision(const mf_ctx *ctx) {
#ifdef METAFORMER_CUDA
    if (ctx && ctx->be) return mf__cu_precision(ctx);
#endif
    return ctx ? ctx->prec : MF_PREC_FP32;
}
MFDEF int mf_cuda_set_precision(mf_ctx *ctx, mf_precision p) { return mf_ctx_set_precision(ctx, p); }
MFDEF mf_precision mf_cuda_precision(const mf_ctx *ctx) { return mf_ctx_precision(ctx); }

#endif /* METAFORMER_IMPLEMENTATION_DONE */
#endif /* METAFORMER_IMPLEMENTATION */

/*
MIT License - Copyright (c) 2026 the metaformer.h authors
Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions: The above copyright notice and this
permission notice shall be included in all copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.
*/
