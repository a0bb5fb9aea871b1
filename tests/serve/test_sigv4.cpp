// SigV4 as AWS's own test suite states it (get-vanilla), and the rules
// q serve adds: the clock-skew window, an unknown key, a wrong secret.
#include <gtest/gtest.h>

#include "cli/serve/sigv4.hpp"

namespace {

serve::SignedRequest vanilla() {
  return {"GET", "/", {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}}, ""};
}

constexpr q::Millis kVanillaTime = 1440938160000;  // 2015-08-30T12:36:00Z

TEST(SigV4, AwsTestSuiteGetVanilla) {
  EXPECT_EQ(
      serve::signature(vanilla(), "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20150830T123600Z",
                       "20150830/us-east-1/service/aws4_request", {"host", "x-amz-date"}),
      "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

serve::SignedRequest signed_sqs(const std::string& secret, const std::string& key = "AKID") {
  auto r = vanilla();
  r.method = "POST";
  r.body = "Action=ListQueues";
  std::string scope = "20150830/us-east-1/sqs/aws4_request";
  std::string sig = serve::signature(r, secret, "20150830T123600Z", scope, {"host", "x-amz-date"});
  r.headers.emplace_back("Authorization", "AWS4-HMAC-SHA256 Credential=" + key + "/" + scope +
                                              ", SignedHeaders=host;x-amz-date, Signature=" + sig);
  return r;
}

TEST(SigV4, VerifiesAndNamesTheRegion) {
  std::string region;
  auto f = serve::verify(signed_sqs("s3cret"), {{"AKID", "s3cret"}}, kVanillaTime, region);
  EXPECT_EQ(f.code, "");
  EXPECT_EQ(region, "us-east-1");
}

TEST(SigV4, RefusesWrongSecretUnknownKeyAndTamperedBody) {
  std::string region;
  serve::Credentials c{{"AKID", "s3cret"}};
  EXPECT_EQ(serve::verify(signed_sqs("wrong"), c, kVanillaTime, region).code,
            "SignatureDoesNotMatch");
  EXPECT_EQ(serve::verify(signed_sqs("s3cret", "OTHER"), c, kVanillaTime, region).code,
            "InvalidClientTokenId");
  auto r = signed_sqs("s3cret");
  r.body = "Action=DeleteQueue";
  EXPECT_EQ(serve::verify(r, c, kVanillaTime, region).code, "SignatureDoesNotMatch");
  r = vanilla();
  EXPECT_EQ(serve::verify(r, c, kVanillaTime, region).code, "MissingAuthenticationToken");
}

TEST(SigV4, ClockSkewWindowIsFifteenMinutesEitherWay) {
  std::string region;
  serve::Credentials c{{"AKID", "s3cret"}};
  auto r = signed_sqs("s3cret");
  EXPECT_EQ(serve::verify(r, c, kVanillaTime + serve::kClockSkew, region).code, "");
  EXPECT_EQ(serve::verify(r, c, kVanillaTime - serve::kClockSkew, region).code, "");
  EXPECT_EQ(serve::verify(r, c, kVanillaTime + serve::kClockSkew + 1000, region).code,
            "RequestExpired");
  EXPECT_EQ(serve::verify(r, c, kVanillaTime - serve::kClockSkew - 1000, region).code,
            "RequestExpired");
}

}  // namespace
