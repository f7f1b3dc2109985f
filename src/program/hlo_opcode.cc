#include "memfit/program/hlo_opcode.h"

#include <array>
#include <string>
#include <unordered_map>

namespace memfit {
namespace {

struct Named {
  HloOpcode opcode;
  std::string_view name;
};

constexpr Named kNames[] = {
    {HloOpcode::kAbs, "abs"},
    {HloOpcode::kAdd, "add"},
    {HloOpcode::kAddDependency, "add-dependency"},
    {HloOpcode::kAfterAll, "after-all"},
    {HloOpcode::kAllGather, "all-gather"},
    {HloOpcode::kAllGatherDone, "all-gather-done"},
    {HloOpcode::kAllGatherStart, "all-gather-start"},
    {HloOpcode::kAllReduce, "all-reduce"},
    {HloOpcode::kAllReduceDone, "all-reduce-done"},
    {HloOpcode::kAllReduceStart, "all-reduce-start"},
    {HloOpcode::kAllToAll, "all-to-all"},
    {HloOpcode::kAnd, "and"},
    {HloOpcode::kAsyncDone, "async-done"},
    {HloOpcode::kAsyncStart, "async-start"},
    {HloOpcode::kAsyncUpdate, "async-update"},
    {HloOpcode::kAtan2, "atan2"},
    {HloOpcode::kBatchNormGrad, "batch-norm-grad"},
    {HloOpcode::kBatchNormInference, "batch-norm-inference"},
    {HloOpcode::kBatchNormTraining, "batch-norm-training"},
    {HloOpcode::kBitcast, "bitcast"},
    {HloOpcode::kBitcastConvert, "bitcast-convert"},
    {HloOpcode::kBroadcast, "broadcast"},
    {HloOpcode::kCall, "call"},
    {HloOpcode::kCbrt, "cbrt"},
    {HloOpcode::kCeil, "ceil"},
    {HloOpcode::kCholesky, "cholesky"},
    {HloOpcode::kClamp, "clamp"},
    {HloOpcode::kCollectiveBroadcast, "collective-broadcast"},
    {HloOpcode::kCollectivePermute, "collective-permute"},
    {HloOpcode::kCollectivePermuteDone, "collective-permute-done"},
    {HloOpcode::kCollectivePermuteStart, "collective-permute-start"},
    {HloOpcode::kCompare, "compare"},
    {HloOpcode::kComplex, "complex"},
    {HloOpcode::kConcatenate, "concatenate"},
    {HloOpcode::kConditional, "conditional"},
    {HloOpcode::kConstant, "constant"},
    {HloOpcode::kConvert, "convert"},
    {HloOpcode::kConvolution, "convolution"},
    {HloOpcode::kCopy, "copy"},
    {HloOpcode::kCopyDone, "copy-done"},
    {HloOpcode::kCopyStart, "copy-start"},
    {HloOpcode::kCosine, "cosine"},
    {HloOpcode::kCountLeadingZeros, "count-leading-zeros"},
    {HloOpcode::kCustomCall, "custom-call"},
    {HloOpcode::kDivide, "divide"},
    {HloOpcode::kDomain, "domain"},
    {HloOpcode::kDot, "dot"},
    {HloOpcode::kDynamicReshape, "dynamic-reshape"},
    {HloOpcode::kDynamicSlice, "dynamic-slice"},
    {HloOpcode::kDynamicUpdateSlice, "dynamic-update-slice"},
    {HloOpcode::kErf, "erf"},
    {HloOpcode::kExponential, "exponential"},
    {HloOpcode::kExponentialMinusOne, "exponential-minus-one"},
    {HloOpcode::kFft, "fft"},
    {HloOpcode::kFloor, "floor"},
    {HloOpcode::kFusion, "fusion"},
    {HloOpcode::kGather, "gather"},
    {HloOpcode::kGetDimensionSize, "get-dimension-size"},
    {HloOpcode::kGetTupleElement, "get-tuple-element"},
    {HloOpcode::kImag, "imag"},
    {HloOpcode::kInfeed, "infeed"},
    {HloOpcode::kIota, "iota"},
    {HloOpcode::kIsFinite, "is-finite"},
    {HloOpcode::kLog, "log"},
    {HloOpcode::kLogPlusOne, "log-plus-one"},
    {HloOpcode::kLogistic, "logistic"},
    {HloOpcode::kMap, "map"},
    {HloOpcode::kMaximum, "maximum"},
    {HloOpcode::kMinimum, "minimum"},
    {HloOpcode::kMultiply, "multiply"},
    {HloOpcode::kNegate, "negate"},
    {HloOpcode::kNot, "not"},
    {HloOpcode::kOptimizationBarrier, "opt-barrier"},
    {HloOpcode::kOr, "or"},
    {HloOpcode::kOutfeed, "outfeed"},
    {HloOpcode::kPad, "pad"},
    {HloOpcode::kParameter, "parameter"},
    {HloOpcode::kPartitionId, "partition-id"},
    {HloOpcode::kPopcnt, "popcnt"},
    {HloOpcode::kPower, "power"},
    {HloOpcode::kRaggedAllToAll, "ragged-all-to-all"},
    {HloOpcode::kRaggedDot, "ragged-dot"},
    {HloOpcode::kReal, "real"},
    {HloOpcode::kRecv, "recv"},
    {HloOpcode::kRecvDone, "recv-done"},
    {HloOpcode::kReduce, "reduce"},
    {HloOpcode::kReducePrecision, "reduce-precision"},
    {HloOpcode::kReduceScatter, "reduce-scatter"},
    {HloOpcode::kReduceWindow, "reduce-window"},
    {HloOpcode::kRemainder, "remainder"},
    {HloOpcode::kReplicaId, "replica-id"},
    {HloOpcode::kReshape, "reshape"},
    {HloOpcode::kReverse, "reverse"},
    {HloOpcode::kRng, "rng"},
    {HloOpcode::kRngBitGenerator, "rng-bit-generator"},
    {HloOpcode::kRngGetAndUpdateState, "rng-get-and-update-state"},
    {HloOpcode::kRoundNearestAfz, "round-nearest-afz"},
    {HloOpcode::kRoundNearestEven, "round-nearest-even"},
    {HloOpcode::kRsqrt, "rsqrt"},
    {HloOpcode::kScatter, "scatter"},
    {HloOpcode::kSelect, "select"},
    {HloOpcode::kSelectAndScatter, "select-and-scatter"},
    {HloOpcode::kSend, "send"},
    {HloOpcode::kSendDone, "send-done"},
    {HloOpcode::kSetDimensionSize, "set-dimension-size"},
    {HloOpcode::kShiftLeft, "shift-left"},
    {HloOpcode::kShiftRightArithmetic, "shift-right-arithmetic"},
    {HloOpcode::kShiftRightLogical, "shift-right-logical"},
    {HloOpcode::kSign, "sign"},
    {HloOpcode::kSine, "sine"},
    {HloOpcode::kSlice, "slice"},
    {HloOpcode::kSort, "sort"},
    {HloOpcode::kSqrt, "sqrt"},
    {HloOpcode::kStochasticConvert, "stochastic-convert"},
    {HloOpcode::kSubtract, "subtract"},
    {HloOpcode::kTan, "tan"},
    {HloOpcode::kTanh, "tanh"},
    {HloOpcode::kTopK, "topk"},
    {HloOpcode::kTranspose, "transpose"},
    {HloOpcode::kTriangularSolve, "triangular-solve"},
    {HloOpcode::kTuple, "tuple"},
    {HloOpcode::kWhile, "while"},
    {HloOpcode::kXor, "xor"},
};

}  // namespace

HloOpcode hlo_opcode_from_name(std::string_view name) {
  static const std::unordered_map<std::string_view, HloOpcode> kByName = [] {
    std::unordered_map<std::string_view, HloOpcode> m;
    for (const Named& n : kNames) m.emplace(n.name, n.opcode);
    m.emplace("optimization-barrier", HloOpcode::kOptimizationBarrier);
    return m;
  }();
  auto it = kByName.find(name);
  if (it != kByName.end()) return it->second;
  // XLA prints an async op by what it wraps: fusion-start, fusion-update, fusion-done.
  auto ends_with = [&](std::string_view suffix) {
    return name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  if (ends_with("-start")) return HloOpcode::kAsyncStart;
  if (ends_with("-update")) return HloOpcode::kAsyncUpdate;
  if (ends_with("-done")) return HloOpcode::kAsyncDone;
  return HloOpcode::kUnknown;
}

std::string_view hlo_opcode_name(HloOpcode opcode) {
  static const auto kByOpcode = [] {
    std::array<std::string_view, 256> a{};
    for (const Named& n : kNames) a[static_cast<size_t>(n.opcode)] = n.name;
    return a;
  }();
  return kByOpcode[static_cast<size_t>(opcode)];
}

bool is_elementwise(HloOpcode opcode) {
  switch (opcode) {
    case HloOpcode::kAbs:
    case HloOpcode::kAdd:
    case HloOpcode::kAnd:
    case HloOpcode::kAtan2:
    case HloOpcode::kCbrt:
    case HloOpcode::kCeil:
    case HloOpcode::kClamp:
    case HloOpcode::kCompare:
    case HloOpcode::kComplex:
    case HloOpcode::kConvert:
    case HloOpcode::kCosine:
    case HloOpcode::kCountLeadingZeros:
    case HloOpcode::kDivide:
    case HloOpcode::kErf:
    case HloOpcode::kExponential:
    case HloOpcode::kExponentialMinusOne:
    case HloOpcode::kFloor:
    case HloOpcode::kImag:
    case HloOpcode::kIsFinite:
    case HloOpcode::kLog:
    case HloOpcode::kLogPlusOne:
    case HloOpcode::kLogistic:
    case HloOpcode::kMaximum:
    case HloOpcode::kMinimum:
    case HloOpcode::kMultiply:
    case HloOpcode::kNegate:
    case HloOpcode::kNot:
    case HloOpcode::kOr:
    case HloOpcode::kPopcnt:
    case HloOpcode::kPower:
    case HloOpcode::kReal:
    case HloOpcode::kReducePrecision:
    case HloOpcode::kRemainder:
    case HloOpcode::kRoundNearestAfz:
    case HloOpcode::kRoundNearestEven:
    case HloOpcode::kRsqrt:
    case HloOpcode::kSelect:
    case HloOpcode::kShiftLeft:
    case HloOpcode::kShiftRightArithmetic:
    case HloOpcode::kShiftRightLogical:
    case HloOpcode::kSign:
    case HloOpcode::kSine:
    case HloOpcode::kSqrt:
    case HloOpcode::kStochasticConvert:
    case HloOpcode::kSubtract:
    case HloOpcode::kTan:
    case HloOpcode::kTanh:
    case HloOpcode::kXor:
    case HloOpcode::kBitcastConvert:
      return true;
    default:
      return false;
  }
}

bool is_async_start(HloOpcode opcode) {
  switch (opcode) {
    case HloOpcode::kAllGatherStart:
    case HloOpcode::kAllReduceStart:
    case HloOpcode::kAsyncStart:
    case HloOpcode::kCollectivePermuteStart:
    case HloOpcode::kCopyStart:
      return true;
    default:
      return false;
  }
}

bool is_async_done(HloOpcode opcode) {
  switch (opcode) {
    case HloOpcode::kAllGatherDone:
    case HloOpcode::kAllReduceDone:
    case HloOpcode::kAsyncDone:
    case HloOpcode::kCollectivePermuteDone:
    case HloOpcode::kCopyDone:
    case HloOpcode::kRecvDone:
    case HloOpcode::kSendDone:
      return true;
    default:
      return false;
  }
}

}  // namespace memfit
