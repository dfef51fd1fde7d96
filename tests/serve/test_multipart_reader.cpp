// The multipart reader of `vitpipe serve` (STOW-RS bodies): media types, part bytes exact for binary data, and every
// refusal a vitpipe::Error with its reason.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "serve/multipart_reader.h"
#include "util/error.h"

namespace vitpipe {
namespace {

using namespace std::string_literals;

// Runs `body` and checks that it throws a vitpipe::Error whose message contains `expected`.
template <class Body>
void expect_error(Body&& body, const std::string& expected) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one saying: " << expected;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

// A body as a client writes it: CRLF line ends, each part's headers, an empty line, its bytes.
std::string multipart_body(const std::string& boundary, const std::vector<std::pair<std::string, std::string>>& parts,
                           const std::string& preamble = "", const std::string& epilogue = "") {
  std::string body = preamble;
  for (const auto& [headers, bytes] : parts) body += "--" + boundary + "\r\n" + headers + "\r\n" + bytes + "\r\n";
  return body + "--" + boundary + "--" + epilogue;
}

// A DICOM-like file: preamble of NULs, "DICM", and bytes that look like line ends and delimiters.
std::string binary_instance(char seed) {
  std::string bytes(128, '\0');
  bytes += "DICM"s + '\x02' + '\0' + "\r\n--\r\n\n\r" + seed + '\0' + "--boundary" + '\xff' + "\r";
  for (int i = 0; i < 300; ++i) bytes += static_cast<char>((i * 37 + seed) & 0xff);
  return bytes;
}

bool lies_inside(std::string_view view, std::string_view buffer) {
  return view.data() >= buffer.data() && view.data() + view.size() <= buffer.data() + buffer.size();
}

TEST(MediaType, TypeSubtypeAndParametersLowerCasedNamesValuesAsSent) {
  const MediaType media = parse_media_type(R"(Multipart/Related; Type="application/dicom"; BOUNDARY=AbC-123)");
  EXPECT_EQ(media.type, "multipart");
  EXPECT_EQ(media.subtype, "related");
  ASSERT_EQ(media.parameters.size(), 2u);
  EXPECT_EQ(media.parameters[0].first, "type");
  EXPECT_EQ(media.parameters[0].second, "application/dicom");
  EXPECT_EQ(media.parameters[1].first, "boundary");
  EXPECT_EQ(media.parameter("Boundary"), "AbC-123");
  EXPECT_TRUE(media.has_parameter("TYPE"));
  EXPECT_EQ(media.parameter("start"), "");
  EXPECT_FALSE(media.has_parameter("start"));
}

TEST(MediaType, QuotedStringsWhitespaceAndEmptyParameters) {
  const MediaType media = parse_media_type(" text/plain ;charset = utf-8;; q=\"a \\\"b\\\\ c;d=e\" ; empty=\"\" ;");
  EXPECT_EQ(media.type, "text");
  EXPECT_EQ(media.subtype, "plain");
  EXPECT_EQ(media.parameter("charset"), "utf-8");
  EXPECT_EQ(media.parameter("q"), "a \"b\\ c;d=e");
  EXPECT_TRUE(media.has_parameter("empty"));
  EXPECT_EQ(media.parameter("empty"), "");
  EXPECT_EQ(parse_media_type("application/dicom").parameters.size(), 0u);
  EXPECT_EQ(parse_media_type("multipart/related; type=application/dicom; boundary=a:b?c").parameter("type"),
            "application/dicom");
}

TEST(MediaType, MalformedValuesAreRefusedWithTheReason) {
  expect_error([] { parse_media_type(""); }, "expected a media type");
  expect_error([] { parse_media_type("multipart"); }, "expected '/' and a subtype");
  expect_error([] { parse_media_type("multipart/"); }, "expected a subtype");
  expect_error([] { parse_media_type("multipart/related boundary=x"); }, "parameters follow ';'");
  expect_error([] { parse_media_type("multipart/related; boundary"); }, "parameter boundary has no '='");
  expect_error([] { parse_media_type("multipart/related; boundary="); }, "parameter boundary has no value");
  expect_error([] { parse_media_type("multipart/related; boundary=\"abc"); }, "unterminated quoted string");
  expect_error([] { parse_media_type("multipart/related; boundary=\"abc\\"); }, "unterminated quoted string");
  expect_error([] { parse_media_type("multipart/related; boundary=a; Boundary=b"); }, "boundary appears twice");
  expect_error([] { parse_media_type("multipart/related; =x"); }, "expected a parameter name");
  expect_error([] { parse_media_type("a/b; x=\"\x01\""); }, "control character");
  expect_error([] { parse_media_type("a\x00/b"s); }, R"(Content-Type "a\x00/b")");
}

TEST(MultipartReader, OnePartWithHeadersAndExactBytes) {
  const std::string body = multipart_body("xyz", {{"Content-Type: application/dicom\r\n", "hello"}});
  const auto parts = parse_multipart(body, "xyz");
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].body, "hello");
  ASSERT_EQ(parts[0].headers.size(), 1u);
  EXPECT_EQ(parts[0].headers[0].first, "content-type");
  EXPECT_EQ(parts[0].headers[0].second, "application/dicom");
  EXPECT_TRUE(lies_inside(parts[0].body, body));
}

