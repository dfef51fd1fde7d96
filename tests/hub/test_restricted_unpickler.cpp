// The restricted unpickler on hand-written pickles: the opcodes a state dict may use, and refusals.
#include <gtest/gtest.h>

#include <string>

using namespace std::string_literals;

#include "io/restricted_unpickler.h"
#include "util/error.h"

namespace vitpipe {
namespace {

using Kind = PickleObject::Kind;

PickleResult unpickle(const std::string& bytes) { return restricted_unpickle(bytes, "test.pkl"); }

std::string refusal(const std::string& bytes) {
  try {
    unpickle(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(RestrictedUnpickler, ReadsScalarsOfEveryEncoding) {
  // [BININT1 7, BININT2 0x0102, BININT -2, LONG1 -1 (1 byte), INT "42", LONG "-5L", True, False, None, "ab",
  //  BINFLOAT 1.5, FLOAT "2.25", SHORT_BINBYTES "\x00\x01"]
  std::string bytes =
      "\x80\x02(K\x07M\x02\x01J\xfe\xff\xff\xff\x8a\x01\xff"
      "I42\nL-5L\n\x88\x89NX\x02\x00\x00\x00"
      "ab"
      "G\x3f\xf8\x00\x00\x00\x00\x00\x00"
      "F2.25\n"
      "C\x02\x00\x01"
      "l."s;
  PickleResult result = unpickle(bytes);
  const PickleObject& list = result.root_object();
  ASSERT_EQ(list.kind, Kind::list);
  ASSERT_EQ(list.items.size(), 13u);
  EXPECT_EQ(result.at(list.items[0]).integer, 7);
  EXPECT_EQ(result.at(list.items[1]).integer, 0x0102);
  EXPECT_EQ(result.at(list.items[2]).integer, -2);
  EXPECT_EQ(result.at(list.items[3]).integer, -1);
  EXPECT_EQ(result.at(list.items[4]).integer, 42);
  EXPECT_EQ(result.at(list.items[5]).integer, -5);
  EXPECT_EQ(result.at(list.items[6]).kind, Kind::boolean);
  EXPECT_EQ(result.at(list.items[6]).integer, 1);
  EXPECT_EQ(result.at(list.items[7]).integer, 0);
  EXPECT_EQ(result.at(list.items[8]).kind, Kind::none);
  EXPECT_EQ(result.at(list.items[9]).text, "ab");
  EXPECT_DOUBLE_EQ(result.at(list.items[10]).floating, 1.5);
  EXPECT_DOUBLE_EQ(result.at(list.items[11]).floating, 2.25);
  EXPECT_EQ(result.at(list.items[12]).kind, Kind::bytes);
  EXPECT_EQ(result.at(list.items[12]).text, std::string("\x00\x01", 2));
  EXPECT_EQ(result.consumed, bytes.size());
}

TEST(RestrictedUnpickler, MemoFramesAndStackGlobal) {
  // Protocol 4: FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL of an allowed global, BINGET.
  std::string body = std::string("\x8c\x0b", 2) + "collections" + "\x94" + std::string("\x8c\x0b", 2) + "OrderedDict" +
                     "\x94\x93\x94)R\x94h\x03\x86.";
  std::string bytes = std::string("\x80\x04\x95", 3) + std::string(8, '\0') + body;
  PickleResult result = unpickle(bytes);
  const PickleObject& pair = result.root_object();
  ASSERT_EQ(pair.kind, Kind::tuple);
  ASSERT_EQ(pair.items.size(), 2u);
  EXPECT_EQ(pair.items[0], pair.items[1]);  // the memo returns the same object
  EXPECT_EQ(result.at(pair.items[0]).kind, Kind::dict);
}

TEST(RestrictedUnpickler, StopsAtStopSoPicklesCanBeChained) {
  PickleResult result = unpickle(std::string("\x80\x02K\x05.\x80\x02K\x06.", 10));
  EXPECT_EQ(result.consumed, 5u);
  EXPECT_EQ(result.root_object().integer, 5);
}

TEST(RestrictedUnpickler, BigIntegersKeepTheirBytes) {
  // torch's legacy magic number 0x1950a86a20f9469cfc6c as LONG1.
  PickleResult result = unpickle(std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15));
  EXPECT_EQ(result.root_object().kind, Kind::big_integer);
  EXPECT_EQ(result.root_object().text.size(), 10u);
}

TEST(RestrictedUnpickler, RefusesGlobalsOutsideTheStateDictSubset) {
  EXPECT_NE(refusal("\x80\x02"
                    "cposix\nsystem\nX\x02\x00\x00\x00lsR."s)
                .find("refusing global posix.system"),
            std::string::npos);
  EXPECT_NE(refusal("cbuiltins\ngetattr\n."s).find("refusing global builtins.getattr"), std::string::npos);
  EXPECT_NE(refusal("ctorch\nload\n."s).find("refusing global torch.load"), std::string::npos);
  EXPECT_NE(refusal("ctorch\nShortStorage\n."s).find("torch.ShortStorage is not supported"), std::string::npos);
  // The message names the place.
  EXPECT_NE(refusal("\x80\x02"
                    "cos\nsystem\n."s)
                .find("test.pkl: byte 2:"),
            std::string::npos);
}

TEST(RestrictedUnpickler, RefusesCallsOfAllowedGlobalsThatAreNotRebuilds) {
  EXPECT_NE(refusal("ctorch\nFloatStorage\n)R."s).find("calling torch.FloatStorage is not allowed"), std::string::npos);
  EXPECT_NE(refusal("K\x01)R."s).find("which is not callable"), std::string::npos);
  // _rebuild_tensor_v2 with something that is not a storage.
  EXPECT_NE(refusal("ctorch._utils\n_rebuild_tensor_v2\n(K\x00K\x00)))\x89}tR."s).find("needs a storage"),
            std::string::npos);
}

TEST(RestrictedUnpickler, RefusesObjectBuildingOpcodes) {
  EXPECT_NE(refusal("(iposix\nsystem\n."s).find("opcode INST is not allowed"), std::string::npos);
  EXPECT_NE(refusal("(ccollections\nOrderedDict\no."s).find("opcode OBJ is not allowed"), std::string::npos);
  EXPECT_NE(refusal("ccollections\nOrderedDict\n)\x81."s).find("opcode NEWOBJ is not allowed"), std::string::npos);
  EXPECT_NE(refusal("P0\n."s).find("opcode PERSID is not allowed"), std::string::npos);
  EXPECT_NE(refusal("\xff."s).find("unknown pickle opcode 0xff"), std::string::npos);
}

TEST(RestrictedUnpickler, RefusesMalformedStreams) {
  EXPECT_NE(refusal("\x80\x02}"s).find("ends without a STOP"), std::string::npos);
  EXPECT_NE(refusal("X\x10\x00\x00\x00"
                    "abc"s)
                .find("truncated"),
            std::string::npos);
  EXPECT_NE(refusal("a."s).find("stack is empty"), std::string::npos);
  EXPECT_NE(refusal("t."s).find("needs a MARK"), std::string::npos);
  EXPECT_NE(refusal("h\x05."s).find("never stored"), std::string::npos);
  EXPECT_NE(refusal("K\x01K\x02"
                    "a."s)
                .find("APPEND applied to an int"),
            std::string::npos);
  EXPECT_NE(refusal("\x80\x09."s).find("pickle protocol 9"), std::string::npos);
  EXPECT_NE(refusal("\x8b\x00\x00\x01\x00."s).find("truncated"), std::string::npos);  // LONG4 of 65536 bytes
  EXPECT_NE(refusal("\x8a\x50"s + std::string(0x50, '\x01') + "."s).find("an integer of 80 bytes"), std::string::npos);
  // A MARK bomb is refused before it costs anything.
  EXPECT_NE(refusal(std::string(100000, '(') + "."s).find("MARKs nested more than"), std::string::npos);
}

TEST(RestrictedUnpickler, LimitsObjectCount) {
  UnpicklerLimits limits;
  limits.max_objects = 1000;
  std::string bytes = "(" + std::string(2000, 'N') + "l.";
  EXPECT_THROW(restricted_unpickle(bytes, "test.pkl", limits), Error);
}

TEST(RestrictedUnpickler, BuildsTensorRecordsFromPersistentStorages) {
  // {'w': _rebuild_tensor_v2(('storage', FloatStorage, '0', 'cpu', 6), 2, (2, 2), (2, 1), False, OrderedDict())}
  std::string bytes =
      "\x80\x02}X\x01\x00\x00\x00"
      "w"
      "ctorch._utils\n_rebuild_tensor_v2\n"
      "((X\x07\x00\x00\x00"
      "storage"
      "ctorch\nFloatStorage\nX\x01\x00\x00\x00"
      "0"
      "X\x03\x00\x00\x00"
      "cpu"
      "K\x06tQ"
      "K\x02K\x02K\x02\x86K\x02K\x01\x86\x89"
      "ccollections\nOrderedDict\n)RtRs."s;
  PickleResult result = unpickle(bytes);
  ASSERT_EQ(result.tensors.size(), 1u);
  ASSERT_EQ(result.storages.size(), 1u);
  EXPECT_EQ(result.storages[0].key, "0");
  EXPECT_EQ(result.storages[0].dtype, DType::f32);
  EXPECT_EQ(result.storages[0].numel, 6);
  EXPECT_EQ(result.tensors[0].storage_offset, 2);
  EXPECT_EQ(result.tensors[0].size, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(result.tensors[0].stride, (std::vector<int64_t>{2, 1}));
  const PickleObject& dict = result.root_object();
  ASSERT_EQ(dict.items.size(), 2u);
  EXPECT_EQ(result.at(dict.items[1]).kind, Kind::tensor);
}

}  // namespace
}  // namespace vitpipe
