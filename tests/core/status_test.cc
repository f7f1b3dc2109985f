#include "memfit/core/status.h"

#include <gtest/gtest.h>

#include "memfit/core/json.h"

namespace memfit {
namespace {

Expected<int> half(int x) {
  if (x % 2 != 0) return invalid_argument("odd");
  return x / 2;
}

Expected<int> quarter(int x) {
  MEMFIT_ASSIGN_OR_RETURN(int h, half(x));
  MEMFIT_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status check_even(int x) {
  MEMFIT_RETURN_IF_ERROR(half(x));
  return ok_status();
}

class Detail : public ErrorDetail {
 public:
  nlohmann::ordered_json to_json() const override { return {{"request_bytes", 42}}; }
  std::string to_text() const override { return "42 bytes"; }
};

TEST(Status, ValuesAndErrorsPropagate) {
  EXPECT_EQ(*quarter(8), 2);
  auto r = quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().message(), "odd");
  EXPECT_TRUE(check_even(4).ok());
  EXPECT_FALSE(check_even(3).ok());
}

TEST(Status, ContextAndDetailSurvive) {
  Error e = resource_exhausted("out of memory", std::make_shared<Detail>());
  Error ctx = e.with_context("replaying trace.csv");
  EXPECT_EQ(ctx.message(), "replaying trace.csv: out of memory");
  ASSERT_NE(ctx.detail(), nullptr);
  EXPECT_EQ(ctx.detail()->to_text(), "42 bytes");
  Json j = error_to_json(ctx);
  EXPECT_EQ(j["error"]["code"], "RESOURCE_EXHAUSTED");
  EXPECT_EQ(j["error"]["detail"]["request_bytes"], 42);
}

TEST(Json, TypedGettersNameTheKey) {
  auto j = parse_json(R"({"a": 5, "b": -1, "c": "x", "d": 1.5})", "test");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(*json_get_u64(*j, "a"), 5u);
  EXPECT_NE(json_get_u64(*j, "b").error().message().find("'b' must not be negative"), std::string::npos);
  EXPECT_NE(json_get_u64(*j, "z").error().message().find("missing key 'z'"), std::string::npos);
  EXPECT_EQ(*json_get_string(*j, "c"), "x");
  EXPECT_DOUBLE_EQ(*json_get_number(*j, "d"), 1.5);
  EXPECT_FALSE(json_get_string(*j, "a").ok());
  auto bad = parse_json("{\"a\": ", "spec.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("spec.json: not valid JSON"), std::string::npos);
}

}  // namespace
}  // namespace memfit
