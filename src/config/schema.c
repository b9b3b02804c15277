/* schema.c - every module key primus understands (Megatron-LM's argument
 * names plus documented native keys), and the check that validates a
 * resolved key map against it: unknown keys with a suggestion, types coerced
 * to one spelling, ranges and choices. */
#define _GNU_SOURCE
#include "config-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NOMAX 1e300                    /* "no upper bound" */
#define BELOW1 0.99999999999999989     /* the largest double below 1: [0, 1) */
#define GE0 0, NOMAX
#define GE1 1, NOMAX
#define ANY 0, 0

#define KEY(k, t, ...) {k, PRM_T_##t, __VA_ARGS__, PRM_KEY_RUN, NULL}

static const prm_key_t prm__keys[] = {
    /* Model shape. */
    KEY("hidden_size", INT, GE1, NULL, 0, 0, "Transformer hidden size (model width)."),
    KEY("num_layers", INT, GE1, NULL, 0, 0, "Number of transformer layers."),
    KEY("num_attention_heads", INT, GE1, NULL, 0, 0, "Number of attention (query) heads."),
    KEY("num_query_groups", INT, GE1, NULL, 1, 0, "Key/value head groups for grouped-query attention; null: one per head."),
    KEY("ffn_hidden_size", INT, GE1, NULL, 1, 0, "SwiGLU MLP inner size; null: 4 x hidden_size."),
    KEY("vocab_size", INT, GE1, NULL, 1, 0, "Vocabulary size; null: taken from the tokenizer."),
    KEY("make_vocab_size_divisible_by", INT, GE1, NULL, 0, 0, "Pad a tokenizer-derived vocabulary to a multiple of this."),
    KEY("seq_length", INT, GE1, NULL, 0, 0, "Training sequence length in tokens."),
    KEY("max_position_embeddings", INT, GE1, NULL, 1, 0, "Longest position the model supports; null: seq_length."),
    KEY("rotary_base", INT, GE1, NULL, 0, 0, "RoPE base frequency (theta)."),
    KEY("norm_epsilon", FLOAT, 0, 1, NULL, 0, 0, "Epsilon of the RMSNorm layers."),
    KEY("untie_embeddings_and_output_weights", BOOL, ANY, NULL, 0, 0, "Use a separate output head instead of the input embedding."),
    KEY("init_method_std", FLOAT, GE0, NULL, 0, 0, "Standard deviation of the normal weight initialisation."),
    KEY("kv_channels", INT, GE1, NULL, 1, 0, "Width of each attention head (Qwen 3: 128 at any hidden size); null: hidden_size / num_attention_heads."),
    KEY("add_qkv_bias", BOOL, ANY, NULL, 0, 0, "Biases on the query, key and value projections (Qwen 2.5; Hugging Face's q_proj.bias ...)."),
    KEY("qk_layernorm", BOOL, ANY, NULL, 0, 0, "RMSNorm on each head's queries and keys before RoPE (Qwen 3; q_norm/k_norm), also under tensor parallelism."),
    KEY("use_rope_scaling", BOOL, ANY, NULL, 0, 0, "Llama 3.1's RoPE frequency scaling (rope_type llama3: low/high frequency factors 1 and 4 over 8192 original positions)."),
    KEY("rope_scaling_factor", FLOAT, GE0, NULL, 0, 0, "Llama 3.1's RoPE scaling factor (with use_rope_scaling)."),
    /* Mixture of experts. */
    KEY("num_experts", INT, GE1, NULL, 1, 0, "Experts per MoE layer; null: a dense model."),
    KEY("moe_router_topk", INT, GE1, NULL, 0, 0, "Experts each token is routed to."),
    KEY("moe_ffn_hidden_size", INT, GE1, NULL, 1, 0, "Inner size of each expert's MLP; null: ffn_hidden_size."),
    KEY("moe_aux_loss_coeff", FLOAT, GE0, NULL, 0, 0, "Weight of the load-balancing auxiliary loss."),
    KEY("moe_layer_freq", INT_OR_LIST, GE1, NULL, 0, 0, "Which layers are MoE: an int k, every k-th layer (0, k, 2k, ...; 1: every layer), or a list of num_layers 0/1 entries ([1, 0, 1, 0]: layers 0 and 2)."),
    KEY("moe_z_loss_coeff", FLOAT, GE0, NULL, 1, 0, "Weight of the router z-loss (mean squared logsumexp of the router logits)."),
    KEY("moe_router_load_balancing_type", ENUM, ANY, "aux_loss|none", 0, 0, "Load balancing: the Switch/GShard aux loss, or none."),
    KEY("moe_router_force_load_balancing", BOOL, ANY, NULL, 0, 0, "Benchmark aid (Megatron-LM's): the router's logits are replaced by normal draws from the seed, so tokens spread evenly over the experts; the routing is not learned (a warning says so)."),
    KEY("moe_token_dispatcher_type", ENUM, ANY, "alltoall", 0, 0, "Token dispatcher (alltoall: the only one; MPI all-to-alls under expert parallelism)."),
    KEY("moe_shared_expert_intermediate_size", INT, GE0, NULL, 1, 0, "Inner size of a shared expert (a dense SwiGLU on every token of an MoE layer); null or 0: none."),
    KEY("moe_expert_capacity_factor", FLOAT, GE0, NULL, 1, 0, "Expert capacity = ceil(factor x tokens x topk / experts); assignments over it are dropped; null: no capacity."),
    /* Batch, schedule and optimizer. */
    KEY("micro_batch_size", INT, GE1, NULL, 0, 0, "Sequences per rank per forward/backward pass."),
    KEY("global_batch_size", INT, GE1, NULL, 1, 0, "Sequences per optimizer step across all ranks; null: micro_batch_size x data-parallel size."),
    KEY("train_iters", INT, GE1, NULL, 0, 0, "Optimizer steps to train for."),
    KEY("seed", INT, GE0, NULL, 0, 0, "Random seed for initialisation and data order."),
    KEY("lr", FLOAT, GE0, NULL, 0, 0, "Peak learning rate."),
    KEY("min_lr", FLOAT, GE0, NULL, 0, 0, "Learning rate at the end of the decay."),
    KEY("lr_warmup_iters", INT, GE0, NULL, 0, 0, "Linear warm-up steps from 0 to lr."),
    KEY("lr_decay_style", ENUM, ANY, "cosine|linear|constant", 0, 0, "Shape of the decay from lr to min_lr."),
    KEY("lr_decay_iters", INT, GE1, NULL, 1, 0, "Steps over which lr decays; null: train_iters."),
    KEY("weight_decay", FLOAT, GE0, NULL, 0, 0, "AdamW decoupled weight decay."),
    KEY("adam_beta1", FLOAT, 0, BELOW1, NULL, 0, 0, "AdamW first-moment decay, in [0, 1)."),
    KEY("adam_beta2", FLOAT, 0, BELOW1, NULL, 0, 0, "AdamW second-moment decay, in [0, 1)."),
    KEY("adam_eps", FLOAT, 0, 1, NULL, 0, 0, "AdamW denominator epsilon."),
    KEY("clip_grad", FLOAT, GE0, NULL, 0, 0, "Clip the global gradient norm to this; 0 turns clipping off."),
    KEY("bf16", BOOL, ANY, NULL, 0, 0, "Compute in bfloat16 with fp32 master weights."),
    KEY("bf16_attention", ENUM, ANY, "auto|bf16|fp32", 0, 0, "With bf16, the attention kernels: bf16 (vdpbf16ps products on bf16 q, k, v), fp32 (the fp32 kernels), or auto: on the CPU bf16 only where its measured vdpbf16ps peak reaches its fp32 FMA peak, on a GPU bf16 (tensor cores)."),
    KEY("device", ENUM, ANY, "auto|cpu|cuda", 0, 0, "Where training computes: cuda (the GPU of this rank's local index, through the libprimus-cuda.so module), cpu, or auto: the GPU when the module loads and sees one, else the CPU (the log says which and why)."),
    KEY("tf32", BOOL, ANY, NULL, 0, 0, "On a GPU, let fp32 GEMMs use TF32 tensor cores (faster, 10-bit mantissa products); off keeps fp32 arithmetic."),
    KEY("bf16_pack_weights", BOOL, ANY, NULL, 0, 0, "With bf16, keep the layers' weights in the GEMM library's blocked layouts too, as the head's always are: two more bf16 copies (4 bytes a weight) for layer products about 10% faster."),
    KEY("recompute_granularity", ENUM, ANY, "full|selective", 1, 0, "Activation recomputation: full, selective or null (off)."),
    KEY("finetune", BOOL, ANY, NULL, 0, 0, "Load weights only from `load` (no optimizer state, iteration reset to 0)."),
    /* Data. */
    KEY("data_path", STR_OR_LIST, ANY, NULL, 1, 0, "Dataset prefix (MMIDIDX .bin/.idx) or a [weight, prefix, ...] list; a plain text file is read byte by byte."),
    KEY("split", STR, ANY, NULL, 0, 0, "Train,valid,test proportions of the data, e.g. \"969,30,1\"."),
    KEY("tokenizer_type", STR, ANY, NULL, 0, 0, "Tokenizer class (ByteTokenizer, HuggingFaceTokenizer, ...)."),
    KEY("tokenizer_model", STR, ANY, NULL, 1, 0, "Tokenizer file or folder for tokenizers that need one."),
    KEY("mock_data", BOOL, ANY, NULL, 0, 0, "Train on synthetic tokens instead of data_path."),
    KEY("train_data_path", STR_OR_LIST, ANY, NULL, 1, 0, "Training data given apart from validation data (a prefix or a blend); used as data_path with every sample for training (split 100,0,0) when data_path is null."),
    KEY("valid_data_path", STR_OR_LIST, ANY, NULL, 1, 0, "Validation data of its own (a prefix or a [weight, prefix, ...] blend), all of it, with data_path: null and train_data_path (Megatron-LM's data per split); null: validation comes from data_path's split."),
    KEY("test_data_path", STR_OR_LIST, ANY, NULL, 1, 0, "Test data of its own, as valid_data_path, evaluated once over eval_iters batches after the last step; null: data_path's test share, if any."),
    KEY("eod_mask_loss", BOOL, ANY, NULL, 0, 0, "Leave out of the loss the positions whose input is the tokenizer's end-of-document token (Megatron-LM's loss mask: each micro-batch's mean over its other targets); no effect on mock tokens (not split into documents)."),
    /* Checkpoints, evaluation, logging. */
    KEY("save", STR, ANY, NULL, 1, 0, "Folder to write checkpoints to; null: no checkpoints."),
    KEY("load", STR, ANY, NULL, 1, 0, "Folder to resume from; null: start fresh."),
    KEY("save_interval", INT, GE1, NULL, 0, 0, "Steps between checkpoints."),
    KEY("auto_continue_train", BOOL, ANY, NULL, 0, 0, "Resume from the checkpoint `load`'s latest_checkpointed_iteration.txt names, when there is one (set load to the save folder to continue a run)."),
    KEY("no_load_optim", BOOL, ANY, NULL, 1, 0, "A resume takes the weights, iteration and data position from `load` but starts the AdamW moments at zero (said in the log)."),
    KEY("no_load_rng", BOOL, ANY, NULL, 1, 0, "A resume takes this run's seed instead of the checkpoint's random state (the seed; said in the log)."),
    KEY("no_save_optim", BOOL, ANY, NULL, 1, 0, "Leave the optimizer state out of checkpoints (no optim-rank files); a resume of one starts the AdamW moments at zero, with a warning."),
    KEY("no_save_rng", BOOL, ANY, NULL, 1, 0, "Leave the random state (the seed) out of checkpoints; a resume of one takes its own seed, with a warning."),
    KEY("disable_last_saving", BOOL, ANY, NULL, 0, 0, "Do not write the checkpoint after the last step (unless it falls on save_interval)."),
    KEY("eval_interval", INT, GE1, NULL, 0, 0, "Steps between validation runs."),
    KEY("eval_iters", INT, GE0, NULL, 0, 0, "Batches per validation run; 0 turns evaluation off."),
    KEY("log_interval", INT, GE1, NULL, 0, 0, "Steps between progress lines."),
    /* Parallelism. */
    KEY("tensor_model_parallel_size", INT, GE1, NULL, 0, 0, "Tensor-parallel group size."),
    KEY("pipeline_model_parallel_size", INT, GE1, NULL, 0, 0, "Pipeline-parallel stages."),
    KEY("virtual_pipeline_model_parallel_size", INT, GE1, NULL, 1, 0, "Model chunks per pipeline rank (the interleaved 1F1B schedule); null: one."),
    KEY("num_layers_per_virtual_pipeline_stage", INT, GE1, NULL, 1, 0, "Layers per model chunk of the interleaved schedule (another way to set the chunks); null: one chunk a rank."),
    KEY("context_parallel_size", INT, GE1, NULL, 0, 0, "Context-parallel group size: ranks that share each sequence (each holds 2 of its 2N chunks, attention as a ring); seq_length divides by 2N. With data, tensor, pipeline and expert parallel (E and N dividing one another), the distributed optimizer and MoE (the router's losses over the whole sequences); not yet with fine-tuning."),
    KEY("expert_model_parallel_size", INT, GE1, NULL, 0, 0, "Expert-parallel group size: ranks that share out the experts of each MoE layer (a subset of the data-parallel group; divides it and num_experts)."),
    KEY("expert_tensor_parallel_size", INT, GE1, NULL, 1, 0, "MoE with tensor parallelism: null or tensor_model_parallel_size splits each expert's SwiGLU over the tensor-parallel group as the dense MLP; 1 keeps every expert whole on each rank. With expert_model_parallel_size > 1 too: each expert-parallel rank's experts, split or whole."),
    KEY("sequence_parallel", BOOL, ANY, NULL, 1, 0, "With tensor_model_parallel_size > 1: the norms, residual adds and the embedding's output hold 1/T of the rows on each rank (all-gathered before the tensor-parallel blocks, reduce-scattered after them), so their activations take 1/T the memory. seq_length must divide by T. At T = 1 it is turned off with a warning, as Megatron-LM does."),
    KEY("use_distributed_optimizer", BOOL, ANY, NULL, 0, 0, "Shard optimizer state across data-parallel ranks (ZeRO-1)."),
    KEY("overlap_grad_reduce", BOOL, ANY, NULL, 0, 0, "Overlap gradient all-reduce with the backward pass."),
    /* Native keys: primus' own, with no Megatron equivalent. */
    KEY("data_shuffle", BOOL, ANY, NULL, 0, 1, "Shuffle sample order each epoch."),
    KEY("packing", BOOL, ANY, NULL, 0, 1, "Fine-tuning: pack examples into seq_length sequences (attention stays inside each); false: one example per sequence, padded."),
    KEY("chat_template", ENUM, ANY, "default|llama3", 0, 1, "Fine-tuning: how examples become tokens (docs/posttrain.md)."),
    KEY("ckpt_keep", INT, GE0, NULL, 0, 1, "Checkpoints to keep (the newest of this run's lineage; another run's are never counted or removed); 0 keeps all."),
    KEY("overwrite_checkpoints", BOOL, ANY, NULL, 0, 1, "Let a run that starts from scratch write into a `save` folder that holds another run's checkpoints (they are replaced as this run saves the same iterations); false: such a start is an error naming the folder."),
    KEY("async_save", BOOL, ANY, NULL, 0, 1, "Write checkpoints in the background."),
    KEY("pipeline_layer_split", STR_OR_LIST, ANY, NULL, 1, 1, "Layers of each pipeline stage (each model chunk with virtual stages), first to last; null: balanced by parameter count."),
    KEY("ddp_bucket_size", INT, GE1, NULL, 0, 1, "Gradient all-reduce bucket size, in parameters."),
    KEY("metrics_port", INT, 0, 65535, NULL, 0, 1, "Prometheus /metrics port; 0 turns the endpoint off."),
    KEY("metrics_bind", STR, ANY, NULL, 0, 1, "Address the metrics endpoint listens on."),
    KEY("alert_throughput_window_s", FLOAT, 60, 604800, NULL, 0, 1, "Seconds of trailing wall time whose throughput the throughput alert compares a step with."),
    KEY("alert_throughput_fraction", FLOAT, 0, BELOW1, NULL, 0, 1, "The throughput alert fires below this fraction of the trailing window's throughput; 0 turns it off."),
    KEY("fault_tolerance.max_restarts", INT, GE0, NULL, 0, 1, "Restarts the supervisor allows before giving up; with this and hang_timeout_s both 0 the ranks run unsupervised."),
    KEY("fault_tolerance.restart_backoff_s", FLOAT, GE0, NULL, 0, 1, "Seconds to wait before a restart."),
    KEY("fault_tolerance.hang_timeout_s", FLOAT, GE0, NULL, 0, 1, "Seconds without a heartbeat before a rank counts as hung; 0 turns the watchdog off."),
    KEY("fault_tolerance.on_node_loss", ENUM, ANY, "shrink|wait", 0, 1, "Under primus slurm srun, when the node check after a fault finds nodes lost: shrink (go on without them, the same global batch on fewer data-parallel ranks) or wait (restart at the same size once the nodes are back, at most node_wait_timeout_s; then as shrink)."),
    KEY("fault_tolerance.min_nodes", INT, GE1, NULL, 0, 1, "Fewest nodes a shrunk srun job may go on with; fewer left ends the run (exit 3), or requeues an sbatch job without the lost nodes (exit 4)."),
    KEY("fault_tolerance.max_node_failures", INT, GE0, NULL, 0, 1, "Nodes a run may lose in all; one more ends it (exit 3)."),
    KEY("fault_tolerance.node_check_timeout_s", FLOAT, 1, 86400, NULL, 0, 1, "Seconds the node check after a fault (preflight check --host under srun on each node) may take (1 to 86400); a node that has not answered by then counts as lost."),
    KEY("fault_tolerance.node_wait_timeout_s", FLOAT, 1, 604800, NULL, 0, 1, "on_node_loss: wait: seconds to wait for lost nodes to come back (in service in sinfo and passing the node check; 1 to 604800) before going on as shrink."),
    KEY("fault_tolerance.nan_policy", ENUM, ANY, "stop|skip|rollback", 0, 1, "What a NaN/Inf loss does: stop, skip the step, or roll back to the last checkpoint."),
    KEY("fault_tolerance.spike_zscore", FLOAT, GE0, NULL, 0, 1, "Treat a loss this many standard deviations above the recent mean as a spike; 0 turns detection off."),
};

