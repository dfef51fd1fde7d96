// Localization on boxes: the box geometry against hand-computed cases (pointing game, mass inside, IoBB and IoU of
// the thresholded map), NIH's 1024 frame scaled to the image as read, and the box list readers.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "../train/reference.h"
#include "evaluation/box_list.h"
#include "evaluation/box_localization.h"
#include "util/error.h"

namespace vitpipe {
namespace {

FindingBox box(double x, double y, double w, double h) {
  FindingBox b;
  b.x = x, b.y = y, b.w = w, b.h = h;
  return b;
}

// A 10 x 10 map: 1 on columns 0..3 of rows 0..3 (16 pixels), 0 elsewhere; its maximum (first) at (0, 0).
std::vector<float> corner_map() {
  std::vector<float> map(100, 0.0f);
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 4; ++i) map[static_cast<size_t>(j * 10 + i)] = 1.0f;
  return map;
}

TEST(BoxLocalization, WholeImageBoxIsAlwaysAHit) {
  const std::vector<float> map = corner_map();
  const BoxScore s = score_box(map, 10, 10, box(0, 0, 10, 10));
  EXPECT_TRUE(s.hit);
  EXPECT_DOUBLE_EQ(s.mass_inside, 1.0);
  EXPECT_DOUBLE_EQ(s.iobb, 1.0);
  EXPECT_DOUBLE_EQ(s.iou, 16.0 / 100.0);
  const LocalizationSummary sum = summarize_boxes("A", {s, s, s}, BootstrapOptions{50, 0.95, 1});
  EXPECT_DOUBLE_EQ(sum.pointing, 1.0);
  EXPECT_DOUBLE_EQ(sum.pointing_ci->low, 1.0);
}

TEST(BoxLocalization, BoxAroundTheMaximumHitsAndAFarBoxMisses) {
  std::vector<float> map(100, 0.1f);
  map[7 * 10 + 6] = 0.9f;  // maximum at column 6, row 7
  EXPECT_TRUE(score_box(map, 10, 10, box(5.5, 6.5, 2, 2)).hit);
  EXPECT_FALSE(score_box(map, 10, 10, box(0, 0, 3, 3)).hit);
  EXPECT_FALSE(score_box(map, 10, 10, box(7, 7, 3, 3)).hit) << "column 6's centre 6.5 is left of x = 7";
}

TEST(BoxLocalization, IobbAndIouByHand) {
  const std::vector<float> map = corner_map();
  // Box columns 2..7, rows 2..7 (36 pixels); the detected region (>= half the range) is the 16 corner pixels; they
  // share columns 2..3 of rows 2..3: IoBB 4 / 16 (over the region, not the box), IoU 4 / 48; mass inside 4 / 16.
  const BoxScore s = score_box(map, 10, 10, box(2, 2, 6, 6));
  EXPECT_FALSE(s.hit);
  EXPECT_DOUBLE_EQ(s.iobb, 0.25);
  EXPECT_DOUBLE_EQ(s.iou, 4.0 / 48.0);
  EXPECT_DOUBLE_EQ(s.mass_inside, 0.25);
  const BoxScore none = score_box(std::vector<float>(100, 0.0f), 10, 10, box(2, 2, 4, 4));
  EXPECT_DOUBLE_EQ(none.iobb, 0.0) << "a constant map detects nothing";
  const LocalizationSummary sum = summarize_boxes("A", {s, none}, std::nullopt);
  EXPECT_DOUBLE_EQ(sum.t_iobb[1], 0.5);  // IoBB > 0.2: one of two
  EXPECT_DOUBLE_EQ(sum.t_iobb[2], 0.0);  // > 0.3: none
  EXPECT_DOUBLE_EQ(sum.t_iou[0], 0.0);   // 4/48 is not > 0.1
}

TEST(BoxLocalization, NihFrameScaledToTheImageAsRead) {
  FindingBox b = box(512, 256, 128, 64);
  b.frame = 1024;
  const FindingBox s = box_in_image(b, 64, 64);
  EXPECT_DOUBLE_EQ(s.x, 32);
  EXPECT_DOUBLE_EQ(s.y, 16);
  EXPECT_DOUBLE_EQ(s.w, 8);
  EXPECT_DOUBLE_EQ(s.h, 4);
  EXPECT_DOUBLE_EQ(box_in_image(box(1, 2, 3, 4), 64, 64).x, 1) << "a generic list is in the image's own pixels";
}

TEST(BoxLocalization, ReadsNihAndGenericListsAndRefusesBadRows) {
  testing::ScratchDir dir("boxes");
  const auto nih = dir.path() / "BBox_List_2017.csv";
  std::ofstream(nih) << "Image Index,Finding Label,Bbox [x,y,w,h],,,\r\n"
                        "00013118_008.png,Atelectasis,225.08,547.02,86.78,79.19\r\n"
                        "00000032_037.png,Infiltrate,100,200,30,40\r\n";
  const std::vector<FindingBox> boxes = read_box_list(nih);
  ASSERT_EQ(boxes.size(), 2u);
  EXPECT_EQ(boxes[1].finding, "Infiltration");
  EXPECT_DOUBLE_EQ(boxes[0].x, 225.08);
  EXPECT_DOUBLE_EQ(boxes[0].frame, 1024);
  const auto generic = dir.path() / "boxes.csv";
  std::ofstream(generic) << "image,finding,x,y,w,h\na.png,Mass,1,2,3,4\n";
  EXPECT_DOUBLE_EQ(read_box_list(generic)[0].frame, 0);
  const auto bad = dir.path() / "bad.csv";
  std::ofstream(bad) << "image,finding,x,y,w,h\na.png,Mass,1,2,3\n";
  try {
    read_box_list(bad);
    FAIL() << "a row with 5 fields was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.csv line 2: expected 6 fields"), std::string::npos) << e.what();
  }
  const auto empty = dir.path() / "negative.csv";
  std::ofstream(empty) << "image,finding,x,y,w,h\na.png,Mass,1,2,0,4\n";
  EXPECT_THROW(read_box_list(empty), Error);
}

}  // namespace
}  // namespace vitpipe