TEST(MultipartReader, ThreeBinaryPartsWithNulCrLfAndBoundaryLookalikes) {
  const std::vector<std::string> instances = {binary_instance('a'), binary_instance('b'), "\r\n"s + '\0' + "\r\n"};
  std::vector<std::pair<std::string, std::string>> parts;
  for (const auto& bytes : instances) parts.emplace_back("Content-Type: application/dicom\r\n", bytes);
  // "--boundary" occurs in the data, but never at a line start: the real boundary is "boundary0".
  const std::string body = multipart_body("boundary0", parts);
  const auto parsed = parse_multipart(body, "boundary0");
  ASSERT_EQ(parsed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(parsed[i].body, instances[i]) << "part " << i;
    EXPECT_TRUE(lies_inside(parsed[i].body, body));
  }
}

TEST(MultipartReader, BoundaryAsAPrefixOfDataIsData) {
  // Not at a line start, and at a line start but followed by more characters: both data (RFC 2046 forbids the
  // latter in a body; Python's email parser takes it as data too).
  const std::string data = "x--b\r\n--bb\r\n--b-\r\n--b--x\r\nend";
  const std::string body = multipart_body("b", {{"", data}});
  const auto parts = parse_multipart(body, "b");
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].body, data);
}

TEST(MultipartReader, PreambleAndEpilogueAreIgnored) {
  const std::string body =
      multipart_body("sep", {{"A: 1\r\n", "one"}, {"A: 2\r\n", "two"}},
                     "This is a preamble.\r\n--sep is mentioned here\r\n", "\r\nThis is the epilogue.\r\n--sep\r\n");
  const auto parts = parse_multipart(body, "sep");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].body, "one");
  EXPECT_EQ(parts[1].body, "two");
  EXPECT_EQ(parts[1].header("a"), "2");
}

TEST(MultipartReader, QuotedBoundaryWithSpecialCharacters) {
  const std::string boundary = "'()+_,-./:=? x";  // RFC 2046 bchars, a space inside
  const MediaType media = parse_media_type("multipart/related; boundary=\"" + boundary + "\"");
  ASSERT_EQ(media.parameter("boundary"), boundary);
  const std::string body = multipart_body(boundary, {{"", "a"}, {"", "b"}});
  const auto parts = parse_multipart(body, media.parameter("boundary"));
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].body, "a");
  EXPECT_EQ(parts[1].body, "b");
  const std::string longest(70, 'q');
  EXPECT_EQ(parse_multipart(multipart_body(longest, {{"", "z"}}), longest).at(0).body, "z");
  const std::string orthancs(73, 'o');  // Orthanc 1.10's STOW-RS client goes past RFC 2046's 70
  EXPECT_EQ(parse_multipart(multipart_body(orthancs, {{"", "y"}}), orthancs).at(0).body, "y");
}