/* ------------------------------------------------------------------------ */
/* Megatron-LM and Primus arguments primus accepts without implementing      */
/* ------------------------------------------------------------------------ */

/* INERT: accepted, no effect here (the run warns once, listing those an
 * experiment sets); INERT_AT: the same at the values in `ok` only.
 * UNSUPPORTED: accepted at the values in `ok` (primus computes exactly
 * that), anything else an error naming the feature. */
#define INERT(k, why) {k, PRM_T_ANY, ANY, NULL, 1, 0, why, PRM_KEY_INERT, NULL}
#define INERT_AT(k, ok, why) {k, PRM_T_ANY, ANY, NULL, 1, 0, why, PRM_KEY_INERT, ok}
#define UNSUP(k, ok, what) {k, PRM_T_ANY, ANY, NULL, 1, 0, what, PRM_KEY_UNSUPPORTED, ok}
#define LOGSVC "a logging or tracking service primus does not run"
#define PROF "another engine's profiler"
#define KERN "a fused-kernel or backend choice of another engine"
#define SCHED "a memory or communication schedule of another engine (same results)"
#define CKPT "another engine's checkpoint format or loader (primus writes safetensors)"
#define DATA "another engine's data loader"
#define ARCH "a model detail primus' Llama-family presets already fix"

