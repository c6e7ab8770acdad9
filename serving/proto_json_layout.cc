#include "cosession/serving/proto_json_layout.h"

#include <boost/json/serialize.hpp>

namespace cosession {
namespace {

namespace json = boost::json;

void AppendValue(std::string& out, const json::value& value, int level) {
  auto next_line = [&](bool first, int indent) {
    if (!first) out += ',';
    out += '\n';
    out.append(indent, ' ');
  };
  if (const json::object* object = value.if_object()) {
    if (object->empty()) {
      out += "{}";
      return;
    }
    out += '{';
    bool first = true;
    for (const auto& member : *object) {
      next_line(first, level + 1);
      first = false;
      out += json::serialize(member.key());
      out += ": ";
      AppendValue(out, member.value(), level + 1);
    }
    out += '\n';
    out.append(level, ' ');
    out += '}';
  } else if (const json::array* array = value.if_array()) {
    if (array->empty()) {
      out += "[]";
      return;
    }
    out += '[';
    bool first = true;
    for (const json::value& element : *array) {
      next_line(first, level + 1);
      first = false;
      AppendValue(out, element, level + 1);
    }
    out += '\n';
    out.append(level, ' ');
    out += ']';
  } else {
    out += json::serialize(value);
  }
}

}  // namespace

std::string ProtoJsonLayout(const json::value& value) {
  std::string out;
  AppendValue(out, value, 0);
  out += '\n';
  return out;
}

}  // namespace cosession
