// The attributes an evaluation is broken down by (sex, age band, view, a csv's named columns): each row's group, or
// none with the reason it was left out, so a subgroup table can say how many images it could not place.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace vitpipe {

class Dataset;

struct SubgroupAttribute {
  std::string name;                         // "sex", "age", "view", or a csv column
  std::vector<std::string> group_of_row;    // "" = the row is in no group of this attribute
  std::map<std::string, int64_t> left_out;  // reason -> rows, e.g. {"impossible age (> 120 years)": 3}
  std::vector<std::string> order;           // the groups' display order where not alphabetical (age bands)
};

// Age bands of the subgroup audits: "<40", "40-59", "60-79", "80+" (years, fractional below a year). "" for an
// unknown age (< 0) and for NIH's impossible ages (> 120 years, e.g. 412), which are excluded, not clamped.
std::string age_band(double years);
constexpr double kMaxPlausibleAge = 120.0;

// "M"/"male" -> "M", "F"/"female" -> "F" (any case); anything else, "" included, is left out as unknown.
SubgroupAttribute sex_attribute(const std::vector<std::string>& sex);
// Bands as age_band; unknown and impossible ages left out and counted separately.
SubgroupAttribute age_attribute(const std::vector<double>& age_years);
// "PA", "AP" (and "AP SUPINE"... kept as given, upper case); LATERAL, LL, RL, L -> "lateral"; "" left out.
SubgroupAttribute view_attribute(const std::vector<std::string>& views);
// A csv column as given; empty cells left out.
SubgroupAttribute column_attribute(const std::string& column, const std::vector<std::string>& values);

// Sex, age band and view of the dataset's `items` (rows in that order), then each of `columns` (a csv's --subgroup
// columns, DatasetOptions::subgroup_columns, in that order).
std::vector<SubgroupAttribute> item_attributes(const Dataset& dataset, const std::vector<int64_t>& items,
                                               const std::vector<std::string>& columns);

// True when some row has a group (an attribute nobody has is not worth a table).
bool any_grouped(const SubgroupAttribute& attribute);

}  // namespace vitpipe
