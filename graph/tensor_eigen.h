// Eigen views of Tensors, for kernels.
//
// The maps alias the tensor's buffer (no copy). Const maps may be taken of any
// tensor; mutable maps only of a tensor the caller created and has not yet
// handed to anyone (see the contract in graph/tensor.h). Matrices are
// row-major, like the tensors. The caller checks the rank.
#ifndef COSESSION_GRAPH_TENSOR_EIGEN_H_
#define COSESSION_GRAPH_TENSOR_EIGEN_H_

#include <Eigen/Core>

#include "cosession/graph/tensor.h"

namespace cosession {

template <typename T>
using EigenMatrix =
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using EigenVector = Eigen::Array<T, Eigen::Dynamic, 1>;

// All elements as a column array.
template <typename T>
Eigen::Map<const EigenVector<T>, Eigen::Aligned64> FlatMap(const Tensor& t) {
  return {t.flat<T>().data(), t.NumElements()};
}
template <typename T>
Eigen::Map<EigenVector<T>, Eigen::Aligned64> MutableFlatMap(Tensor& t) {
  return {t.mutable_flat<T>().data(), t.NumElements()};
}

// A rank-2 tensor as a row-major matrix.
template <typename T>
Eigen::Map<const EigenMatrix<T>, Eigen::Aligned64> MatrixMap(const Tensor& t) {
  return {t.flat<T>().data(), t.shape().dim_size(0), t.shape().dim_size(1)};
}
template <typename T>
Eigen::Map<EigenMatrix<T>, Eigen::Aligned64> MutableMatrixMap(Tensor& t) {
  return {t.mutable_flat<T>().data(), t.shape().dim_size(0),
          t.shape().dim_size(1)};
}

}  // namespace cosession

#endif  // COSESSION_GRAPH_TENSOR_EIGEN_H_
