#include "data/chexpert_observations.h"

namespace vitpipe {

const std::vector<std::string>& chexpert_observations() {
  static const std::vector<std::string> observations = {"No Finding",       "Enlarged Cardiomediastinum",
                                                        "Cardiomegaly",     "Lung Opacity",
                                                        "Lung Lesion",      "Edema",
                                                        "Consolidation",    "Pneumonia",
                                                        "Atelectasis",      "Pneumothorax",
                                                        "Pleural Effusion", "Pleural Other",
                                                        "Fracture",         "Support Devices"};
  return observations;
}

}  // namespace vitpipe