static const prm_key_t prm__compat[] = {
    /* Logging, tracking and profiling services. */
    INERT("wandb_*", LOGSVC), INERT("tensorboard_*", LOGSVC), INERT("mlflow_*", LOGSVC),
    INERT("log_avg_*", LOGSVC), INERT("log_*_to_tensorboard", LOGSVC),
    INERT("one_logger_*", LOGSVC), INERT("torch_profiler_*", PROF), INERT("profile_*", PROF),
    INERT("disable_wandb", LOGSVC), INERT("disable_tensorboard", LOGSVC),
    INERT("disable_mlflow", LOGSVC), INERT("enable_one_logger", LOGSVC),
    INERT("stderr_sink_level", LOGSVC), INERT("file_sink_level", LOGSVC),
    INERT("log_throughput", LOGSVC), INERT("log_params_norm", LOGSVC),
    INERT("log_num_zeros_in_grad", LOGSVC), INERT("log_progress", LOGSVC),
    INERT("log_timers_to_tensorboard", LOGSVC), INERT("logging_level", LOGSVC),
    INERT("timing_log_level", LOGSVC), INERT("timing_log_option", LOGSVC),
    INERT("config_logger_dir", LOGSVC), INERT("app_tag_run_name", LOGSVC),
    INERT("app_tag_run_version", LOGSVC), INERT("log_straggler", LOGSVC),
    INERT("use_rocm_mem_info", LOGSVC), INERT("use_rocm_mem_info_iters", LOGSVC),
    INERT("profile", PROF), INERT("use_pytorch_profiler", PROF),
    INERT("disable_profiler_activity_cpu", PROF), INERT("record_memory_history", PROF),
    INERT("memory_snapshot_path", PROF), INERT("iterations_to_skip", PROF),
    INERT("disable_compile_dependencies", KERN), INERT("dump_pp_data", PROF),
    /* Primus-Turbo and other fused kernels. */
    INERT("enable_primus_turbo", KERN), INERT("use_turbo_*", KERN), INERT("turbo_*", KERN),
    INERT("gradient_accumulation_fusion", KERN), INERT("cross_entropy_loss_fusion", KERN),
    INERT("cross_entropy_fusion_impl", KERN), INERT("bias_gelu_fusion", KERN),
    INERT("bias_swiglu_fusion", KERN), INERT("bias_dropout_fusion", KERN),
    INERT("masked_softmax_fusion", KERN), INERT("apply_rope_fusion", KERN),
    INERT("moe_permute_fusion", KERN), INERT("moe_grouped_gemm", KERN),
    INERT("moe_use_legacy_grouped_gemm", KERN), INERT("moe_use_fused_router_with_aux_score", KERN),
    INERT("use_flash_attn", KERN), INERT("attention_backend", KERN),
    INERT("transformer_impl", KERN), INERT("use_te_activation_func", KERN),
    INERT("no_persist_layer_norm", KERN), INERT("persist_layer_norm", KERN),
    INERT("attention_softmax_in_fp32", KERN), INERT("use_legacy_models", KERN),
    INERT("deprecated_use_mcore_models", KERN), INERT("spec", KERN),
    INERT("enable_cuda_graph", KERN), INERT("external_cuda_graph", KERN),
    INERT("cuda_graph_*", KERN), INERT("te_rng_tracker", KERN),
    INERT("gradient_reduce_div_fusion", KERN),
    INERT("clone_scatter_output_in_embedding", KERN), INERT("patch_moe_overlap", KERN),
    INERT("moe_enable_deepep", KERN), INERT("mxfp4_*", KERN),
    INERT("te_precision_config_file", KERN),
    /* Memory and communication schedules (same mathematics). */
    INERT("overlap_param_gather", SCHED), INERT("overlap_param_gather_with_optimizer_step", SCHED),
    INERT("overlap_p2p_comm", SCHED), INERT("align_grad_reduce", SCHED),
    INERT("align_param_gather", SCHED), INERT("ddp_num_buckets", SCHED),
    INERT("ddp_pad_buckets_for_high_nccl_busbw", SCHED), INERT("ddp_average_in_collective", SCHED),
    INERT("tp_comm_*", SCHED),
    INERT("async_tensor_model_parallel_allreduce", SCHED), INERT("defer_embedding_wgrad_compute", SCHED),
    INERT("wgrad_deferral_limit", SCHED), INERT("delay_wgrad_compute", SCHED),
    INERT("moe_shared_expert_overlap", SCHED), INERT("overlap_moe_expert_parallel_comm", SCHED),
    INERT("distributed_backend", SCHED), INERT("distributed_timeout_minutes", SCHED),
    INERT("empty_unused_memory_level", SCHED), INERT("manual_gc", SCHED),
    INERT("manual_gc_interval", SCHED), INERT("manual_gc_eval", SCHED),
    INERT("use_custom_fsdp", SCHED), INERT("use_megatron_fsdp", SCHED),
    INERT("use_torch_fsdp2", SCHED), INERT("data_parallel_sharding_strategy", SCHED),
    INERT("num_distributed_optimizer_instances", SCHED), INERT("use_sharp", SCHED),
    INERT("nccl_communicator_config_path", SCHED), INERT("recompute_method", SCHED),
    INERT("recompute_num_layers", SCHED), INERT("recompute_layer_ids", SCHED),
    INERT("recompute_activations", SCHED), INERT("distribute_saved_activations", SCHED),
    INERT("moe_layer_recompute", SCHED), INERT("pp_warmup", SCHED),
    INERT("optimizer_cpu_offload", SCHED), INERT("use_precision_aware_optimizer", SCHED),
    INERT("account_for_embedding_in_pipeline_split", SCHED),
    INERT("account_for_loss_in_pipeline_split", SCHED), INERT("use_cpu_initialization", SCHED),
    INERT("perform_initialization", SCHED), INERT("barrier_with_L1_time", SCHED),
    INERT("check_for_nan_in_loss_and_grad", SCHED), INERT("check_for_spiky_loss", SCHED),
    INERT("check_for_large_grads", SCHED), INERT("exit_signal_handler", SCHED),
    INERT("accumulate_allreduce_grads_in_fp32", SCHED), INERT("grad_reduce_in_bf16", SCHED),
    INERT("fp8_*", "FP8 recipe details (fp8 itself is refused)"),
    INERT("no_fp8_weight_transpose_cache", "FP8 recipe details (fp8 itself is refused)"),
    INERT("first_last_layers_bf16", "FP8 recipe details (fp8 itself is refused)"),
    /* Checkpoint formats and loaders. */
    INERT_AT("ckpt_format", "torch|torch_dist|null", CKPT), INERT("ckpt_fully_parallel_save", CKPT),
    INERT("ckpt_fully_parallel_load", CKPT), INERT("ckpt_assume_constant_structure", CKPT),
    INERT("dist_ckpt_strictness", CKPT), INERT("auto_detect_ckpt_format", CKPT),
    INERT("use_dist_ckpt", CKPT), INERT("use_checkpoint_args", CKPT),
    INERT("exit_on_missing_checkpoint", CKPT), INERT("use_tokenizer_model_from_checkpoint_args", CKPT),
    INERT("use_persistent_ckpt_worker", CKPT), INERT("save_retain_interval", CKPT),
    INERT("use_checkpoint_opt_param_scheduler", CKPT), INERT("override_opt_param_scheduler", CKPT),
    /* Data loaders. */
    INERT("num_workers", DATA), INERT("dataloader_type", DATA), INERT("data_sharding", DATA),
    INERT("mmap_bin_files", DATA), INERT("data_cache_path", DATA),
    INERT("num_dataset_builder_threads", DATA), INERT("create_attention_mask_in_dataloader", DATA),
    INERT("multiprocessing_context", DATA),
    /* Model details the presets fix (primus checks the ones that matter). */
    INERT("group_query_attention", ARCH), INERT("trainable", ARCH),
    INERT("kv_lora_rank", "an MLA dimension (used only with multi_latent_attention)"),
    INERT("qk_head_dim", "an MLA dimension (used only with multi_latent_attention)"),
    INERT("qk_pos_emb_head_dim", "an MLA dimension (used only with multi_latent_attention)"),
    INERT("v_head_dim", "an MLA dimension (used only with multi_latent_attention)"),
    INERT("rotary_scaling_factor", "a YaRN detail (used only with rope_type: yarn)"),
    INERT("mscale", "a YaRN detail (used only with rope_type: yarn)"),
    INERT("mscale_all_dim", "a YaRN detail (used only with rope_type: yarn)"),
    INERT("moe_router_dtype", "router precision (primus' router is fp32 with a double softmax)"),
    INERT("moe_per_layer_logging", LOGSVC), INERT("moe_router_bias_update_rate", ARCH),
    INERT("mtp_loss_scaling_factor", "used only with mtp_num_layers"),
    INERT("vocab_extra_ids", ARCH), INERT("tiktoken_*", ARCH),
    INERT("use_rotary_position_embeddings", ARCH), INERT("add_position_embedding", ARCH),
    INERT("fp32_residual_connection", "residual precision (primus keeps fp32 residuals)"),
    INERT("moe_token_drop_policy", ARCH), INERT("moe_pad_expert_input_to_capacity", ARCH),
    INERT("use_sink_attention", ARCH), INERT("sink_*", ARCH),
    /* Changes the mathematics: only the value primus computes is accepted. */
    UNSUP("fp8", "null", "FP8 training (this host has no FP8 arithmetic; primus computes in fp32 or bf16)"),
    UNSUP("fp4", "null", "FP4 training (primus computes in fp32 or bf16)"),
    UNSUP("fp16", "false", "fp16 training with loss scaling (primus computes in fp32 or bf16)"),
    UNSUP("multi_latent_attention", "false", "multi-latent attention (MLA, DeepSeek V2/V3)"),
    UNSUP("q_lora_rank", "null", "multi-latent attention (MLA, DeepSeek V2/V3)"),
    UNSUP("mtp_num_layers", "null|0", "multi-token prediction (MTP)"),
    UNSUP("position_embedding_type", "rope", "position embeddings other than RoPE"),
    UNSUP("rope_type", "null|rope", "RoPE variants (YaRN)"),
    UNSUP("normalization", "RMSNorm", "LayerNorm (primus' engine uses RMSNorm)"),
    UNSUP("apply_layernorm_1p", "false", "zero-centred (1 + gamma) norms"),
    UNSUP("qk_l2_norm", "false", "L2 normalisation of queries and keys"),
    UNSUP("swiglu", "true", "MLPs other than SwiGLU"),
    UNSUP("squared_relu", "false", "squared-ReLU MLPs"),
    UNSUP("quick_geglu", "false", "GeGLU MLPs"),
    UNSUP("openai_gelu", "false", "GeLU MLPs"),
    UNSUP("add_bias_linear", "false", "biases on the linear layers"),
    UNSUP("hidden_dropout", "0", "dropout (primus trains without it)"),
    UNSUP("attention_dropout", "0", "dropout (primus trains without it)"),
    UNSUP("apply_residual_connection_post_layernorm", "false", "post-norm residual connections"),
    UNSUP("apply_query_key_layer_scaling", "false", "query-key layer scaling"),
    UNSUP("rotary_percent", "1", "partial rotary embeddings"),
    UNSUP("rotary_interleaved", "false", "interleaved rotary embeddings"),
    UNSUP("rotary_seq_len_interpolation_factor", "null|1", "RoPE position interpolation"),
    UNSUP("window_size", "null", "sliding-window attention"),
    UNSUP("window_attn_skip_freq", "null", "sliding-window attention"),
    UNSUP("softmax_type", "vanilla", "attention sinks (gpt-oss)"),
    UNSUP("is_hybrid_model", "false", "Mamba and hybrid layers"),
    UNSUP("hybrid_override_pattern", "null", "Mamba and hybrid layers"),
    UNSUP("hybrid_attention_ratio", "null|0", "Mamba and hybrid layers"),
    UNSUP("hybrid_mlp_ratio", "null|0", "Mamba and hybrid layers"),
    UNSUP("mamba_*", "null", "Mamba and hybrid layers"),
    UNSUP("no_rope_freq", "null", "layers without RoPE (Llama 4)"),
    UNSUP("moe_router_score_function", "softmax", "sigmoid routing scores"),
    UNSUP("moe_router_pre_softmax", "false", "routing weights from a softmax over every expert (primus renormalises the top k)"),
    UNSUP("moe_router_topk_scaling_factor", "null|1", "scaled routing weights"),
    UNSUP("moe_router_enable_expert_bias", "false", "auxiliary-loss-free expert bias"),
    UNSUP("moe_router_num_groups", "null", "group-limited routing"),
    UNSUP("moe_router_group_topk", "null", "group-limited routing"),
    UNSUP("moe_input_jitter_eps", "null", "router input jitter"),
    UNSUP("moe_expert_tensor_parallel_size", "null|1", "this spelling of expert tensor parallelism (use expert_tensor_parallel_size)"),
    UNSUP("num_virtual_stages_per_pipeline_rank", "null", "this spelling of virtual stages (use virtual_pipeline_model_parallel_size)"),
    UNSUP("decoder_first_pipeline_num_layers", "null", "uneven first/last pipeline stages (use pipeline_layer_split)"),
    UNSUP("decoder_last_pipeline_num_layers", "null", "uneven first/last pipeline stages (use pipeline_layer_split)"),
    UNSUP("pipeline_model_parallel_layout", "null", "pipeline layouts (use pipeline_layer_split)"),
    UNSUP("calculate_per_token_loss", "false", "per-token loss averaging across micro-batches"),
    UNSUP("optimizer", "adam", "optimizers other than AdamW"),
    UNSUP("lr_warmup_fraction", "null", "warm-up given as a fraction (use lr_warmup_iters)"),
    UNSUP("lr_warmup_samples", "0", "sample-based schedules (use lr_warmup_iters)"),
    UNSUP("lr_decay_samples", "null", "sample-based schedules (use lr_decay_iters)"),
    UNSUP("train_samples", "null", "sample-based schedules (use train_iters)"),
    UNSUP("lr_warmup_init", "0", "warm-up from a non-zero learning rate"),
    UNSUP("start_weight_decay", "null", "weight-decay schedules"),
    UNSUP("end_weight_decay", "null", "weight-decay schedules"),
    UNSUP("weight_decay_incr_style", "constant", "weight-decay schedules"),
    UNSUP("head_lr_mult", "1", "a separate learning rate for the head"),
    UNSUP("decoupled_lr", "null", "a separate learning rate for the embedding and head"),
    UNSUP("rampup_batch_size", "null", "batch-size ramp-up"),
    UNSUP("reset_position_ids", "false", "positions restarting at each document"),
    UNSUP("reset_attention_mask", "false", "attention masked at document boundaries"),
    UNSUP("init_method_xavier_uniform", "false", "Xavier-uniform initialisation"),
    UNSUP("vocab_file", "null", "GPT-2 vocab/merge files (give tokenizer_model a folder or an id)"),
    UNSUP("merge_file", "null", "GPT-2 vocab/merge files (give tokenizer_model a folder or an id)"),
    UNSUP("data_args_path", "null", "data arguments read from a file"),
    UNSUP("per_split_data_args_path", "null", "data arguments read from a file"),
};
#undef INERT
#undef INERT_AT
#undef UNSUP

