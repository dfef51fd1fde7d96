// The parts of `vitpipe serve` under the HTTP layer: the dynamic batcher (batch sizes bounded, answers equal to the
// classifier's own whatever batch they rode in, errors delivered, draining on stop), the Prometheus text, the bearer
// token, derived UIDs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "inference/image_classifier.h"
#include "io/model_files.h"
#include "model/initializer.h"
#include "model/presets.h"
#include "serve/bearer_token.h"
#include "serve/dicom_uid.h"
#include "serve/inference_batcher.h"
#include "serve/serve_metrics.h"
#include "util/error.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

LoadedModel micro_model() {
  LoadedModel model;
  model.config = preset_config("vit-micro");
  model.config.labels = {"Effusion", "Nodule", "Mass"};
  model.config.image_size = 32;
  model.checkpoint_config = model.config;
  model.preprocessor = default_preprocessor_config(32);
  model.parameters = FlatParameters::whole_model(std::make_shared<const ParameterLayout>(model.config));
  initialize_parameters(model.parameters, 3);
  initialize_classifier(model.parameters, 4);
  return model;
}

std::vector<float> image_input(const ImageClassifier& classifier, int seed) {
  std::vector<float> input(static_cast<size_t>(classifier.input_floats()));
  for (size_t i = 0; i < input.size(); ++i)
    input[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(seed));
  return input;
}

TEST(InferenceBatcher, AnswersEqualTheClassifiersWhateverTheBatch) {
  ImageClassifier classifier(micro_model(), "micro", {}, 8);
  std::vector<ImagePrediction> alone;
  for (int i = 0; i < 20; ++i) alone.push_back(classifier.classify(image_input(classifier, i).data(), 1)[0]);

  ServeMetrics metrics;
  InferenceBatcher batcher(classifier, {4, std::chrono::milliseconds(50)}, &metrics);
  std::vector<std::future<ImagePrediction>> answers;
  for (int i = 0; i < 20; ++i) answers.push_back(batcher.submit(image_input(classifier, i)));
  for (int i = 0; i < 20; ++i) {
    const ImagePrediction p = answers[static_cast<size_t>(i)].get();
    ASSERT_EQ(p.logits.size(), 3u);
    for (size_t l = 0; l < 3; ++l) {
      EXPECT_NEAR(p.logits[l], alone[static_cast<size_t>(i)].logits[l], 1e-5) << "image " << i << " label " << l;
      EXPECT_NEAR(p.probabilities[l], alone[static_cast<size_t>(i)].probabilities[l], 1e-6);
    }
  }
  const std::string text = metrics.prometheus_text();
  // 20 images submitted at once with max_batch 4: exactly 5 batches of 4 (the delay lets each fill).
  EXPECT_NE(text.find("vitpipe_batch_size_count 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vitpipe_batch_size_bucket{le=\"2\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vitpipe_batch_size_bucket{le=\"4\"} 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vitpipe_images_total 20\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vitpipe_queue_depth 0\n"), std::string::npos) << text;
}

TEST(InferenceBatcher, ALoneImageWaitsAtMostTheDelay) {
  ImageClassifier classifier(micro_model(), "micro", {}, 8);
  InferenceBatcher batcher(classifier, {8, std::chrono::milliseconds(30)}, nullptr);
  const auto start = std::chrono::steady_clock::now();
  batcher.submit(image_input(classifier, 1)).get();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, 0.025);  // it waited for company
  EXPECT_LT(seconds, 2.0);    // but not for a full batch
}

TEST(InferenceBatcher, StopRunsWhatIsQueuedThenRefuses) {
  ImageClassifier classifier(micro_model(), "micro", {}, 8);
  InferenceBatcher batcher(classifier, {8, std::chrono::seconds(5)}, nullptr);
  std::vector<std::future<ImagePrediction>> answers;
  for (int i = 0; i < 3; ++i) answers.push_back(batcher.submit(image_input(classifier, i)));
  const auto start = std::chrono::steady_clock::now();
  batcher.stop();  // does not wait out the 5 s delay: it drains
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  for (auto& a : answers) EXPECT_EQ(a.get().logits.size(), 3u);
  EXPECT_THROW(batcher.submit(image_input(classifier, 9)), Error);
}

