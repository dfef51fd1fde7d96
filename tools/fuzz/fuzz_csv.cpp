// The CSV readers: label CSVs (plain and gzip'd), csv: datasets (their label columns), NIH's Data_Entry files and
// the split lists. The first byte picks the reader; the rest is the file.
#include "data/chestxray14_metadata.h"
#include "data/csv_table.h"
#include "data/file_dataset.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 6;
  const std::string_view body = vitpipe::fuzz::as_text(data + 1, size - 1);
  const auto& dir = vitpipe::fuzz::scratch_directory();
  vitpipe::fuzz::expect_parse_or_refusal([&] {
    switch (mode) {
      case 0: {  // text in memory
        const vitpipe::CsvTable table = vitpipe::parse_csv(body, "fuzz.csv");
        for (const auto& row : table.rows)
          if (row.size() != table.header.size()) std::abort();
        break;
      }
      case 1: {  // gzip'd bytes on disk
        vitpipe::fuzz::write_file(dir / "labels.csv.gz", body);
        (void)vitpipe::read_csv(dir / "labels.csv.gz");
        break;
      }
      case 2: {  // a csv: dataset's label columns (images need not exist)
        vitpipe::fuzz::write_file(dir / "data.csv", body);
        vitpipe::DatasetOptions options;
        options.allow_missing = true;
        (void)vitpipe::open_csv_dataset(dir / "data.csv", options);
        break;
      }
      case 3: {  // NIH's Data_Entry_2017*.csv
        vitpipe::fuzz::write_file(dir / "Data_Entry_2017.csv", body);
        (void)vitpipe::read_chestxray14_csv(dir / "Data_Entry_2017.csv");
        break;
      }
      case 4: {  // a split list
        vitpipe::fuzz::write_file(dir / "test_list.txt", body);
        (void)vitpipe::read_line_list(dir / "test_list.txt");
        break;
      }
      default: {  // a gzip'd split list
        vitpipe::fuzz::write_file(dir / "test_list.txt.gz", body);
        (void)vitpipe::read_line_list(dir / "test_list.txt.gz");
        break;
      }
    }
  });
  return 0;
}