const prm_key_t *prm_schema_compat_keys(int *count) {
  if (count) *count = (int)(sizeof prm__compat / sizeof prm__compat[0]);
  return prm__compat;
}

/* A compat entry "wandb_*" or "log_*_to_tensorboard" matches by its one
 * '*' (prefix and suffix); a plain entry by name. */
static int prm__compat_match(const char *pattern, const char *key) {
  const char *star = strchr(pattern, '*');
  if (!star) return prm_optname_eq(pattern, key);
  size_t pre = (size_t)(star - pattern), suf = strlen(star + 1), n = strlen(key);
  return n > pre + suf && !strncmp(pattern, key, pre) && !strcmp(key + n - suf, star + 1);
}

const prm_key_t *prm_schema_keys(int *count) {
  if (count) *count = (int)(sizeof prm__keys / sizeof prm__keys[0]);
  return prm__keys;
}

const prm_key_t *prm_schema_find(const char *key) {
  int n;
  const prm_key_t *k = prm_schema_keys(&n);
  for (int i = 0; i < n; i++)
    if (prm_optname_eq(k[i].key, key)) return &k[i];
  k = prm_schema_compat_keys(&n);
  for (int i = 0; i < n; i++) /* exact names first: "log_avg_*" vs a listed name */
    if (!strchr(k[i].key, '*') && prm_optname_eq(k[i].key, key)) return &k[i];
  for (int i = 0; i < n; i++)
    if (strchr(k[i].key, '*') && prm__compat_match(k[i].key, key)) return &k[i];
  return NULL;
}

