// Text from untrusted sources made safe to print and to put in JSON.
#include "memfit/core/text.h"

#include <gtest/gtest.h>

#include "memfit/core/json.h"

namespace memfit {
namespace {

TEST(ValidUtf8, KeepsUtf8AndReplacesTheRest) {
  EXPECT_EQ(valid_utf8("plain"), "plain");
  EXPECT_EQ(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(valid_utf8("fa\xfflse"), "fa\xef\xbf\xbdlse");
  EXPECT_EQ(valid_utf8("\xc3"), "\xef\xbf\xbd");                                  // truncated sequence
  EXPECT_EQ(valid_utf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");                  // overlong '/'
  EXPECT_EQ(valid_utf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate
  EXPECT_EQ(valid_utf8("\xf4\x90\x80\x80").find("\xef\xbf\xbd"), 0u);             // above U+10FFFF
}

TEST(Excerpt, QuotesBoundedPrintableText) {
  EXPECT_EQ(excerpt("gpt"), "'gpt'");
  EXPECT_EQ(excerpt("a\nb\tc"), "'a?b?c'");
  const std::string long_text(1000, 'x');
  EXPECT_EQ(excerpt(long_text), "'" + std::string(kExcerptChars, 'x') + "'... (1000 bytes)");
  EXPECT_EQ(one_line("abc\n", 2), "ab... (4 bytes)");
}

TEST(JsonText, BytesThatAreNotUtf8NeverThrow) {
  Json j = {{"name", std::string("fa\xfflse")}};
  EXPECT_EQ(json_text(j), "{\"name\":\"fa\xef\xbf\xbdlse\"}");
  EXPECT_NO_THROW(json_to_output(j));
}

TEST(ParseJson, RefusesNestingDeeperThan256) {
  EXPECT_TRUE(parse_json(std::string(256, '[') + std::string(256, ']'), "ok.json").ok());
  auto deep = parse_json(std::string(100000, '[') + std::string(100000, ']'), "deep.json");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.error().message().find("nested more than 256"), std::string::npos);
  // Brackets inside strings are not nesting.
  EXPECT_TRUE(parse_json("{\"a\": \"" + std::string(1000, '[') + "\\\"[\"}", "s.json").ok());
}

}  // namespace
}  // namespace memfit
