// The run spec's keys that take one of a fixed set of values, as typed values. The spec loader
// parses each once (engine/config/spec.cpp: a value outside the set is refused there, with the
// file and line); everything after compares enums. Each enum's names, in the enum's order, are
// what the spec file says, what the resolved spec writes and what docs/spec-reference.md lists.
// (C++17 here too: CUDA sources include it.) In core, not config, because the backend (below config in DESIGN's layers) resolves the device
// and the compute precision.
#pragma once
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace zt {

enum class DeviceChoice { Auto, Cpu, Cuda };            // [run] device
enum class SpikePolicy { Off, Skip, Rollback };         // [train] spike_policy
enum class Recompute { None, Selective, Full };         // [train] recompute
enum class LrSchedule { Cosine, Linear, Constant };     // [optim] schedule
enum class PrecisionChoice { Auto, Fp32, Bf16, Fp16 };  // [precision] compute
enum class OffloadTier { None, Cpu, Nvme };             // [offload] optimizer, params
enum class CommBackendChoice { Auto, Mpi, Nccl };       // [comm] backend
enum class Packing { None, Documents, Padded };         // [data] packing
enum class LoraInit { Kaiming, Gaussian };             // [lora] init
enum class Fp8Recipe { None, Tensorwise };              // [precision] fp8
enum class Fp8Layers { Auto, All };                     // [precision] fp8_layers

// ChoiceNames<E>::names[i] is the spec's name of E(i).
template <class E>
struct ChoiceNames;
template <>
struct ChoiceNames<DeviceChoice> {
  static constexpr std::array<std::string_view, 3> names{"auto", "cpu", "cuda"};
};
template <>
struct ChoiceNames<SpikePolicy> {
  static constexpr std::array<std::string_view, 3> names{"off", "skip", "rollback"};
};
template <>
struct ChoiceNames<Recompute> {
  static constexpr std::array<std::string_view, 3> names{"none", "selective", "full"};
};
template <>
struct ChoiceNames<LrSchedule> {
  static constexpr std::array<std::string_view, 3> names{"cosine", "linear", "constant"};
};
template <>
struct ChoiceNames<PrecisionChoice> {
  static constexpr std::array<std::string_view, 4> names{"auto", "fp32", "bf16", "fp16"};
};
template <>
struct ChoiceNames<OffloadTier> {
  static constexpr std::array<std::string_view, 3> names{"none", "cpu", "nvme"};
};
template <>
struct ChoiceNames<CommBackendChoice> {
  static constexpr std::array<std::string_view, 3> names{"auto", "mpi", "nccl"};
};

template <>
struct ChoiceNames<Packing> {
  static constexpr std::array<std::string_view, 3> names{"none", "documents", "padded"};
};
template <>
struct ChoiceNames<LoraInit> {
  static constexpr std::array<std::string_view, 2> names{"kaiming", "gaussian"};
};

template <>
struct ChoiceNames<Fp8Recipe> {
  static constexpr std::array<std::string_view, 2> names{"none", "tensorwise"};
};
template <>
struct ChoiceNames<Fp8Layers> {
  static constexpr std::array<std::string_view, 2> names{"auto", "all"};
};

// "cuda" for DeviceChoice::Cuda.
template <class E>
constexpr std::string_view choice_name(E e) {
  return ChoiceNames<E>::names[size_t(e)];
}

// The value named `name`; nullopt when it names none.
template <class E>
constexpr std::optional<E> parse_choice(std::string_view name) {
  for (size_t i = 0; i < ChoiceNames<E>::names.size(); ++i)
    if (ChoiceNames<E>::names[i] == name) return E(i);
  return std::nullopt;
}

}  // namespace zt