static const char *const prm__type_names[] = {"int",  "float",          "bool",
                                              "string", "enum",         "string or list",
                                              "int or list", "map", "any"};
_Static_assert(sizeof prm__type_names / sizeof prm__type_names[0] == PRM_T__COUNT,
               "type name table and prm_type_t disagree");

const char *prm_type_name(prm_type_t t) {
  return (unsigned)t < PRM_T__COUNT ? prm__type_names[t] : "?";
}

/* ------------------------------------------------------------------------ */
/* Validation                                                                */
/* ------------------------------------------------------------------------ */

int prm__schema_range_ok(const prm_key_t *k, double v) {
  if (!(k->min < k->max)) return 1;
  return v >= k->min && v <= k->max;
}

static void prm__range_text(const prm_key_t *k, char *buf, size_t n) {
  if (k->max >= NOMAX)
    snprintf(buf, n, ">= %g", k->min);
  else if (k->max == BELOW1)
    snprintf(buf, n, "in [%g, 1)", k->min);
  else
    snprintf(buf, n, "in [%g, %g]", k->min, k->max);
}

static const char *prm__expected(const prm_key_t *k, char *buf, size_t n) {
  switch (k->type) {
  case PRM_T_INT: return "an integer";
  case PRM_T_FLOAT: return "a number";
  case PRM_T_BOOL: return "true or false";
  case PRM_T_STR: return "a string";
  case PRM_T_STR_OR_LIST: return "a string or a list of strings";
  case PRM_T_INT_OR_LIST: return "an integer or a list of 0/1 per layer";
  case PRM_T_MAP: return "a map";
  case PRM_T_ENUM:
    snprintf(buf, n, "one of %s%s", k->choices, k->nullable ? " or null" : "");
    return buf;
  default: return "?";
  }
}

