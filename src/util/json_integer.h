// Integers read from JSON files vitpipe did not necessarily write (a packed cache, a checkpoint, a cached profile):
// nlohmann's get<T>() casts without checking, so 5e120 becomes undefined behaviour and 259 channels become 3.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "util/error.h"

namespace vitpipe {

// `value` as a T: a JSON integer (not 4.0, not "4") within T's range; otherwise an Error naming `where`.
template <class T>
T json_integer(const nlohmann::json& value, const std::string& where) {
  VP_REQUIRE(value.is_number_integer(), where, " must be an integer, got ", value.type_name());
  const bool fits =
      value.is_number_unsigned() ? std::in_range<T>(value.get<uint64_t>()) : std::in_range<T>(value.get<int64_t>());
  VP_REQUIRE(fits, where, " must lie in [", +std::numeric_limits<T>::min(), ", ", +std::numeric_limits<T>::max(),
             "], got ", value.dump());
  return value.is_number_unsigned() ? static_cast<T>(value.get<uint64_t>()) : static_cast<T>(value.get<int64_t>());
}

// object[key] as a T, or `fallback` when the key is absent.
template <class T>
T json_integer_or(const nlohmann::json& object, const char* key, T fallback, const std::string& where) {
  if (!object.is_object() || !object.contains(key)) return fallback;
  return json_integer<T>(object[key], concat(where, " field \"", key, "\""));
}

// A JSON array of integers as a vector<T>.
template <class T>
std::vector<T> json_integers(const nlohmann::json& array, const std::string& where) {
  VP_REQUIRE(array.is_array(), where, " must be an array of integers, got ", array.type_name());
  std::vector<T> values;
  values.reserve(array.size());
  for (const auto& value : array) values.push_back(json_integer<T>(value, where));
  return values;
}

}  // namespace vitpipe
