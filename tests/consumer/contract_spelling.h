// A part of the consumer program written with the public contract's
// spelling of cosession's headers (contract_spelling.cc).
#ifndef COSESSION_CONSUMER_CONTRACT_SPELLING_H_
#define COSESSION_CONSUMER_CONTRACT_SPELLING_H_

#include <boost/asio/awaitable.hpp>

// The steps a MonitoredSession runs before a StopAtStepHook with
// last_step 2 stops it (2), or -1 on an error.
boost::asio::awaitable<int> StepsUntilStopAtStepTwo();

// The steps a MonitoredTrainingSession with max_steps 3 (and no
// checkpoint_dir: no files) runs before it stops (3), or -1 on an error.
boost::asio::awaitable<int> TrainingStepsUntilMaxStepsThree();

#endif  // COSESSION_CONSUMER_CONTRACT_SPELLING_H_