static int prm__type_err(const prm_node_t *v, const prm_key_t *k, prm_err_t *err) {
  char where[1100], exp[256];
  const char *what = prm__expected(k, exp, sizeof exp);
  if (v->kind == PRM_NODE_SCALAR)
    return prm_errf(err, PRM_ECONFIG, "%s: %s: expected %s, got \"%s\"",
                    prm__origin(v, where, sizeof where), k->key, what, v->str);
  const char *got = v->kind == PRM_NODE_NULL ? "null"
                    : v->kind == PRM_NODE_MAP ? "a map" : "a list";
  return prm_errf(err, PRM_ECONFIG, "%s: %s: expected %s, got %s",
                  prm__origin(v, where, sizeof where), k->key, what, got);
}

static void prm__set_text(prm_node_t *v, const char *text, int quoted) {
  if (strcmp(v->str, text)) {
    free(v->str);
    v->str = prm_xstrdup(text);
  }
  v->quoted = quoted;
}

/* Checks one value against its key and rewrites it to the key's spelling. */
static int prm__check_value(prm_node_t *v, const prm_key_t *k, prm_err_t *err) {
  char where[1100], range[128];
  if (v->kind == PRM_NODE_NULL) return k->nullable ? 0 : prm__type_err(v, k, err);
  if (k->type == PRM_T_MAP) return v->kind == PRM_NODE_MAP ? 0 : prm__type_err(v, k, err);
  if (k->type == PRM_T_STR_OR_LIST && v->kind == PRM_NODE_LIST) {
    for (int i = 0; i < v->n; i++) {
      if (v->items[i]->kind != PRM_NODE_SCALAR) return prm__type_err(v->items[i], k, err);
      v->items[i]->quoted = 1;
    }
    return 0;
  }
  if (k->type == PRM_T_INT_OR_LIST && v->kind == PRM_NODE_LIST) {
    for (int i = 0; i < v->n; i++) {
      const prm_node_t *x = v->items[i];
      if (x->kind != PRM_NODE_SCALAR || (strcmp(x->str, "0") && strcmp(x->str, "1")))
        return prm__type_err(x, k, err);
    }
    return 0;
  }
  if (v->kind != PRM_NODE_SCALAR) return prm__type_err(v, k, err);
  switch (k->type) {
  case PRM_T_INT_OR_LIST:
  case PRM_T_INT: {
    int64_t i;
    if (prm_parse_i64(v->str, &i)) return prm__type_err(v, k, err);
    if (!prm__schema_range_ok(k, (double)i)) {
      prm__range_text(k, range, sizeof range);
      return prm_errf(err, PRM_ECONFIG, "%s: %s: must be %s, got %s",
                      prm__origin(v, where, sizeof where), k->key, range, v->str);
    }
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)i);
    prm__set_text(v, buf, 0);
    return 0;
  }
  case PRM_T_FLOAT: {
    double d;
    if (prm_parse_f64(v->str, &d) || isinf(d)) return prm__type_err(v, k, err);
    if (!prm__schema_range_ok(k, d)) {
      prm__range_text(k, range, sizeof range);
      return prm_errf(err, PRM_ECONFIG, "%s: %s: must be %s, got %s",
                      prm__origin(v, where, sizeof where), k->key, range, v->str);
    }
    v->quoted = 0;
    return 0;
  }
  case PRM_T_BOOL: {
    int b;
    if (prm_parse_bool(v->str, &b)) return prm__type_err(v, k, err);
    prm__set_text(v, b ? "true" : "false", 0);
    return 0;
  }
  case PRM_T_ENUM: {
    size_t n = strlen(v->str);
    for (const char *c = k->choices; c;) {
      const char *bar = strchr(c, '|');
      size_t len = bar ? (size_t)(bar - c) : strlen(c);
      if (len == n && !strncmp(c, v->str, n)) {
        v->quoted = 1;
        return 0;
      }
      c = bar ? bar + 1 : NULL;
    }
    return prm__type_err(v, k, err);
  }
  default: /* STR, STR_OR_LIST given as one string */
    v->quoted = 1;
    return 0;
  }
}

