#include "report/predictions_table.h"

#include <charconv>
#include <cmath>

#include "data/csv_table.h"
#include "util/error.h"

namespace vitpipe {
namespace {

double number(const CsvTable& table, size_t row, int column, const char* what) {
  const std::string& text = table.rows[row][static_cast<size_t>(column)];
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  VP_REQUIRE(error == std::errc() && end == text.data() + text.size() && !std::isnan(value), table.where(row),
             ": column ", table.header[static_cast<size_t>(column)], ": expected a ", what, ", got \"", text, "\"");
  return value;
}

}  // namespace

PredictionsTable read_predictions_csv(const std::filesystem::path& path) {
  const CsvTable table = read_csv(path);
  PredictionsTable p;
  p.source = path.string();
  const int image = table.column("image"), patient = table.column("patient");
  VP_REQUIRE(image >= 0 && patient >= 0, path.string(),
             ": not a predictions file: expected columns image, patient, true:<label>..., probability:<label>... "
             "(as vitpipe eval --save-predictions writes)");
  const int view = table.column("view"), sex = table.column("sex"), age = table.column("age");
  std::vector<int> truth, logit, probability, subgroup;
  for (size_t c = 0; c < table.header.size(); ++c) {
    const std::string& name = table.header[c];
    if (name.rfind("subgroup:", 0) == 0) {
      VP_REQUIRE(name.size() > 9, path.string(), ": column \"subgroup:\" names no column");
      p.subgroup_columns.emplace_back(name.substr(9), std::vector<std::string>{});
      subgroup.push_back(static_cast<int>(c));
    }
    if (name.rfind("true:", 0) == 0) {
      p.labels.push_back(name.substr(5));
      truth.push_back(static_cast<int>(c));
    }
  }
  VP_REQUIRE(!p.labels.empty(), path.string(), ": no true:<label> column");
  for (const std::string& label : p.labels) {
    const int pc = table.column("probability:" + label), lc = table.column("logit:" + label);
    VP_REQUIRE(pc >= 0, path.string(), ": column probability:", label, " is missing (true:", label, " has no scores)");
    probability.push_back(pc);
    logit.push_back(lc);
  }
  const bool logits = logit.front() >= 0;
  for (size_t l = 0; l < logit.size(); ++l) {
    VP_REQUIRE((logit[l] >= 0) == logits, path.string(), ": column logit:", p.labels[l],
               logits ? " is missing (other labels have logits)" : " is present while other labels have none");
  }
  const size_t labels = p.labels.size();
  for (size_t r = 0; r < table.rows.size(); ++r) {
    p.images.push_back(table.rows[r][static_cast<size_t>(image)]);
    p.patients.push_back(table.rows[r][static_cast<size_t>(patient)]);
    if (view >= 0) p.views.push_back(table.rows[r][static_cast<size_t>(view)]);
    if (sex >= 0) p.sexes.push_back(table.rows[r][static_cast<size_t>(sex)]);
    for (size_t c = 0; c < subgroup.size(); ++c)
      p.subgroup_columns[c].second.push_back(table.rows[r][static_cast<size_t>(subgroup[c])]);
    if (age >= 0) {
      const bool blank = table.rows[r][static_cast<size_t>(age)].empty();
      p.ages.push_back(blank ? -1.0 : number(table, r, age, "age in years (or blank)"));
      VP_REQUIRE(p.ages.back() >= -1.0, table.where(r), ": column age: expected years >= 0 or blank");
    }
    for (size_t l = 0; l < labels; ++l) {
      const std::string& t = table.rows[r][static_cast<size_t>(truth[l])];
      VP_REQUIRE(t == "0" || t == "1" || t.empty(), table.where(r), ": column true:", p.labels[l],
                 ": expected 0, 1 or blank (unknown), got \"", t, "\"");
      p.targets.push_back(t == "1" ? 1.0f : 0.0f);
      p.weights.push_back(t.empty() ? 0.0f : 1.0f);
      p.has_unknown = p.has_unknown || t.empty();
      const double prob = number(table, r, probability[l], "probability");
      VP_REQUIRE(prob >= 0.0 && prob <= 1.0, table.where(r), ": column probability:", p.labels[l],
                 ": expected a probability in [0, 1], got ", prob);
      p.probabilities.push_back(prob);
      p.scores.push_back(logits ? number(table, r, logit[l], "logit") : prob);
    }
  }
  VP_REQUIRE(!p.images.empty(), path.string(), ": no rows");
  return p;
}

}  // namespace vitpipe
