// Radiologists' boxes around findings: NIH's BBox_List_2017.csv (header "Image Index,Finding Label,Bbox [x,y,w,h]"
// then empty names; rows image, finding, x, y, w, h in the 1024 x 1024 frame of the released PNGs; "Infiltrate" for
// Infiltration) or a generic CSV with header image,finding,x,y,w,h in the pixels of the image as distributed. .gz is
// read too.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace vitpipe {

struct FindingBox {
  std::string image;    // file name as listed (NIH: "00013118_008.png")
  std::string finding;  // the model's label name ("Infiltrate" read as "Infiltration")
  double x = 0, y = 0, w = 0, h = 0;
  double frame = 0;  // NIH: 1024, the side the coordinates refer to; 0 = the image's own pixels
  int64_t line = 0;
};

// Refuses, with one line naming the file and line: an unknown header, a row without 6 fields, a coordinate that is not
// a number, a box with w or h <= 0 or a negative corner.
std::vector<FindingBox> read_box_list(const std::filesystem::path& path);

// The box in the pixels of an image `width` x `height` as vitpipe reads it: NIH's 1024 frame scaled per axis.
FindingBox box_in_image(const FindingBox& box, int64_t width, int64_t height);

}  // namespace vitpipe
