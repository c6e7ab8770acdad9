// "async/monitored_session.h" as a user of cosession::cosession includes it:
// MonitoredSession (cosession/async/monitored_session.h) and, listed beside
// it in the public contract, the MonitoredTrainingSession factory -- which
// lives a layer higher (cosession/training/monitored_training_session.h),
// since it builds the standard hooks. Only cosession::cosession's include
// path holds this directory (contract/, ahead of cosession's unprefixed
// root); the layers never see it, so the async layer still knows nothing of
// the training layer. "cosession/async/monitored_session.h" remains the
// async layer's header alone.
#ifndef COSESSION_CONTRACT_ASYNC_MONITORED_SESSION_H_
#define COSESSION_CONTRACT_ASYNC_MONITORED_SESSION_H_

#include "cosession/async/monitored_session.h"
#include "cosession/training/monitored_training_session.h"

#endif  // COSESSION_CONTRACT_ASYNC_MONITORED_SESSION_H_
