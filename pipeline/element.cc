#include "cosession/pipeline/element.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/graph/status.h"

namespace cosession {

ComponentSpec ComponentSpec::Scalar(DType dtype) {
  ComponentSpec spec;
  spec.dtype = dtype;
  return spec;
}

std::string ElementOrigin::ToString() const {
  const std::string& name = source != nullptr ? *source : std::string();
  switch (kind) {
    case Kind::kNone:
      return "";
    case Kind::kFileLine:
      return absl::StrCat(name, ":", index);
    case Kind::kStreamLine:
      return absl::StrCat(name, ": line ", index);
    case Kind::kStreamRecord:
      return absl::StrCat(name, ": record ", index);
  }
  return "";
}

std::string ElementOrigin::Describe(absl::string_view message) const {
  if (kind == Kind::kNone) return std::string(message);
  return absl::StrCat(ToString(), ": ", message);
}

namespace {

[[noreturn]] void WrongComponent(size_t i, size_t size, const char* wanted) {
  throw StatusError(absl::InvalidArgumentError(
      i >= size
          ? absl::StrCat("element component ", i, " of ", size, " components")
          : absl::StrCat("element component ", i, " is not a ", wanted)));
}

}  // namespace

const Tensor& Element::tensor(size_t i) const {
  if (i >= components.size() ||
      !std::holds_alternative<Tensor>(components[i])) {
    WrongComponent(i, components.size(), "tensor");
  }
  return std::get<Tensor>(components[i]);
}

Tensor& Element::tensor(size_t i) {
  if (i >= components.size() ||
      !std::holds_alternative<Tensor>(components[i])) {
    WrongComponent(i, components.size(), "tensor");
  }
  return std::get<Tensor>(components[i]);
}

const std::string& Element::text(size_t i) const {
  if (i >= components.size() ||
      !std::holds_alternative<std::string>(components[i])) {
    WrongComponent(i, components.size(), "string");
  }
  return std::get<std::string>(components[i]);
}

Element MakeElement(std::vector<Tensor> tensors) {
  Element element;
  for (Tensor& t : tensors) element.components.emplace_back(std::move(t));
  return element;
}

Tensor CopyRow(const Tensor& batch, int64_t row) {
  Tensor out = Tensor::Allocate(
      batch.dtype(), TensorShape(batch.shape().dim_sizes().subspan(1)));
  const size_t bytes = out.TotalBytes();
  if (bytes > 0) {
    std::memcpy(out.raw_data(),
                static_cast<const char*>(batch.raw_data()) +
                    static_cast<size_t>(row) * bytes,
                bytes);
  }
  return out;
}

std::string ComponentSpec::DebugString() const {
  if (is_string) return "string";
  return absl::StrCat(DTypeName(dtype), " ", shape.DebugString());
}

std::string ElementSpecString(const ElementSpec& spec) {
  return absl::StrCat(
      "(",
      absl::StrJoin(spec, ", ",
                    [](std::string* out, const ComponentSpec& c) {
                      out->append(c.DebugString());
                    }),
      ")");
}

ElementSpec SpecOf(const Element& element) {
  ElementSpec spec;
  for (const Component& c : element.components) {
    if (const Tensor* t = std::get_if<Tensor>(&c)) {
      spec.push_back(ComponentSpec::Of(t->dtype(), t->shape()));
    } else {
      spec.push_back(ComponentSpec::String());
    }
  }
  return spec;
}

absl::StatusOr<ElementSpec> MostSpecificCommonSpec(const ElementSpec& a,
                                                   const ElementSpec& b) {
  auto mismatch = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("element specs ", ElementSpecString(a), " and ",
                     ElementSpecString(b), " do not match"));
  };
  if (a.size() != b.size()) return mismatch();
  ElementSpec common;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].is_string != b[i].is_string) return mismatch();
    if (a[i].is_string) {
      common.push_back(ComponentSpec::String());
      continue;
    }
    if (a[i].dtype != b[i].dtype) return mismatch();
    const TensorShape& sa = a[i].shape;
    const TensorShape& sb = b[i].shape;
    if (sa.unknown_rank() || sb.unknown_rank()) {
      common.push_back(ComponentSpec::Of(a[i].dtype, TensorShape::Unknown()));
      continue;
    }
    if (sa.dims() != sb.dims()) return mismatch();
    TensorShape shape = sa;
    for (int d = 0; d < sa.dims(); ++d) {
      if (sa.dim_size(d) != sb.dim_size(d)) shape.set_dim(d, kUnknownDim);
    }
    common.push_back(ComponentSpec::Of(a[i].dtype, std::move(shape)));
  }
  return common;
}

absl::Status CheckElement(const Element& element, const ElementSpec& spec,
                          absl::string_view what) {
  auto fail = [&](std::string message) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", element.origin.Describe(message)));
  };
  if (element.size() != spec.size()) {
    return fail(absl::StrCat("an element of ", element.size(),
                             " components, expected ", spec.size(), " ",
                             ElementSpecString(spec)));
  }
  for (size_t i = 0; i < spec.size(); ++i) {
    const Tensor* t = std::get_if<Tensor>(&element.components[i]);
    if (spec[i].is_string != (t == nullptr)) {
      return fail(absl::StrCat("component ", i, " is a ",
                               t == nullptr ? "string" : "tensor",
                               ", expected ", spec[i].DebugString()));
    }
    if (t == nullptr) continue;
    if (t->dtype() != spec[i].dtype ||
        !spec[i].shape.IsCompatibleWith(t->shape())) {
      return fail(absl::StrCat("component ", i, " is ", DTypeName(t->dtype()),
                               " ", t->shape().DebugString(), ", expected ",
                               spec[i].DebugString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace cosession