TEST(InferenceBatcher, RefusesAWrongInputSizeAndAnOversizedBatch) {
  ImageClassifier classifier(micro_model(), "micro", {}, 4);
  EXPECT_THROW(InferenceBatcher(classifier, {5, std::chrono::milliseconds(1)}, nullptr), Error);
  InferenceBatcher batcher(classifier, {4, std::chrono::milliseconds(1)}, nullptr);
  EXPECT_THROW(batcher.submit(std::vector<float>(7)), Error);
}

TEST(ServeMetrics, PrometheusTextCountsRequestsAndLatencies) {
  ServeMetrics metrics;
  metrics.record_request("/v1/predict", 200, 0.003);
  metrics.record_request("/v1/predict", 200, 0.2);
  metrics.record_request("/v1/predict", 503, 0.0001);
  metrics.set_queue_depth(7);
  const std::string text = metrics.prometheus_text();
  EXPECT_NE(text.find("vitpipe_http_requests_total{route=\"/v1/predict\",status=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("vitpipe_http_requests_total{route=\"/v1/predict\",status=\"503\"} 1\n"), std::string::npos);
  // Cumulative buckets: two at or under 5 ms, three at or under 0.25 s, three in all.
  EXPECT_NE(text.find("vitpipe_http_request_duration_seconds_bucket{route=\"/v1/predict\",le=\"0.005\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("vitpipe_http_request_duration_seconds_bucket{route=\"/v1/predict\",le=\"0.25\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("vitpipe_http_request_duration_seconds_bucket{route=\"/v1/predict\",le=\"+Inf\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("vitpipe_http_request_duration_seconds_count{route=\"/v1/predict\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("vitpipe_queue_depth 7\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE vitpipe_http_request_duration_seconds histogram\n"), std::string::npos);
}

fs::path token_file(const std::string& name, const std::string& text) {
  const fs::path path = fs::temp_directory_path() / ("vitpipe_token_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path;
}

TEST(BearerToken, AcceptsOnlyTheToken) {
  const BearerToken token(token_file("good", "abc-DEF_123.~+/=\r\n"));
  EXPECT_TRUE(token.accepts("Bearer abc-DEF_123.~+/="));
  EXPECT_TRUE(token.accepts("bearer abc-DEF_123.~+/="));
  EXPECT_FALSE(token.accepts("Bearer abc-DEF_123.~+/"));
  EXPECT_FALSE(token.accepts("Bearer abc-DEF_123.~+/=x"));
  EXPECT_FALSE(token.accepts("Basic abc-DEF_123.~+/="));
  EXPECT_FALSE(token.accepts(""));
  EXPECT_FALSE(token.accepts("Bearer "));
}

TEST(BearerToken, RefusesAnEmptyOrMalformedFile) {
  EXPECT_THROW(BearerToken(token_file("empty", "\n")), Error);
  EXPECT_THROW(BearerToken(token_file("space", "two words\n")), Error);
  EXPECT_THROW(BearerToken(fs::path("/nonexistent/vitpipe/token")), Error);
  try {
    BearerToken(token_file("empty2", ""));
    FAIL() << "an empty token file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--token-file"), std::string::npos) << e.what();
  }
}

TEST(BearerToken, NamesAFolderGivenAsTheTokenFile) {
  // A folder read as empty text: it was refused as "the first line is empty".
  const fs::path folder = fs::temp_directory_path() / ("vitpipe_token_dir_" + std::to_string(::getpid()));
  fs::create_directories(folder);
  try {
    BearerToken token(folder);
    FAIL() << "a folder was accepted as the token file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder (expected a file whose first line is the token)"),
              std::string::npos)
        << e.what();
  }
  fs::remove(folder);
}

TEST(DerivedDicomUid, StableValidAndDistinct) {
  const std::string a = derived_dicom_uid("vitpipe sr\nmodel\n1.2.3");
  EXPECT_EQ(a, derived_dicom_uid("vitpipe sr\nmodel\n1.2.3"));
  EXPECT_NE(a, derived_dicom_uid("vitpipe sr\nmodel\n1.2.4"));
  EXPECT_EQ(a.rfind("2.25.", 0), 0u);
  EXPECT_LE(a.size(), 64u);
  EXPECT_NO_THROW(require_valid_dicom_uid(a, "derived"));
  EXPECT_NE(a[5], '0');  // no leading zero in the component
}

}  // namespace
}  // namespace vitpipe
