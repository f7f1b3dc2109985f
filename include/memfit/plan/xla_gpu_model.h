// memfit/plan/xla_gpu_model.h - a program before XLA optimized it (lowered.as_text(dialect="hlo")), turned
// into the buffers XLA:GPU will materialize, so that the buffer model and heap can plan it.
//
// What it models of XLA:GPU's pipeline, and how closely:
//   - calls inlined (call_inliner.cc), get-tuple-element of a tuple read directly and dead code removed
//     (tuple_simplifier.cc, hlo_dce.cc);
//   - fusion (xla/service/gpu/transforms/priority_fusion.cc, instruction_fusion.cc): elementwise ops,
//     broadcasts, reshapes, transposes, converts, slices, pads, concatenates, iotas and gathers fuse into
//     their consumers and get no buffer; a cheap one several fusions read is fused into all of them or
//     written once as priority fusion decides, the most profitable first, weighing the traffic and the
//     kernel launch saved (gpu_performance_model_base.h; readers that meet in one fusion count once, a
//     fused reader counts its own readers); expensive ones (transcendentals, divisions:
//     HloInstruction::IsExpensive) with several consumers keep one buffer; a fusion's operands come in the
//     order XLA's fusion appends them, which decides whose memory its result may take;
//   - library calls and fusion roots get a buffer: dots and convolutions (cuBLAS, cuDNN, Triton GEMM, with
//     one elementwise epilogue that reads only parameters and their broadcasts - a bias, a scale, a
//     convert - folded into the GEMM's output, triton_tiling_propagation.cc; not a residual sum, nor a
//     transpose moving a batched product's batch; a convolution's bias and then a relu no one else reads,
//     cudnn_fused_conv_rewriter.cc), reductions, scatters, sorts, custom calls, collectives, loops and calls;
//     a convolution (a cuDNN call) takes no producer into its operands, and what it reads is written once
//     for all its readers (priority fusion fuses a producer into all of its readers or none); a
//     reduce-window (a pool, its gradient) is loop-fusible, an expensive producer (gpu_fusible.cc);
//   - a GEMM takes in only the producers XLA's GemmFusion finds worth it (triton_tiling_propagation.cc):
//     never a narrowing cast - a weight's bf16 copy in mixed precision is a buffer of its own, read by the
//     forward and the backward GEMMs - nor a reshape merging dimensions a transpose separated; a value it
//     cannot take in that other fusions recompute (a norm's rows) is written for it just before it
//     ("<value>.for.<gemm>"), a value only GEMMs read is one buffer they share;
//   - algebraic simplification: add(A, scatter-add(zeros, ...)) becomes scatter-add(A, ...), a sum
//     over a dot's batch dimensions becomes the dot that contracts them, a reduction over dimensions of
//     size 1 a reshape (HandleReduce), and a floating-point division by a constant a (cheap)
//     multiplication by its inverse (algebraic_simplifier.cc, HandleDivide);
//   - a small value one fusion recomputes per element of a broadcast (a loss's per-row division read by the
//     [rows, vocabulary] gradient) is written once where 5% of that compute - what shows over a
//     memory-bound kernel's traffic in XLA's performance model - outweighs the launch fusing saves;
//   - a sum to a scalar of at most 16,384 elements runs as one thread block (reduction_utils.cc): its
//     producer is written by a kernel of its own where its compute on one SM would cost more than the
//     launch saved (a loss's per-token log-likelihood, so the logits die at the backward pass's start);
//   - a norm's normalized rows several fusions read end a Triton fusion and are written once
//     (SoftmaxRewriterTriton, priority fusion's all-or-none), also where a GEMM takes them in - unless a
//     pool over a middle dimension lays the stream out transposed (GpuLayoutAssignment's row reductions;
//     the layout itself is not modeled, only whether such a pool reads a norm's output);
//   - sibling multi-output fusion (multi_output_fusion.cc, after priority fusion; src/plan/
//     xla_gpu_multi_output_fusion.cc): fusions reading the same buffer whose loops agree, that do not read
//     one another, become one kernel with several outputs (up to 64 operands and outputs, 8 reductions) - a
//     loss's log-likelihood written with the backward pass's first division, an MLP's activation with its
//     input gradient - so what they read dies where the first of them needs it (the producer-consumer kind
//     is not modeled);
//   - layout: a summed dot read through a transpose is written once in the dot's order; an elementwise
//     fusion reading it is XLA's transpose fusion, whose results take no operand's memory
//     (buffer_sharing.cc, FusionCanShareBufferHint), and a new value of a donated argument it writes is
//     copied over the argument just before the root (remove_unneeded_donation_copies); a transpose no
//     fusion reads is a copy (a layout change). Other layouts cost no copies (approximated);
//   - whatever a tuple, a loop, a call, an optimization barrier (jax.checkpoint) or the program's result
//     takes is materialized, as XLA must - a reshape of a buffer as a bitcast of it (ReshapeIsBitcast), a
//     loop's stacked microbatches the argument's memory;
//   - host offload (convert_memory_placement_to_internal_annotations.cc, host_offloader.cc): a value
//     annotated to the pinned host is a host buffer (host_temp), forwarded as host memory through bitcasts,
//     tuples and barriers, and brought back into a device buffer of its own;
//   - the schedule: XLA's DefaultMemoryScheduler runs its list, DFS and post-order schedulers and keeps the
//     one its estimate finds smallest, the list's on a tie (hlo_memory_scheduler.cc); plan_hlo plans the
//     program's post order (JAX prints one; a StableHLO program is put in XLA's) and list_scheduled()'s,
//     and keeps the smaller by this model's buffers. Run exactly as XLA runs them (last-in ties, partial
//     priority updates, over multi-output fusion units) the two schedulers put 18 of 27 programs within 5%,
//     against 22 of 27 here (scripts/xla_table.py, 2026-12-02).
//     What the largest misses are (measured on the H200, 2026-12-04; gpu/RESULTS.md): for
//     gpt_mixed_donate_remat_full_b16 XLA kept its DFS schedule. Its log gives list 6.76 GiB, DFS 6.76 GiB,
//     post order 7.93 GiB; scheduler_estimate_bytes() (buffer_model.h) over XLA's graph gives all three
//     (arguments counted as hlo_live_range.cc counts them, host values not) and XLA's choice: the DFS order,
//     by 8 bytes of 7.26 GB (HloPlan.XlasMemorySchedulerEstimateIsReproduced, with the offload program's and
//     fp32 full remat's logged figures). The buffer assignment that follows needs 3.56 GB of temp for the
//     list order (XLA's ListScheduler's own decisions, its VLOG(2), reproduced to the byte by
//     list_scheduled() over XLA's graph), 5.10 GB for the DFS order XLA kept. dfs_scheduled() over XLA's
//     graph as dumped before scheduling (optimization barriers and donation copies still in) gives the
//     compiled order within 0.3 places per instruction and its temp within 0.1% (test
//     HloPlan.XlasCompiledOrderIsItsDfsSchedulersOverTheGraphItScheduled). The latency-hiding scheduler,
//     which XLA runs next, does not move it (compiled with it disabled, the order and the temp are the
//     same), nor GPT-2's dimensions'; it does move the offload program's (the list order XLA kept there,
//     254 places per instruction on average: its asynchronous copies to the host). plan_hlo does not choose
//     by XLA's estimate: over the compiled graphs it shows that XLA kept its post order for most GPT steps
//     (HloPlan.XlaKeptThePostOrderOfAPlainGptStep), and this model's post order can hold more than XLA's
//     (GPT's full remat at batch 16: 8.8 GB against XLA's DFS 5.1 GB; its estimate 9.3 GB against XLA's
//     8.5 GB for the post order) while its list order needs what XLA's post order does. Chosen by the
//     estimate among the three, 24 of 27 programs come within 5%, against 25 by the smaller of the two
//     here (2026-12-07, with sibling multi-output fusion; 23 and 24 before it: MLP's full remat goes to
//     DFS and -10.6%). DFS over this model's graph - whose fan-out differs from XLA's graph - needs 9.2 GB
//     for GPT's full remat at batch 16, not 5.1; the range's top (the post order) covers it.
//   - then XLA's latency-hiding scheduler, over a program that copies to or from the host
//     (latency_hiding_scheduled, src/plan/xla_gpu_latency_hiding.cc): bottom-up, each copy a start and a
//     done 5000 units apart, ReadySetLt's rules; the copy to the host is taken just before the backward pass
//     reads the value back (so the device holds it until then) and each copy's window is filled with what
//     no copy waits on - later layers' weight gradients, whose inputs then live to the end of the backward
//     pass. Over XLA's own compiled graph of the offload program it lands within 3% of XLA's temp from the
//     list order (-64% without it); over this model's graph +1.7% (+9.0% before sibling multi-output fusion
//     computed the GELU with its input gradient). Costs are a roofline x 2, read from the compiled program's
//     windows; the scheduler's memory limit comes from the GPU planned for
//     (HloPlanOptions::device_memory_bytes).
// The result is a prediction for an H100/H200-class GPU; the measured error on the shared programs is in
// the README's table.
#pragma once