TEST(MultipartReader, TransportPaddingAfterDelimiters) {
  const std::string body = "--b \t \r\nX: y\r\n\r\none\r\n--b\t\r\n\r\ntwo\r\n--b--  \r\nepilogue";
  const auto parts = parse_multipart(body, "b");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].body, "one");
  EXPECT_EQ(parts[0].header("X"), "y");
  EXPECT_EQ(parts[1].body, "two");
  EXPECT_TRUE(parts[1].headers.empty());
}

TEST(MultipartReader, HeadersCaseInsensitiveTrimmedAndUnfolded) {
  const std::string body = multipart_body(
      "b", {{"CONTENT-type:   application/DICOM  \r\nContent-Location: a\r\n  b\r\nX-Empty:\r\n", "data"}});
  const auto parts = parse_multipart(body, "b");
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].header("content-type"), "application/DICOM");
  EXPECT_EQ(parts[0].header("Content-Type"), "application/DICOM");
  EXPECT_EQ(parts[0].header("content-location"), "a b");
  EXPECT_EQ(parts[0].header("x-empty"), "");
  EXPECT_EQ(parts[0].header("absent"), "");
  EXPECT_EQ(parts[0].body, "data");
}

// fuzz_multipart (tools/fuzz/regressions/multipart/folded-line-after-an-empty-value): a folded line after an empty
// value was joined with a space, so the value had a leading space that a value written out again loses.
TEST(MultipartReader, FoldedLinesJoinWithOneSpaceBetweenNonEmptyPieces) {
  const auto parts = parse_multipart("--b\nA:\r\n fotion[\r\n \r\nB: x\r\n\ty \r\n\n\n--b--", "b");
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].header("a"), "fotion[");
  EXPECT_EQ(parts[0].header("b"), "x y");
}

TEST(MultipartReader, PartsWithoutHeadersEmptyPartsAndHeaderOnlyParts) {
  const auto parts = parse_multipart("--b\r\n\r\nbody\r\n--b\r\n\r\n--b\r\n--b\r\nA: 1\r\n--b--", "b");
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].body, "body");
  EXPECT_TRUE(parts[0].headers.empty());
  EXPECT_EQ(parts[1].body, "");  // nothing but the next delimiter's CRLF
  EXPECT_EQ(parts[2].body, "");  // not even that: the delimiter shares the line end of the one before
  EXPECT_EQ(parts[3].header("a"), "1");
  EXPECT_EQ(parts[3].body, "");
  EXPECT_TRUE(parse_multipart("--b--\r\n", "b").empty());  // no parts: dicom_parts_of_stow_request refuses that
}

TEST(MultipartReader, BareLineFeedsAreAccepted) {
  const auto parts = parse_multipart("preamble\n--b\nContent-Type: a/b\n\nline 1\r\nline 2\n--b\n\n\r\n--b--\n", "b");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].header("content-type"), "a/b");
  EXPECT_EQ(parts[0].body, "line 1\r\nline 2");
  EXPECT_EQ(parts[1].body, "");  // an empty line (LF), then the delimiter's CRLF
}

TEST(MultipartReader, BoundaryRefusals) {
  const std::string body = multipart_body("b", {{"", "x"}});
  expect_error([&] { parse_multipart(body, ""); }, "multipart body: no boundary");
  expect_error([&] { parse_multipart(body, std::string(kMaxBoundaryLength + 1, 'b')); },
               concat(kMaxBoundaryLength + 1, " characters long; at most ", kMaxBoundaryLength));
  expect_error([&] { parse_multipart(body, "b\r"); }, "not printable ASCII");
  expect_error([&] { parse_multipart(body, "b "); }, "ends with a space");
}

TEST(MultipartReader, BodyWithoutItsFirstDelimiterIsRefused) {
  expect_error([] { parse_multipart("", "b"); }, "multipart body: no delimiter line \"--b\"");
  expect_error([] { parse_multipart("just text\r\n", "b"); }, "no delimiter line");
  expect_error([] { parse_multipart(multipart_body("other", {{"", "x"}}), "b"); }, "no delimiter line");
  expect_error([] { parse_multipart("x--b\r\n\r\nbody\r\n--bb--", "b"); }, "no delimiter line");
}

