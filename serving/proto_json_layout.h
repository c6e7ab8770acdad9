// A JSON value laid out as protobuf's JSON printer lays out a message with
// JsonPrintOptions::add_whitespace, which TensorFlow Serving uses for its
// model status and metadata answers (model_servers/http_rest_api_util.cc):
//
//   {
//    "model_version_status": [
//     {
//      "version": "1",
//      "state": "AVAILABLE"
//     }
//    ]
//   }
//
// One space a level, each member and element on a line of its own, an
// empty object or array as {} or [], and a newline after the closing
// brace. Members keep the order the value holds them in. Clients that
// compare these answers as text see TensorFlow Serving's bytes.
//
// Thread safety: a pure function.
#ifndef COSESSION_SERVING_PROTO_JSON_LAYOUT_H_
#define COSESSION_SERVING_PROTO_JSON_LAYOUT_H_

#include <boost/json/value.hpp>
#include <string>

namespace cosession {

std::string ProtoJsonLayout(const boost::json::value& value);

}  // namespace cosession

#endif  // COSESSION_SERVING_PROTO_JSON_LAYOUT_H_
