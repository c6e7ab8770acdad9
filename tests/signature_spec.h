// A signature's tensor for the tests that parse request bodies against
// hand-written signatures (no graph behind them: the tensor is a null
// Output).
#ifndef COSESSION_TESTS_SIGNATURE_SPEC_H_
#define COSESSION_TESTS_SIGNATURE_SPEC_H_

#include <utility>

#include "cosession/serving/saved_model.h"

namespace cosession::testing {

inline SignatureTensor Spec(DType dtype, TensorShape shape) {
  return {.tensor = Output(), .dtype = dtype, .shape = std::move(shape)};
}

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_SIGNATURE_SPEC_H_