TEST(MultipartReader, TruncatedBodiesAreRefused) {
  expect_error([] { parse_multipart("--b\r\n\r\ndata", "b"); }, "no close delimiter \"--b--\" after part 0");
  expect_error([] { parse_multipart("--b\r\n\r\none\r\n--b\r\n\r\ntwo\r\n--b", "b"); }, "after part 1 (the body");
  expect_error([] { parse_multipart("--b", "b"); }, "no delimiter line");
}

// A body cut at every byte either parses to the same parts (cut in the epilogue) or is refused: never wrong bytes,
// never a read past the cut (the prefix is copied to a buffer of its exact size, for AddressSanitizer).
TEST(MultipartReader, BodyCutAtEveryByteParsesTheSameOrIsRefused) {
  const std::string first = binary_instance('1');
  const std::string second = "\r\n\r\n--b\r\n"s + '\0';
  const std::string body = multipart_body(
      "b0undary",
      {{"Content-Type: application/dicom\r\n", first}, {"content-type: application/dicom\r\nX: y\r\n", second}},
      "preamble\r\n", "\r\nepilogue\r\n");
  const size_t complete = body.find("--b0undary--") + std::string("--b0undary--").size();
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    const std::vector<char> buffer(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(cut));
    const std::string_view prefix(buffer.data(), buffer.size());
    try {
      const auto parts = parse_multipart(prefix, "b0undary");
      EXPECT_GE(cut, complete) << "a body cut at " << cut << " was accepted";
      ASSERT_EQ(parts.size(), 2u) << "cut at " << cut;
      EXPECT_EQ(parts[0].body, first) << "cut at " << cut;
      EXPECT_EQ(parts[1].body, second) << "cut at " << cut;
      EXPECT_EQ(parts[1].header("x"), "y");
      for (const auto& part : parts) EXPECT_TRUE(lies_inside(part.body, prefix));
    } catch (const Error& e) {
      EXPECT_LT(cut, complete) << "a complete body (cut at " << cut << ") was refused: " << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("multipart body: ", 0), 0u) << e.what();
    }
  }
}

// Adversarial bodies of 4 MB: near-misses of the delimiter everywhere. Linear work takes milliseconds; quadratic
// work would not finish within ctest's timeout.
TEST(MultipartReader, NearMissDelimitersEverywhereTakeLinearTime) {
  const std::string longest(70, 'q');
  std::string near_misses = "--" + longest + "\r\n\r\n";
  while (near_misses.size() < 4'000'000) near_misses += "\n--" + longest.substr(0, 69) + "z\n--" + longest + "x";
  EXPECT_EQ(parse_multipart(near_misses + "\r\n--" + longest + "--", longest).size(), 1u);
  expect_error([&] { parse_multipart(near_misses, longest); }, "the body is truncated");
  const std::string line_feeds = "--b\r\n" + std::string(4'000'000, '\n');
  expect_error([&] { parse_multipart(line_feeds, "b"); }, "the body is truncated");
  const std::string dashes = "--b\r\n\r\n" + std::string(4'000'000, '-');
  expect_error([&] { parse_multipart(dashes, "b"); }, "the body is truncated");
}

TEST(MultipartReader, TooManyPartsAreRefused) {
  std::vector<std::pair<std::string, std::string>> parts(4, {"", "x"});
  const std::string body = multipart_body("b", parts);
  MultipartLimits limits;
  limits.max_parts = 4;
  EXPECT_EQ(parse_multipart(body, "b", limits).size(), 4u);
  limits.max_parts = 3;
  expect_error([&] { parse_multipart(body, "b", limits); }, "multipart body: more than 3 parts");
}

TEST(MultipartReader, HeaderSectionOverTheLimitIsRefused) {
  MultipartLimits limits;
  limits.max_header_bytes = 32;
  const std::string header = "X: " + std::string(27, 'v') + "\r\n";  // 32 bytes, then the empty line's 2
  expect_error(
      [&] {
        parse_multipart(multipart_body("b", {{header, "data"}}), "b", limits);
      },
      "part 0: no end of its header section within 32 bytes");
  limits.max_header_bytes = 34;
  EXPECT_EQ(parse_multipart(multipart_body("b", {{header, "data"}}), "b", limits).at(0).body, "data");
  // A binary part without the empty line before its bytes: refused after the limit, not scanned to its end.
  expect_error(
      [] {
        parse_multipart(multipart_body("b", {{"", ""}}).insert(5, std::string(20000, 'z')), "b");
      },
      "within 16384 bytes");
}

