// Boost.JSON's implementation, compiled once, into cosession_serving:
// Debian's libboost1.81-dev ships Boost.JSON as headers (the compiled
// library is another package), and including src.hpp in one file is
// Boost.JSON's documented header-only use.
#include <boost/json/src.hpp>