static int prm__is_group(const char *prefix) {
  int n;
  const prm_key_t *k = prm_schema_keys(&n);
  size_t len = strlen(prefix);
  for (int i = 0; i < n; i++)
    if (!strncmp(k[i].key, prefix, len) && k[i].key[len] == '.') return 1;
  return 0;
}

static int prm__unknown(const prm_node_t *at, const char *full, prm_err_t *err) {
  int n, nc;
  const prm_key_t *k = prm_schema_keys(&n), *c = prm_schema_compat_keys(&nc);
  const char **names = prm_xmalloc(sizeof(char *) * (size_t)(n + nc));
  int m = 0;
  for (int i = 0; i < n; i++) names[m++] = k[i].key;
  for (int i = 0; i < nc; i++)
    if (!strchr(c[i].key, '*')) names[m++] = c[i].key;
  const char *best = prm_suggest(full, names, m);
  char where[1100];
  int rc;
  if (best)
    rc = prm_errf(err, PRM_ECONFIG, "%s: unknown key \"%s\" (did you mean \"%s\"?)",
                  prm__origin(at, where, sizeof where), full, best);
  else
    rc = prm_errf(err, PRM_ECONFIG, "%s: unknown key \"%s\"",
                  prm__origin(at, where, sizeof where), full);
  free(names);
  return rc;
}