TEST(MultipartReader, MalformedHeaderLinesAreRefused) {
  expect_error([] { parse_multipart("--b\r\nno colon here\r\n\r\nx\r\n--b--", "b"); },
               "part 0: header line \"no colon here\" has no ':'");
  expect_error([] { parse_multipart("--b\r\n\r\nx\r\n--b\r\n: v\r\n\r\nx\r\n--b--", "b"); },
               "part 1: malformed header name \"\"");
  expect_error([] { parse_multipart("--b\r\nBad Name: v\r\n\r\nx\r\n--b--", "b"); }, "malformed header name");
  expect_error([] { parse_multipart("--b\r\n folded: v\r\n\r\nx\r\n--b--", "b"); }, "a continuation of no header");
  expect_error([] { parse_multipart("--b\r\nA: \x01\r\n\r\nx\r\n--b--", "b"); }, "control character");
  expect_error([] { parse_multipart("--b\r\n\x00\x01\x02\r\n--b--"s, "b"); }, "has no ':'");
}

std::string read_fixture(const std::string& name) {
  std::ifstream in(std::string(VITPIPE_SOURCE_DIR) + "/tests/serve/fixtures/" + name, std::ios::binary);
  if (!in) return {};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Messages Python's email package wrote (tests/serve/make_multipart_fixtures.py): CRLF (policy HTTP) and LF
// (compat32, which folds the Content-Type header) line ends, a preamble and epilogue. vitpipe reads the same part
// bytes as Python's own parser.
TEST(StowRequest, MessagesPythonsEmailPackageWroteReadAsPythonReadsThem) {
  for (const auto& [name, part_count] : std::vector<std::pair<std::string, size_t>>{
           {"python_email_http", 2}, {"python_email_preamble_epilogue", 3}, {"python_email_lf", 1}}) {
    SCOPED_TRACE(name);
    const std::string message = read_fixture(name + ".mime");
    ASSERT_FALSE(message.empty()) << "missing fixture";
    // The message's header section, unfolded (a line end followed by whitespace goes), then its body.
    const bool crlf = message.find("\r\n\r\n") < message.find("\n\n");
    const size_t header_end = crlf ? message.find("\r\n\r\n") + 4 : message.find("\n\n") + 2;
    std::string headers;
    for (size_t i = 0; i < header_end; ++i) {
      if (message[i] == '\r') continue;
      if (message[i] == '\n' && (message[i + 1] == ' ' || message[i + 1] == '\t')) continue;
      headers += message[i];
    }
    const size_t content_type_at = headers.find("Content-Type: ") + std::string("Content-Type: ").size();
    const std::string content_type =
        headers.substr(content_type_at, headers.find('\n', content_type_at) - content_type_at);
    const std::string_view body = std::string_view(message).substr(header_end);
    const auto instances = dicom_parts_of_stow_request(content_type, body);
    ASSERT_EQ(instances.size(), part_count) << content_type;
    for (size_t i = 0; i < part_count; ++i) {
      const std::string expected = read_fixture(name + ".part" + std::to_string(i));
      EXPECT_EQ(instances[i], expected) << "part " << i;
      EXPECT_TRUE(lies_inside(instances[i], body));
    }
  }
}

// Some clients write a CRLF before the first delimiter (an empty preamble ended by its line end).
TEST(StowRequest, LineEndBeforeTheFirstDelimiter) {
  const std::string body = "\r\n--B\r\nContent-Type: application/dicom\r\n\r\nDICM\r\n--B--";
  const auto instances =
      dicom_parts_of_stow_request(R"(multipart/related; type="application/dicom"; boundary=B)", body);
  ASSERT_EQ(instances.size(), 1u);
  EXPECT_EQ(instances[0], "DICM");
}

TEST(StowRequest, DicomPartsInOrder) {
  const std::string body = multipart_body("BOUNDARY", {{"Content-Type: application/dicom\r\n", binary_instance('x')},
                                                       {"content-type: Application/DICOM; transfer-syntax=1.2.840."
                                                        "10008.1.2.1\r\nContent-Length: 3\r\n",
                                                        "abc"}});
  const auto instances =
      dicom_parts_of_stow_request(R"(multipart/related; type="application/dicom"; boundary=BOUNDARY)", body);
  ASSERT_EQ(instances.size(), 2u);
  EXPECT_EQ(instances[0], binary_instance('x'));
  EXPECT_EQ(instances[1], "abc");
  EXPECT_TRUE(lies_inside(instances[0], body) && lies_inside(instances[1], body));
  // Names, type and subtype in any case; a part without a Content-Type takes the request's type.
  EXPECT_EQ(dicom_parts_of_stow_request("MULTIPART/Related; TYPE=\"Application/Dicom\"; Boundary=\"b\"",
                                        multipart_body("b", {{"", "raw"}}))
                .at(0),
            "raw");
}

TEST(StowRequest, WithoutTypeParameterEveryPartSaysApplicationDicom) {
  EXPECT_EQ(dicom_parts_of_stow_request("multipart/related; boundary=b",
                                        multipart_body("b", {{"Content-Type: application/dicom\r\n", "d"}}))
                .size(),
            1u);
  expect_error(
      [] {
        dicom_parts_of_stow_request("multipart/related; boundary=b", multipart_body("b", {{"", "d"}}));
      },
      "STOW-RS request: part 0 has no Content-Type and the request no type parameter");
}

TEST(StowRequest, WrongMediaTypeNamesTheExpectedOne) {
  const std::string body = multipart_body("b", {{"Content-Type: application/dicom\r\n", "d"}});
  const std::string expected = R"(multipart/related; type="application/dicom")";
  expect_error([&] { dicom_parts_of_stow_request("application/dicom", body); }, "is not " + expected);
  expect_error([&] { dicom_parts_of_stow_request("multipart/form-data; boundary=b", body); }, "is not " + expected);
  expect_error([&] { dicom_parts_of_stow_request("", body); }, "expected " + expected);
  expect_error(
      [&] { dicom_parts_of_stow_request(R"(multipart/related; type="application/dicom+json"; boundary=b)", body); },
      R"(type="application/dicom+json" is not supported)");
  expect_error([&] { dicom_parts_of_stow_request(R"(multipart/related; type="nonsense"; boundary=b)", body); },
               "the type parameter: Content-Type \"nonsense\"");
  expect_error([&] { dicom_parts_of_stow_request(R"(multipart/related; type="application/dicom")", body); },
               "has no boundary parameter");
}

TEST(StowRequest, PartsOtherThanBinaryInstancesAreRefusedByIndex) {
  const std::string body = multipart_body(
      "b", {{"Content-Type: application/dicom\r\n", "d"}, {"Content-Type: application/dicom+json\r\n", "[{}]"}});
  expect_error([&] { dicom_parts_of_stow_request(R"(multipart/related; type="application/dicom"; boundary=b)", body); },
               "STOW-RS request: part 1 is application/dicom+json; vitpipe takes binary DICOM instances only");
  const std::string base64 =
      multipart_body("b", {{"Content-Type: application/dicom\r\nContent-Transfer-Encoding: base64\r\n", "RElDTQ=="}});
  expect_error(
      [&] { dicom_parts_of_stow_request(R"(multipart/related; type="application/dicom"; boundary=b)", base64); },
      "part 0 has Content-Transfer-Encoding \"base64\"");
  expect_error([] { dicom_parts_of_stow_request("multipart/related; type=application/dicom; boundary=b", "--b--"); },
               "the multipart body has no parts");
  expect_error(
      [] {
        dicom_parts_of_stow_request("multipart/related; type=application/dicom; boundary=b",
                                    multipart_body("b", {{"Content-Type: application/\r\n", "d"}}));
      },
      "STOW-RS request: part 0: Content-Type \"application/\": expected a subtype");
}

}  // namespace
}  // namespace vitpipe
