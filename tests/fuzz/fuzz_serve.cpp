// q serve's parsers of what a client sends before it is authenticated
// (cli/serve/wire.cpp, sigv4.cpp, message_attributes.cpp): whatever the
// bytes, they answer or throw SqsError/q::Error, never crash or read out of
// bounds; what they give a client is text an XML or JSON parser reads. And
// the rule SigV4 exists for: a request signed with the right
// secret verifies, the same request with its body, a signed header or the
// secret changed does not.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bytes.hpp"
#include "cli/serve/message_attributes.hpp"
#include "cli/serve/service_input.hpp"
#include "cli/serve/sigv4.hpp"
#include "cli/serve/sqs_error.hpp"
#include "cli/serve/wire.hpp"
#include "libq/error.hpp"

namespace {

const char* const kActions[] = {
    "SendMessage", "SendMessageBatch",     "ReceiveMessage",     "DeleteMessageBatch",
    "CreateQueue", "SetQueueAttributes",   "GetQueueAttributes", "ChangeMessageVisibilityBatch",
    "ListQueues",  "StartMessageMoveTask", "NoSuchAction"};

// 2026-12-01T20:45:00Z and its SigV4 spellings.
constexpr q::Millis kNow = 1'796'157'900'000;
const std::string kAmzDate = "20261201T204500Z";
const std::string kScope = "20261201/us-east-1/sqs/aws4_request";

template <typename F>
void answers_or_refuses(F&& f) {
  try {
    f();
  } catch (const serve::SqsError&) {
  } catch (const q::Error&) {
  }
}

// A form value from the input, with the characters forms are made of
// (=, &, %, +, dots and digits of flattened names) more likely than chance.
std::string form_text(qfuzz::Bytes& in) {
  static const char kAlphabet[] = "=&%+.1290AaFfNameValueEntryAttribute";
  std::string s;
  std::uint32_t n = in.below(120);
  for (std::uint32_t i = 0; i < n && !in.empty(); ++i)
    s.push_back(in.coin() ? kAlphabet[in.below(sizeof kAlphabet - 1)] : static_cast<char>(in.u8()));
  return s;
}

void query_protocol(qfuzz::Bytes& in) {
  std::string action = kActions[in.below(std::size(kActions))];
  std::string body = form_text(in);
  answers_or_refuses([&] {
    auto form = serve::parse_form(body);
    auto json = serve::query_to_json(action, form);
    // As the server writes a JSON reply: bytes that are not UTF-8 replaced.
    (void)json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  });
}

// What SQS clients may be given: sqs_text() of anything is text valid_body()
// accepts, and leaves such text as it is.
void body_text(qfuzz::Bytes& in) {
  std::string bytes = in.str(200);
  std::string text = serve::sqs_text(bytes);
  if (!serve::valid_body(text)) std::abort();
  if (serve::valid_body(bytes) != (text == bytes)) std::abort();
  std::string xml = serve::xml_error(serve::invalid_parameter(bytes), "rid");
  if (!serve::valid_body(xml)) std::abort();  // an XML parser can read it
}

void message_attributes(qfuzz::Bytes& in) {
  auto json = nlohmann::json::parse(in.str(200), nullptr, false);
  if (json.is_discarded()) return;
  answers_or_refuses([&] {
    auto attributes = serve::read_message_attributes(json);
    (void)serve::attributes_md5(attributes);
    (void)serve::to_q(attributes);
    (void)serve::attributes_size(attributes);
  });
}

void error_replies(qfuzz::Bytes& in) {
  std::string code = in.str(20);
  std::string type = in.str(20);
  std::string message = in.str(60);
  serve::SqsError e(400, code, type, message);
  std::string xml = serve::xml_error(e, "rid");
  // The message is escaped: no markup of its own gets into the reply.
  auto from = xml.find("<Message>"), to = xml.rfind("</Message>");
  if (from == std::string::npos || to == std::string::npos || to < from) std::abort();
  if (xml.substr(from + 9, to - from - 9).find('<') != std::string::npos) std::abort();
  (void)serve::json_error(e);
}

// Any Authorization header and headers: an answer, never a crash.
void unsigned_requests(qfuzz::Bytes& in, const serve::Credentials& credentials) {
  serve::SignedRequest r{"POST", "/" + in.str(20), {}, in.str(40)};
  std::uint32_t headers = in.below(5);
  for (std::uint32_t i = 0; i < headers; ++i) {
    static const char* const kNames[] = {"Authorization", "X-Amz-Date", "Host",
                                         "x-amz-content-sha256", "X-Other"};
    r.headers.emplace_back(kNames[in.below(5)], in.str(90));
  }
  if (in.coin())
    r.headers.emplace_back("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDFUZZ/" + in.str(40) +
                                                ", SignedHeaders=" + in.str(20) +
                                                ", Signature=" + in.str(64));
  std::string region;
  auto failure = serve::verify(r, credentials, kNow, region);
  if (failure.code.empty()) std::abort();  // nobody can sign without the secret
}

serve::SignedRequest signed_request(const serve::SignedRequest& r, const std::string& secret,
                                    const std::vector<std::string>& names) {
  serve::SignedRequest out = r;
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ";") + n;
  out.headers.emplace_back(
      "Authorization", "AWS4-HMAC-SHA256 Credential=AKIDFUZZ/" + kScope +
                           ", SignedHeaders=" + list +
                           ", Signature=" + serve::signature(r, secret, kAmzDate, kScope, names));
  return out;
}

void signed_requests(qfuzz::Bytes& in, const serve::Credentials& credentials) {
  serve::SignedRequest r{in.coin() ? "POST" : "GET", "/000000000000/" + in.str(30), {}, in.str(80)};
  r.headers = {{"Host", "127.0.0.1:" + std::to_string(in.u16())}, {"X-Amz-Date", kAmzDate}};
  std::vector<std::string> names = {"host", "x-amz-date"};
  if (in.coin()) {
    std::string value = in.str(30);
    r.headers.emplace_back("X-Amz-Target", value);
    names.push_back("x-amz-target");
  }
  std::string region;
  auto good = serve::verify(signed_request(r, "fuzz-secret", names), credentials, kNow, region);
  if (!good.code.empty() || region != "us-east-1") std::abort();

  auto wrong_secret =
      serve::verify(signed_request(r, "fuzz-secreT", names), credentials, kNow, region);
  if (wrong_secret.code.empty()) std::abort();

  auto changed = signed_request(r, "fuzz-secret", names);
  std::size_t at = in.below(static_cast<std::uint32_t>(changed.body.size() + 1));
  if (at < changed.body.size())
    changed.body[at] = static_cast<char>(changed.body[at] ^ (1 + in.below(255)));
  else
    changed.body += 'x';
  if (serve::verify(changed, credentials, kNow, region).code.empty()) std::abort();

  auto moved = signed_request(r, "fuzz-secret", names);
  moved.headers[0].second += "9";  // another Host
  if (serve::verify(moved, credentials, kNow, region).code.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const serve::Credentials credentials = {{"AKIDFUZZ", "fuzz-secret"}};
  qfuzz::Bytes in(data, size);
  switch (in.below(6)) {
    case 0: query_protocol(in); break;
    case 5: body_text(in); break;
    case 1: message_attributes(in); break;
    case 2: error_replies(in); break;
    case 3: unsigned_requests(in, credentials); break;
    default: signed_requests(in, credentials); break;
  }
  return 0;
}