#include "memfit/core/status.h"
#include "memfit/program/hlo_module.h"

namespace memfit {

// True for a module as JAX lowers it (no schedule): what `memfit hlo` runs through the model first.
bool is_lowered_module(const HloModule& module);

// The module with only the instructions XLA:GPU materializes; each keeps its shape and op name, and reads
// the materialized values its fused operands were computed from.
// In the program's own order.
Expected<HloModule> model_xla_gpu(HloModule lowered);

// XLA's SPMD partitioning of a program sharded over several devices (src/plan/xla_spmd_partitioner.cc,
// after xla/service/spmd/spmd_partitioner.cc): the entry becomes one device's program, each array its
// share, with the collectives between the shares (all-gather, all-reduce, reduce-scatter) where a value is
// read with another sharding; sets module.partitioned and module.partition_notes (what ran whole). Calls are
// partitioned once inlined (model_xla_gpu runs this after inlining). Nothing but the flag changes when no
// sharding splits an array. An error only for more than 64 device axes.
Status partition_for_each_device(HloModule& lowered);

// XLA:GPU's SubByteNormalization(SET_ELEMENT_SIZE) (xla/hlo/transforms/simplifiers/sub_byte_normalization.cc,
// run by gpu_compiler.cc before layout assignment, entry parameters and results included): arrays of 4-bit
// types (s4, u4, f4e2m1fn) are packed two to a byte. A lowered program has no layouts to say so; a compiled
// one's E(4) is read as written. model_xla_gpu runs this and alias_buffer_donors first.
void pack_four_bit_types(HloModule& lowered);

// XLA's OptimizeInputOutputBufferAlias (xla/service/optimize_input_output_buffer_alias.cc) for the donated
// arguments JAX names no output for (HloModule::buffer_donors): per memory space, donors and outputs not yet
// aliased, each sorted largest first, are paired greedily where their sizes are equal, as input_output_alias
// entries. Sizes are the arrays' whole sizes: XLA compares each device's share, the same pairing when a new
// value takes its old value's shape and sharding (an optimizer's update).
void alias_buffer_donors(HloModule& lowered);

// The same buffers in the order XLA's ListScheduler would run them (frees the most bytes first).
HloModule list_scheduled(HloModule modeled);
// ... and in the order of XLA's DFSMemoryScheduler (a post order, widest fan-out first).
HloModule dfs_scheduled(HloModule modeled);
// What XLA:GPU's latency-hiding scheduler makes of a scheduled module that copies values to or from the host
// (src/plan/xla_gpu_latency_hiding.cc): each copy's window filled with whatever does not wait on it - a
// training step's later weight gradients - so the device holds more than the memory scheduler's order.
// Computations that copy nothing keep their order. `device_memory_bytes`: the GPU's memory, from which
// XLA derives the scheduler's limit (xla_scheduler_memory_limit); past half of it the scheduler weighs
// memory too.
HloModule latency_hiding_scheduled(HloModule scheduled, uint64_t device_memory_bytes);
// GetSchedulerMemoryLimit (gpu_hlo_schedule.cc): 95% of (80% of the device less the module's arguments and
// outputs).
uint64_t xla_scheduler_memory_limit(const HloModule& module, uint64_t device_memory_bytes);

// XLA's copy insertion for donated arguments (xla/service/copy_insertion.cc: AddCopiesForAliasedInputOutputs
// before scheduling, RemoveUnnecessaryCopies again once the schedule is fixed, as gpu_compiler.cc's
// post-scheduling copy insertion runs it). Before scheduling, every reader of a donated parameter that a new
// value is written over reads a copy of it instead (the scheduler sees the copy's bytes). Once the order is
// fixed, a copy is removed where every reader runs before the op that writes the new value (or is it); where
// one runs after (the backward pass reading a weight its update already overwrote), the copy stays, live
// from the first reader to the last. XLA's compiled modules keep such copies: gpt_fp32_donate_remat_full
// eight of wo, mlp_vmap_grads_b128 two. A new value its writer cannot write over the argument (a transpose
// fusion) is first given its own buffer, copied over the argument just before the root.
void copy_donated_parameters(HloModule& modeled);
void remove_unneeded_donation_copies(HloModule& scheduled);

}  // namespace memfit