/* Whether v is one of the values in ok ("false|null|0"): null by the word
 * null, booleans and numbers by value, anything else by its text. */
static int prm__neutral(const prm_node_t *v, const char *ok) {
  char *list = prm_xstrdup(ok), *save = NULL;
  int hit = 0;
  for (char *w = strtok_r(list, "|", &save); w && !hit; w = strtok_r(NULL, "|", &save)) {
    if (!strcmp(w, "null")) {
      hit = v->kind == PRM_NODE_NULL;
      continue;
    }
    if (v->kind != PRM_NODE_SCALAR) continue;
    int a, b;
    double x, y;
    if (!prm_parse_bool(w, &a) && !prm_parse_bool(v->str, &b) && (!strcmp(w, "true") || !strcmp(w, "false")))
      hit = a == b;
    else if (!prm_parse_f64(w, &x) && !prm_parse_f64(v->str, &y))
      hit = x == y;
    else
      hit = !strcmp(w, v->str);
  }
  free(list);
  return hit;
}

static int prm__check_compat(const prm_node_t *v, const prm_key_t *k, const char *full,
                             prm_err_t *err) {
  if (!k->ok || prm__neutral(v, k->ok)) return 0;
  char where[1100];
  const char *shown = v->kind == PRM_NODE_SCALAR ? v->str : v->kind == PRM_NODE_NULL ? "null" : "a list or map";
  if (k->cls == PRM_KEY_INERT)
    return prm_errf(err, PRM_ECONFIG, "%s: %s: got \"%s\": accepted as %s only at %s",
                    prm__origin(v, where, sizeof where), full, shown, k->help, k->ok);
  return prm_errf(err, PRM_ECONFIG,
                  "%s: %s: got \"%s\": %s is not implemented in primus' engine (it computes "
                  "with %s)",
                  prm__origin(v, where, sizeof where), full, shown, k->help, k->ok);
}

static int prm__check_map(prm_node_t *map, const char *prefix, prm__problems_t *p) {
  int added = 0;
  for (int i = 0; i < map->n; i++) {
    prm_node_t *v = map->items[i];
    char *full = prefix ? prm_xasprintf("%s.%s", prefix, map->keys[i])
                        : prm_xstrdup(map->keys[i]);
    const prm_key_t *k = prm_schema_find(full);
    prm_err_t e = {0};
    int rc;
    if (k && k->cls != PRM_KEY_RUN)
      rc = prm__check_compat(v, k, full, &e);
    else if (k && !strcmp(k->key, full))
      rc = prm__check_value(v, k, &e);
    else if (prm__is_group(full) && v->kind == PRM_NODE_MAP) {
      added += prm__check_map(v, full, p);
      rc = 0;
    } else if (prm__is_group(full)) {
      char where[1100];
      rc = prm_errf(&e, PRM_ECONFIG, "%s: %s: expected a map of %s.* keys",
                    prm__origin(v, where, sizeof where), full, full);
    } else
      rc = prm__unknown(v, full, &e);
    free(full);
    if (rc) {
      prm__problem_add(p, &e);
      added++;
    }
  }
  return added;
}

int prm__schema_check(prm_node_t *keys, prm__problems_t *p) {
  if (!keys || keys->kind != PRM_NODE_MAP) return 0;
  return prm__check_map(keys, NULL, p);
}

/* ------------------------------------------------------------------------ */
/* Problems                                                                  */
/* ------------------------------------------------------------------------ */

void prm__problem_add(prm__problems_t *p, const prm_err_t *e) {
  prm_sb_appendf(&p->lines, "%s\n", e->msg);
  if (p->n++ == 0) p->code = e->code ? e->code : PRM_ECONFIG;
}

int prm__problems_finish(prm__problems_t *p, prm_err_t *err) {
  if (p->n == 0) {
    prm_sb_free(&p->lines);
    return 0;
  }
  const char *text = prm_sb_str(&p->lines);
  size_t len = strlen(text);
  int rc;
  if (p->n == 1) {
    rc = prm_errf(err, p->code, "%.*s", (int)(len ? len - 1 : 0), text);
  } else {
    char head[64];
    snprintf(head, sizeof head, "%d problems:\n", p->n);
    size_t room = err ? sizeof err->msg - strlen(head) - 1 : 0;
    if (len - 1 <= room) {
      rc = prm_errf(err, PRM_ECONFIG, "%s%.*s", head, (int)(len - 1), text);
    } else {
      /* The message holds what fits; the log has every line. */
      int shown = 0;
      size_t cut = 0;
      for (const char *nl = text; (nl = strchr(nl, '\n')); nl++) {
        size_t end = (size_t)(nl - text);
        if (end + 48 > room) break;
        cut = end;
        shown++;
      }
      for (const char *s = text; *s;) {
        const char *nl = strchr(s, '\n');
        prm_log(PRM_LOG_ERROR, "%.*s", (int)(nl - s), s);
        s = nl + 1;
      }
      rc = prm_errf(err, PRM_ECONFIG, "%s%.*s\n... and %d more (every one is logged above)", head,
                    (int)cut, text, p->n - shown);
    }
  }
  prm_sb_free(&p->lines);
  p->n = 0;
  return rc;
}
