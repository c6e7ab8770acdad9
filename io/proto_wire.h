// The protobuf wire format's primitives (varints, fixed-width numbers,
// length-delimited fields), for the messages the io layer writes by hand
// (event_proto, graph_def_proto) without a protobuf dependency.
// https://protobuf.dev/programming-guides/encoding/
//
// Pure inline functions appending to a std::string; thread safe.
#ifndef COSESSION_IO_PROTO_WIRE_H_
#define COSESSION_IO_PROTO_WIRE_H_

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

namespace cosession::proto_wire {

enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kFixed32 = 5,
};

inline void PutVarint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

inline void PutKey(std::string& out, uint32_t field, WireType type) {
  PutVarint(out, (uint64_t{field} << 3) | type);
}

inline void PutFixed(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  }
}

inline void PutDouble(std::string& out, uint32_t field, double value) {
  PutKey(out, field, kFixed64);
  PutFixed(out, std::bit_cast<uint64_t>(value), 8);
}

inline void PutFloat(std::string& out, uint32_t field, float value) {
  PutKey(out, field, kFixed32);
  PutFixed(out, std::bit_cast<uint32_t>(value), 4);
}

// int64, int32, bool and enum fields: a varint of the value (two's
// complement for negatives, as int64).
inline void PutInt64(std::string& out, uint32_t field, int64_t value) {
  PutKey(out, field, kVarint);
  PutVarint(out, static_cast<uint64_t>(value));
}

inline void PutBytes(std::string& out, uint32_t field, std::string_view bytes) {
  PutKey(out, field, kLengthDelimited);
  PutVarint(out, bytes.size());
  out.append(bytes);
}

}  // namespace cosession::proto_wire

#endif  // COSESSION_IO_PROTO_WIRE_H_
