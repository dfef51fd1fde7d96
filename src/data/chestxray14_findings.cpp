#include "data/chestxray14_findings.h"

namespace vitpipe {

const std::vector<std::string>& chestxray14_findings() {
  static const std::vector<std::string> findings = {
      "Atelectasis", "Cardiomegaly", "Consolidation", "Edema",  "Effusion",           "Emphysema", "Fibrosis",
      "Hernia",      "Infiltration", "Mass",          "Nodule", "Pleural_Thickening", "Pneumonia", "Pneumothorax"};
  return findings;
}

}  // namespace vitpipe
