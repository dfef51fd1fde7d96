#include "evaluation/subgroup_attributes.h"

#include <algorithm>
#include <cctype>

#include "data/dataset.h"

namespace vitpipe {
namespace {

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

// Each value through `group`; an empty group is left out as `unknown`.
template <class Group>
SubgroupAttribute categorical(const std::string& name, const std::vector<std::string>& values, Group group) {
  SubgroupAttribute a;
  a.name = name;
  for (const std::string& v : values) {
    a.group_of_row.push_back(group(v));
    if (a.group_of_row.back().empty()) a.left_out["unknown"] += 1;
  }
  return a;
}

}  // namespace

std::string age_band(double years) {
  if (years < 0 || years > kMaxPlausibleAge) return "";
  if (years < 40) return "<40";
  if (years < 60) return "40-59";
  if (years < 80) return "60-79";
  return "80+";
}

SubgroupAttribute sex_attribute(const std::vector<std::string>& sex) {
  return categorical("sex", sex, [](const std::string& v) {
    const std::string u = upper(v);
    return u == "M" || u == "MALE" ? std::string("M") : u == "F" || u == "FEMALE" ? std::string("F") : std::string();
  });
}

SubgroupAttribute age_attribute(const std::vector<double>& age_years) {
  SubgroupAttribute a;
  a.name = "age";
  a.order = {"<40", "40-59", "60-79", "80+"};
  for (const double years : age_years) {
    a.group_of_row.push_back(age_band(years));
    if (years < 0) a.left_out["unknown"] += 1;
    if (years > kMaxPlausibleAge) a.left_out["impossible age (> 120 years)"] += 1;
  }
  return a;
}

SubgroupAttribute view_attribute(const std::vector<std::string>& views) {
  return categorical("view", views, [](const std::string& v) {
    const std::string u = upper(v);
    if (u == "LATERAL" || u == "LL" || u == "RL" || u == "L") return std::string("lateral");
    return u;
  });
}

SubgroupAttribute column_attribute(const std::string& column, const std::vector<std::string>& values) {
  return categorical(column, values, [](const std::string& v) { return v; });
}

std::vector<SubgroupAttribute> item_attributes(const Dataset& dataset, const std::vector<int64_t>& items,
                                               const std::vector<std::string>& columns) {
  std::vector<std::string> sex, view;
  std::vector<double> age;
  std::vector<std::vector<std::string>> values(columns.size());
  for (const int64_t i : items) {
    const DatasetItem& item = dataset.item(i);
    sex.push_back(item.sex);
    age.push_back(item.age_years);
    view.push_back(item.view);
    for (size_t c = 0; c < columns.size(); ++c)
      values[c].push_back(c < item.subgroup_values.size() ? item.subgroup_values[c] : std::string());
  }
  std::vector<SubgroupAttribute> out = {sex_attribute(sex), age_attribute(age), view_attribute(view)};
  for (size_t c = 0; c < columns.size(); ++c) out.push_back(column_attribute(columns[c], values[c]));
  return out;
}

bool any_grouped(const SubgroupAttribute& attribute) {
  return std::any_of(attribute.group_of_row.begin(), attribute.group_of_row.end(),
                     [](const std::string& g) { return !g.empty(); });
}

}  // namespace vitpipe
