// Element: one item of a dataset's stream -- a tuple of components, each a
// Tensor or a string (a line of text, a record's bytes: what TensorFlow
// holds in a tf.string scalar) -- and, for messages about it, where it came
// from ("digits.csv:17", "tcp 127.0.0.1:5000: record 12").
//
// ElementSpec: what every element of a dataset looks like, component by
// component -- a string, or a tensor of a dtype and a shape whose unknown
// dimensions are kUnknownDim (a batch's leading dimension, say). Datasets
// derive it stage by stage (pipeline/dataset.h); the IteratorGetNext op
// takes its outputs' dtypes and shapes from it, and checks each element
// against it.
//
// Thread safety: plain values. An Element's tensors share their buffers
// (graph/tensor.h): copies are cheap, and a component is never written
// after the element was handed on.
#ifndef COSESSION_PIPELINE_ELEMENT_H_
#define COSESSION_PIPELINE_ELEMENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosession/graph/dtype.h"
#include "cosession/graph/small_block_allocator.h"
#include "cosession/graph/tensor.h"
#include "cosession/graph/tensor_shape.h"

namespace cosession {

using Component = std::variant<Tensor, std::string>;

// Where an element came from. A file source numbers its lines from 1
// ("<file>:<line>"); a stream source numbers its lines or records from 1
// ("<name>: line <n>", "<name>: record <n>"). Computed elements (a batch, a
// map's result) keep the origin of their first input.
struct ElementOrigin {
  enum class Kind { kNone, kFileLine, kStreamLine, kStreamRecord };
  Kind kind = Kind::kNone;
  std::shared_ptr<const std::string> source{};
  int64_t index = 0;

  // "digits.csv:17", "tcp 127.0.0.1:5000: record 12", or "" for kNone.
  std::string ToString() const;
  // "<ToString()>: <message>", or the message alone without an origin.
  std::string Describe(absl::string_view message) const;
};

// An element's components: a vector, not an inline vector, since an
// element is moved from stage to stage many times, and moving a vector is
// three pointers where moving inline components is a variant and a tensor
// each (BM_Pipeline_Stages: about a third of its instructions went there).
// Its blocks come from per-thread free lists: a source makes a batch's
// elements in a run and Batch frees them together, a pattern that defeats
// malloc's own per-thread cache (graph/small_block_allocator.h).
using Components = std::vector<Component, SmallBlockAllocator<Component>>;

struct Element {
  Components components{};
  ElementOrigin origin{};

  size_t size() const { return components.size(); }
  // The tensor or the string at `i`; a programming error (throws
  // StatusError) when it holds the other kind or is out of range.
  const Tensor& tensor(size_t i) const;
  Tensor& tensor(size_t i);
  const std::string& text(size_t i) const;
};

// An element of tensors.
Element MakeElement(std::vector<Tensor> tensors);

// Row `row` of `batch` (rank >= 1, row < its dimension 0) along dimension
// 0, as a tensor of its own: a copy, so that it does not hold the batch's
// buffer. What FromTensorSlices and Unbatch make of each row.
Tensor CopyRow(const Tensor& batch, int64_t row);

struct ComponentSpec {
  // A string component (dtype and shape are then ignored).
  bool is_string = false;
  DType dtype = DType::kFloat;
  TensorShape shape{};

  static ComponentSpec String() { return {.is_string = true}; }
  static ComponentSpec Of(DType dtype, TensorShape shape) {
    return {.is_string = false, .dtype = dtype, .shape = std::move(shape)};
  }
  // A scalar tensor of `dtype` (out of line: g++ 12 warns about the copy
  // of an inline TensorShape{} it sees to be empty).
  static ComponentSpec Scalar(DType dtype);
  // "string", "float [?,64]" (TensorShape::DebugString).
  std::string DebugString() const;
  friend bool operator==(const ComponentSpec&, const ComponentSpec&) = default;
};

using ElementSpec = std::vector<ComponentSpec>;

// "(float [?,64], int32 [?])".
std::string ElementSpecString(const ElementSpec& spec);

// The spec of one element, exactly (every dimension known).
ElementSpec SpecOf(const Element& element);

// The spec both a and b satisfy: equal where they agree, unknown dimensions
// where they do not. InvalidArgument when the component count, a kind or a
// dtype differs, or a rank differs.
absl::StatusOr<ElementSpec> MostSpecificCommonSpec(const ElementSpec& a,
                                                   const ElementSpec& b);

// OK when `element` satisfies `spec`; else InvalidArgument, naming the
// component, what was expected and what came (and the element's origin),
// prefixed with `what` ("IteratorGetNext 'train_batch'").
absl::Status CheckElement(const Element& element, const ElementSpec& spec,
                          absl::string_view what);

}  // namespace cosession

#endif  // COSESSION_PIPELINE_ELEMENT_H_
