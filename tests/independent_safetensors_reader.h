// A minimal safetensors reader written for the tests, independent of
// io/safetensors.cc: it reads the 8-byte length and the JSON by hand
// (nlohmann), checks that the offsets tile the data section, and checks the
// CRC-32C with io/crc32c.h's reference Crc32c. The tests compare what the
// library writes against it, so a bug shared by the library's writer and
// reader cannot hide.
#ifndef COSESSION_TESTS_INDEPENDENT_SAFETENSORS_READER_H_
#define COSESSION_TESTS_INDEPENDENT_SAFETENSORS_READER_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cosession/io/crc32c.h"

namespace cosession::testing {

struct MiniTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian data
};

struct MiniFile {
  uint64_t header_length = 0;
  std::string header;  // the JSON text, padding included
  std::map<std::string, MiniTensor> tensors;
  std::map<std::string, std::string> metadata;
};

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Adds a test failure for each violation; returns what it could read.
inline MiniFile ReadIndependently(const std::string& bytes) {
  MiniFile file;
  if (bytes.size() < 8) {
    ADD_FAILURE() << "shorter than 8 bytes";
    return file;
  }
  for (int i = 7; i >= 0; --i) {
    file.header_length =
        (file.header_length << 8) | static_cast<unsigned char>(bytes[i]);
  }
  if (file.header_length > bytes.size() - 8) {
    ADD_FAILURE() << "header length past the end";
    return file;
  }
  file.header = bytes.substr(8, file.header_length);
  EXPECT_EQ(file.header.front(), '{');
  EXPECT_EQ(file.header_length % 8, 0u) << "header not padded to 8 bytes";
  const std::string data = bytes.substr(8 + file.header_length);
  nlohmann::json json = nlohmann::json::parse(file.header);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto& [name, value] : json.items()) {
    if (name == "__metadata__") {
      for (auto& [k, v] : value.items())
        file.metadata[k] = v.get<std::string>();
      continue;
    }
    MiniTensor t;
    t.dtype = value.at("dtype").get<std::string>();
    t.shape = value.at("shape").get<std::vector<int64_t>>();
    uint64_t begin = value.at("data_offsets").at(0).get<uint64_t>();
    uint64_t end = value.at("data_offsets").at(1).get<uint64_t>();
    EXPECT_LE(begin, end);
    EXPECT_LE(end, data.size());
    uint64_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);
    const uint64_t size = t.dtype == "F64" || t.dtype == "I64" ? 8
                          : t.dtype == "BOOL"                  ? 1
                                                               : 4;
    EXPECT_EQ(end - begin, elements * size) << name;
    t.bytes = data.substr(begin, end - begin);
    ranges.emplace_back(begin, end);
    file.tensors[name] = std::move(t);
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (auto [begin, end] : ranges) {
    EXPECT_EQ(begin, covered) << "gap or overlap";
    covered = end;
  }
  EXPECT_EQ(covered, data.size()) << "data not exactly covered";
  EXPECT_EQ(file.metadata["crc32c"], std::to_string(Crc32c(data)));
  return file;
}

template <typename T>
std::string BytesOf(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_INDEPENDENT_SAFETENSORS_READER_H_
