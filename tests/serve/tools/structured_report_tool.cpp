// Writes a findings SR (and optionally a heatmap Secondary Capture) for check_structured_report.py:
//   structured_report_tool --image IMAGE.dcm --findings FINDINGS.json --out SR.dcm [--sop-uid U] [--series-uid U]
//       [--algorithm-name N] [--algorithm-version V]
//       [--heatmap-png OVERLAY.png --heatmap-out SC.dcm --heatmap-description D [--heatmap-sop-uid U]
//        [--heatmap-series-uid U]]
// FINDINGS.json is [[label, probability], ...] (an ordered list: the SR keeps the order). UIDs not given are made by
// new_dicom_uid(). Prints the UIDs used as JSON; on failure one line "error: ..." and exit status 1.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <nlohmann/json.hpp>

#include "data/image.h"
#include "serve/secondary_capture.h"
#include "serve/structured_report.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace {

std::vector<vitpipe::LabelProbability> read_findings(const std::string& path) {
  const nlohmann::json findings = nlohmann::json::parse(vitpipe::read_text_file(path));
  VP_REQUIRE(findings.is_array(), path, ": expected [[label, probability], ...]");
  std::vector<vitpipe::LabelProbability> result;
  for (const nlohmann::json& pair : findings) {
    VP_REQUIRE(pair.is_array() && pair.size() == 2 && pair[0].is_string() && pair[1].is_number(), path,
               ": expected [label, probability], got ", pair.dump());
    result.push_back({pair[0].get<std::string>(), pair[1].get<double>()});
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes a vitpipe findings SR (and heatmap SC) for the tests"};
  std::string image, findings, out, heatmap_png, heatmap_out, heatmap_description = "vitpipe heatmap";
  vitpipe::StructuredReportContent content;
  content.algorithm_name = "test-model";
  content.algorithm_version = "vitpipe 0.1.0";
  std::string heatmap_sop_uid, heatmap_series_uid;
  app.add_option("--image", image)->required();
  app.add_option("--findings", findings)->required();
  app.add_option("--out", out)->required();
  app.add_option("--sop-uid", content.sop_instance_uid);
  app.add_option("--series-uid", content.series_instance_uid);
  app.add_option("--algorithm-name", content.algorithm_name);
  app.add_option("--algorithm-version", content.algorithm_version);
  app.add_option("--heatmap-png", heatmap_png);
  app.add_option("--heatmap-out", heatmap_out);
  app.add_option("--heatmap-description", heatmap_description);
  app.add_option("--heatmap-sop-uid", heatmap_sop_uid);
  app.add_option("--heatmap-series-uid", heatmap_series_uid);
  CLI11_PARSE(app, argc, argv);
  try {
    if (content.sop_instance_uid.empty()) content.sop_instance_uid = vitpipe::new_dicom_uid();
    if (content.series_instance_uid.empty()) content.series_instance_uid = vitpipe::new_dicom_uid();
    content.findings = read_findings(findings);
    vitpipe::write_structured_report(image, content, out);
    nlohmann::json uids = {{"sop_instance_uid", content.sop_instance_uid},
                           {"series_instance_uid", content.series_instance_uid}};
    if (!heatmap_out.empty()) {
      if (heatmap_sop_uid.empty()) heatmap_sop_uid = vitpipe::new_dicom_uid();
      if (heatmap_series_uid.empty()) heatmap_series_uid = vitpipe::new_dicom_uid();
      const vitpipe::DecodedImage overlay = vitpipe::to_decoded(vitpipe::decode_image_file(heatmap_png));
      vitpipe::write_heatmap_secondary_capture(image, overlay, heatmap_description, heatmap_sop_uid, heatmap_series_uid,
                                               heatmap_out);
      uids["heatmap_sop_instance_uid"] = heatmap_sop_uid;
      uids["heatmap_series_instance_uid"] = heatmap_series_uid;
    }
    std::cout << uids.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
