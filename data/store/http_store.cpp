// HTTP(S) and S3 object stores over libcurl. libcurl signs S3 requests (AWS Signature V4,
// CURLOPT_AWS_SIGV4), so no hand-written crypto; OpenSSL's MD5 (libcurl's own TLS library)
// checks a multipart upload's ETag. One retry loop serves both.
#include <curl/curl.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <unistd.h>

#include "data/store/object_store.h"
#include "engine/core/redact.h"
#include "engine/core/status.h"

namespace zt::data {

std::unique_ptr<ObjectStore> make_local_store(const std::string& dir);

namespace {

struct Sink {
  std::string* text = nullptr;
  FILE* file = nullptr;
  uint64_t bytes = 0;         // body bytes received by this attempt
  uint64_t resume = 0;        // bytes already in `file` from earlier attempts (Range request)
  CURL* handle = nullptr;
  bool checked = false;       // first chunk seen: the status says whether the range was honoured
  bool ranges = false;        // the server sent "Accept-Ranges: bytes"
  bool ok = true;             // 2xx status: the body is the object (else it is an error page)
};

size_t header_cb(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<Sink*>(user);
  std::string line(data, size * n);
  for (auto& c : line) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (line.rfind("accept-ranges:", 0) == 0 && line.find("bytes") != std::string::npos) sink->ranges = true;
  return size * n;
}

size_t write_cb(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t len = size * n;
  if (!sink->checked) {
    sink->checked = true;
    long status = 0;
    curl_easy_getinfo(sink->handle, CURLINFO_RESPONSE_CODE, &status);
    sink->ok = status >= 200 && status < 300;
    if (sink->resume > 0 && status == 200 && sink->file) {  // range ignored: start the file again
      if (std::fflush(sink->file) != 0 || ::ftruncate(fileno(sink->file), 0) != 0) return 0;
      std::rewind(sink->file);
      sink->resume = 0;
    }
  }
  if (!sink->ok) return len;  // an error page: never part of the object
  if (sink->text) sink->text->append(data, len);
  if (sink->file && std::fwrite(data, 1, len, sink->file) != len) return 0;  // aborts the transfer
  sink->bytes += len;
  return len;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// The profile AWS_PROFILE (default "default") of the shared credentials file
// (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials): key = value lines under [profile].
std::map<std::string, std::string> shared_credentials() {
  const std::string home = env_or("HOME", "");
  const std::string path = env_or("AWS_SHARED_CREDENTIALS_FILE", home.empty() ? "" : home + "/.aws/credentials");
  const std::string profile = env_or("AWS_PROFILE", "default");
  std::map<std::string, std::string> out;
  std::ifstream f(path);
  std::string line, section;
  auto trim = [](std::string s) {
    const size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
  };
  while (std::getline(f, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const size_t eq = line.find('=');
    if (section == profile && eq != std::string::npos) out[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return out;
}

class HttpStore final : public ObjectStore {
 public:
  // For S3: `base` is the request URL prefix (endpoint + bucket, path- or host-style) and
  // `display` the s3:// URI shown in messages.
  // For S3, `bucket_url` (endpoint + bucket) and `key_prefix` ("prefix/" or "") serve listing.
  HttpStore(std::string base, std::string display, const StoreOptions& o, bool s3, std::string bucket_url = "",
            std::string key_prefix = "")
      : base_(std::move(base)), display_(redact_url_passwords(display)), o_(o), s3_(s3), bucket_url_(std::move(bucket_url)),
        key_prefix_(std::move(key_prefix)) {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    if (s3_) {
      // As the AWS CLI and SDKs: the spec's keys, else the environment, else the shared
      // credentials file's profile (AWS_PROFILE, default "default").
      key_ = !o.access_key_id.empty() ? o.access_key_id : env_or("AWS_ACCESS_KEY_ID", "");
      secret_ = !o.secret_access_key.empty() ? o.secret_access_key : env_or("AWS_SECRET_ACCESS_KEY", "");
      token_ = !o.session_token.empty() ? o.session_token : env_or("AWS_SESSION_TOKEN", "");
      if (key_.empty() || secret_.empty()) {
        const auto profile = shared_credentials();
        key_ = profile.count("aws_access_key_id") ? profile.at("aws_access_key_id") : "";
        secret_ = profile.count("aws_secret_access_key") ? profile.at("aws_secret_access_key") : "";
        token_ = profile.count("aws_session_token") ? profile.at("aws_session_token") : "";
      }
      if (key_.empty() || secret_.empty())
        user_error("{}: no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE with "
                   "~/.aws/credentials, or [data] s3_access_key_id / s3_secret_access_key", display_);
    }
  }
  std::string describe(const std::string& name) const override { return display_ + "/" + name; }

  std::string get(const std::string& name) override {
    std::string out;
    fetch(name, [&](Sink& s) {
      out.clear();
      s = Sink{};
      s.text = &out;
      return true;
    });
    return out;
  }

  uint64_t download(const std::string& name, const std::string& path) override {
    FILE* f = nullptr;
    uint64_t have = 0;       // bytes on disk from earlier attempts
    bool ranges = false;     // the server accepts Range requests
    const uint64_t n = fetch(name, [&](Sink& s) {
      if (f) {  // an earlier attempt broke off: keep its bytes when the server can resume
        std::fflush(f);
        have = s.resume + s.bytes;  // (resume is 0 when the server ignored the range and we restarted)
        ranges = ranges || s.ranges;
        std::fclose(f);
      }
      const bool resume = ranges && have > 0;
      f = std::fopen(path.c_str(), resume ? "ab" : "wb");
      if (!resume) have = 0;
      s = Sink{};
      s.file = f;
      s.resume = have;
      return f != nullptr;
    });
    const bool ok = f && std::fflush(f) == 0;
    if (f) std::fclose(f);
    if (!ok) throw RuntimeFailure(fmt::format("{}: cannot write {}", describe(name), path));
    return n;
  }

 private:
  // Runs GET with retries; `reset(sink)` prepares the destination before each attempt.
  template <typename Reset>
  uint64_t fetch(const std::string& name, Reset reset) {
    const std::string url = base_ + "/" + name;
    std::mt19937_64 rng(std::random_device{}());
    std::string last_error;
    Sink sink;
    for (int attempt = 0; attempt <= o_.retries; ++attempt) {
      if (attempt > 0) {
        const double base = o_.backoff_s * double(1ull << std::min(attempt - 1, 10));
        const double jitter = std::uniform_real_distribution<double>(0.5, 1.5)(rng);
        std::this_thread::sleep_for(std::chrono::duration<double>(std::min(base * jitter, 30.0)));
      }
      if (!reset(sink)) throw RuntimeFailure(fmt::format("{}: cannot open the download target", describe(name)));
      long status = 0;
      double expected = -1;
      const CURLcode rc = perform(url, sink, status, expected);
      if (rc == CURLE_OK && status >= 200 && status < 300) {
        if (expected >= 0 && double(sink.bytes) != expected) {
          last_error = fmt::format("truncated body: {} of {} bytes", sink.bytes, uint64_t(expected));
          continue;
        }
        return sink.resume + sink.bytes;
      }
      if (rc == CURLE_OK && status == 416 && sink.resume > 0) {  // nothing left to fetch
        last_error = "HTTP 416";
        continue;
      }
      if (rc == CURLE_OK && (status == 403 || status == 404 || status == 400 || status == 401))
        user_error("{}: HTTP {} ({})", describe(name), status,
                   status == 404 ? "no such object" : status == 403 ? "access denied" : "rejected");
      last_error = rc != CURLE_OK ? std::string(curl_easy_strerror(rc)) : fmt::format("HTTP {}", status);
    }
    throw RuntimeFailure(fmt::format("{}: giving up after {} attempts; last error: {}", describe(name),
                                     o_.retries + 1, last_error));
  }

  CURLcode perform(const std::string& url, Sink& sink, long& status, double& expected) {
    CURL* h = curl_easy_init();
    if (!h) throw RuntimeFailure("curl_easy_init failed");
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    sink.handle = h;
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &sink);
    const std::string range = fmt::format("{}-", sink.resume);
    if (sink.resume > 0) curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());  // ranged GET: resume
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, long(o_.timeout_s * 1000));
    // A stalled transfer (under 1 KiB/s for timeout_s) counts as a timeout; a long, steady
    // download of a big shard does not.
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, long(std::max(1.0, o_.timeout_s)));
    curl_slist* headers = nullptr;
    if (s3_) {
      const std::string sigv4 = "aws:amz:" + o_.s3_region + ":s3";
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
      curl_easy_setopt(h, CURLOPT_USERNAME, key_.c_str());
      curl_easy_setopt(h, CURLOPT_PASSWORD, secret_.c_str());
      headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
      if (!token_.empty()) headers = curl_slist_append(headers, ("x-amz-security-token: " + token_).c_str());
      curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    }
    const CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_off_t len = -1;
    curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
    expected = double(len);
    curl_easy_cleanup(h);
    curl_slist_free_all(headers);
    return rc;
  }

  // ---- writing (S3 only): PUT, multipart uploads, ListObjectsV2, DELETE ----
 public:
  void put(const std::string& name, const std::string& path) override {
    if (!s3_) ObjectStore::put(name, path);
    const uint64_t size = std::filesystem::file_size(path);
    const std::string url = base_ + "/" + name;
    if (size <= o_.part_bytes) {
      send_with_retries(name, {"PUT", url, path, 0, size, ""});
      return;
    }
    // Multipart: create, upload the parts (each retried on its own), complete.
    const std::string created = send_with_retries(name, {"POST", url + "?uploads", "", 0, 0, ""}).body;
    const std::string id = xml_value(created, "UploadId");
    if (id.empty()) throw RuntimeFailure(fmt::format("{}: no UploadId in the reply to a multipart upload", describe(name)));
    const std::string qid = escape(id);
    std::string done = "<CompleteMultipartUpload>";
    std::vector<std::string> part_etags;
    try {
      int part = 1;
      for (uint64_t off = 0; off < size; off += o_.part_bytes, ++part) {
        const uint64_t len = std::min<uint64_t>(o_.part_bytes, size - off);
        const Response r = send_with_retries(
            name, {"PUT", fmt::format("{}?partNumber={}&uploadId={}", url, part, qid), path, off, len, ""});
        done += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", part, r.etag);
        part_etags.push_back(r.etag);
      }
      done += "</CompleteMultipartUpload>";
      // Completing is not idempotent: an attempt whose reply was lost (a reset, a cut body) may
      // have completed the upload, and a retry is then refused (S3: NoSuchUpload; s3rver: 500).
      // After a failed attempt the object itself answers: its ETag equal to this upload's (S3's
      // MD5 of the parts' MD5s, or the bytes' MD5 as s3rver gives it) means these bytes are there.
      bool recovered = false;  // the object was found holding these bytes: abort the upload, in case
      const Response r = send_with_retries(name, {"POST", url + "?uploadId=" + qid, "", 0, 0, done}, [&] {
        return recovered = holds_upload(url, path, part_etags);
      });
      if (recovered) {
        try {  // it completed (then nothing is left to abort) or the same bytes were there already
          send_with_retries(name, {"DELETE", url + "?uploadId=" + qid, "", 0, 0, ""});
        } catch (...) {
        }
      }
      if (r.body.find("<Error>") != std::string::npos)  // S3 may report failure with status 200
        throw RuntimeFailure(fmt::format("{}: completing the multipart upload failed: {}", describe(name), r.body));
    } catch (...) {
      try {  // best effort: the parts of an abandoned upload cost storage
        send_with_retries(name, {"DELETE", url + "?uploadId=" + qid, "", 0, 0, ""});
      } catch (...) {
      }
      throw;
    }
  }

  std::vector<std::string> list(const std::string& prefix) override {
    if (!s3_) return ObjectStore::list(prefix);
    std::vector<std::string> out;
    std::string token;
    do {
      std::string url = bucket_url_ + "?list-type=2";
      if (!token.empty()) url = bucket_url_ + "?continuation-token=" + escape(token) + "&list-type=2";
      url += "&prefix=" + escape(key_prefix_ + prefix);
      const std::string body = send_with_retries(prefix, {"GET", url, "", 0, 0, ""}).body;
      for (size_t at = 0; (at = body.find("<Key>", at)) != std::string::npos;) {
        const size_t end = body.find("</Key>", at);
        if (end == std::string::npos) break;
        const std::string key = body.substr(at + 5, end - at - 5);
        if (key.rfind(key_prefix_, 0) == 0) out.push_back(key.substr(key_prefix_.size()));
        at = end;
      }
      token = xml_value(body, "IsTruncated") == "true" ? xml_value(body, "NextContinuationToken") : "";
    } while (!token.empty());
    std::sort(out.begin(), out.end());
    return out;
  }

  int64_t size(const std::string& name) override {
    return send_with_retries(name, {"HEAD", base_ + "/" + name, "", 0, 0, ""}).length;
  }

  void remove(const std::string& name) override {
    if (!s3_) ObjectStore::remove(name);
    send_with_retries(name, {"DELETE", base_ + "/" + name, "", 0, 0, ""});
  }

 private:
  struct Request {
    std::string method, url;
    std::string file;           // body: bytes [off, off + len) of this file, or
    uint64_t off = 0, len = 0;
    std::string text;           // this text (POST)
  };
  struct Response {
    long status = 0;
    std::string body, etag;
    int64_t length = -1;  // Content-Length, when the server gave one
  };

  static std::string xml_value(const std::string& xml, const std::string& tag) {
    const size_t a = xml.find("<" + tag + ">");
    if (a == std::string::npos) return "";
    const size_t b = xml.find("</" + tag + ">", a);
    return b == std::string::npos ? "" : xml.substr(a + tag.size() + 2, b - a - tag.size() - 2);
  }

  static std::string escape(const std::string& v) {
    std::string out;
    for (unsigned char c : v) {  // RFC 3986 unreserved characters stay; the rest %XX (as SigV4 wants)
      if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') out += char(c);
      else out += fmt::format("%{:02X}", c);
    }
    return out;
  }

  struct Upload {
    FILE* f = nullptr;
    uint64_t left = 0;
  };
  static size_t read_cb(char* buf, size_t size, size_t n, void* user) {
    auto* u = static_cast<Upload*>(user);
    const size_t want = std::min<uint64_t>(size * n, u->left);
    const size_t got = want ? std::fread(buf, 1, want, u->f) : 0;
    u->left -= got;
    return got;
  }
  static size_t text_cb(char* data, size_t size, size_t n, void* user) {
    static_cast<std::string*>(user)->append(data, size * n);
    return size * n;
  }
  static size_t etag_cb(char* data, size_t size, size_t n, void* user) {
    std::string line(data, size * n);
    std::string lower = line;
    for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (lower.rfind("etag:", 0) == 0) {
      std::string v = line.substr(5);
      while (!v.empty() && (v.front() == ' ')) v.erase(v.begin());
      while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.pop_back();
      *static_cast<std::string*>(user) = v;
    }
    return size * n;
  }

  // Whether the object at `url` holds the bytes of `path` uploaded in parts with these ETags.
  bool holds_upload(const std::string& url, const std::string& path, const std::vector<std::string>& part_etags) {
    Response head;
    if (send({"HEAD", url, "", 0, 0, ""}, head) != CURLE_OK || head.status != 200) return false;
    const std::string etag = unquote(head.etag);
    std::string digests;  // the parts' MD5s, binary
    for (const std::string& e : part_etags) {
      const std::string hex = unquote(e);
      if (hex.size() != 32 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
      for (size_t i = 0; i < hex.size(); i += 2) digests += char(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    if (etag == fmt::format("{}-{}", md5_hex(digests), part_etags.size())) return true;
    if (etag.find('-') != std::string::npos) return false;
    return etag == md5_file(path);  // s3rver's ETag: the MD5 of the whole object
  }

  static std::string md5_file(const std::string& path) {
    std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    std::ifstream f(path, std::ios::binary);
    if (!ctx || !f || EVP_DigestInit_ex(ctx.get(), EVP_md5(), nullptr) != 1) return "";
    std::vector<char> buf(size_t(4) << 20);
    while (f.read(buf.data(), std::streamsize(buf.size())) || f.gcount() > 0)
      if (EVP_DigestUpdate(ctx.get(), buf.data(), size_t(f.gcount())) != 1) return "";
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    return EVP_DigestFinal_ex(ctx.get(), d, &n) == 1 ? hex(d, n) : "";
  }

  static std::string unquote(std::string v) {
    v.erase(std::remove(v.begin(), v.end(), '"'), v.end());
    for (auto& c : v) c = char(std::tolower(static_cast<unsigned char>(c)));
    return v;
  }

  static std::string md5_hex(const std::string& bytes) {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    return EVP_Digest(bytes.data(), bytes.size(), d, &n, EVP_md5(), nullptr) == 1 ? hex(d, n) : "";
  }

  static std::string hex(const unsigned char* d, unsigned int n) {
    std::string out;
    for (unsigned int i = 0; i < n; ++i) out += fmt::format("{:02x}", d[i]);
    return out;
  }

  // One request with the read path's retry policy (5xx, 429, transport errors; 4xx fail at once).
  // `done_already`, when given, is asked after each failed attempt whether the request took
  // effect anyway (a request that is not idempotent, whose reply was lost): then it succeeded.
  Response send_with_retries(const std::string& name, const Request& req,
                             const std::function<bool()>& done_already = {}) {
    std::mt19937_64 rng(std::random_device{}());
    std::string last_error;
    for (int attempt = 0; attempt <= o_.retries; ++attempt) {
      if (attempt > 0) {
        const double base = o_.backoff_s * double(1ull << std::min(attempt - 1, 10));
        const double jitter = std::uniform_real_distribution<double>(0.5, 1.5)(rng);
        std::this_thread::sleep_for(std::chrono::duration<double>(std::min(base * jitter, 30.0)));
      }
      Response r;
      const CURLcode rc = send(req, r);
      if (rc == CURLE_OK && r.status >= 200 && r.status < 300) return r;
      if (done_already && done_already()) return Response{200, "", "", -1};
      if (rc == CURLE_OK && r.status >= 400 && r.status < 500 && r.status != 429)
        user_error("{}: {} HTTP {} ({})", describe(name), req.method, r.status,
                   r.status == 404 ? "no such object or bucket" : r.status == 403 ? "access denied" : "rejected");
      last_error = rc != CURLE_OK ? std::string(curl_easy_strerror(rc)) : fmt::format("HTTP {}", r.status);
    }
    throw RuntimeFailure(fmt::format("{}: {} giving up after {} attempts; last error: {}", describe(name), req.method,
                                     o_.retries + 1, last_error));
  }

  CURLcode send(const Request& req, Response& r) {
    CURL* h = curl_easy_init();
    if (!h) throw RuntimeFailure("curl_easy_init failed");
    curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, long(o_.timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, long(std::max(1.0, o_.timeout_s)));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, text_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r.body);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, etag_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &r.etag);
    Upload up;
    if (!req.file.empty()) {
      up.f = std::fopen(req.file.c_str(), "rb");
      if (!up.f || std::fseek(up.f, long(req.off), SEEK_SET) != 0) {
        if (up.f) std::fclose(up.f);
        curl_easy_cleanup(h);
        throw RuntimeFailure(fmt::format("{}: cannot read for upload", req.file));
      }
      up.left = req.len;
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_READFUNCTION, read_cb);
      curl_easy_setopt(h, CURLOPT_READDATA, &up);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, curl_off_t(req.len));
    } else if (req.method == "POST") {
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.text.c_str());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, long(req.text.size()));
    } else if (req.method == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (req.method != "GET") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    }
    curl_slist* headers = curl_slist_append(nullptr, "Expect:");  // no 100-continue round trip
    const std::string sigv4 = "aws:amz:" + o_.s3_region + ":s3";
    if (s3_) {  // plain HTTP(S) sources: userinfo in the URL, as curl takes it
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
      curl_easy_setopt(h, CURLOPT_USERNAME, key_.c_str());
      curl_easy_setopt(h, CURLOPT_PASSWORD, secret_.c_str());
      headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    }
    if (req.method == "POST") headers = curl_slist_append(headers, "Content-Type: application/xml");
    if (!token_.empty()) headers = curl_slist_append(headers, ("x-amz-security-token: " + token_).c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    const CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    curl_off_t length = -1;
    if (curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK) r.length = int64_t(length);
    curl_easy_cleanup(h);
    curl_slist_free_all(headers);
    if (up.f) std::fclose(up.f);
    return rc;
  }

  std::string base_, display_;
  StoreOptions o_;
  bool s3_;
  std::string bucket_url_, key_prefix_;
  std::string key_, secret_, token_;
};

std::string trim_slashes(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// s3://bucket/prefix with the endpoint and region already resolved.
std::unique_ptr<ObjectStore> open_s3(const std::string& uri, const std::string& uri_in, const StoreOptions& o) {
  const std::string rest = uri.substr(5);
  const size_t slash = rest.find('/');
  const std::string bucket = rest.substr(0, slash);
  const std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (bucket.empty()) user_error("{}: an S3 URI is s3://bucket/prefix", uri_in);
  std::string endpoint = trim_slashes(o.s3_endpoint);
  if (endpoint.empty()) endpoint = "https://s3." + o.s3_region + ".amazonaws.com";
  std::string base;
  if (o.s3_path_style) {
    base = endpoint + "/" + bucket;
  } else {  // virtual-hosted style: the bucket becomes part of the host name
    const size_t scheme = endpoint.find("://");
    base = endpoint.substr(0, scheme + 3) + bucket + "." + endpoint.substr(scheme + 3);
  }
  const std::string bucket_url = base;
  if (!prefix.empty()) base += "/" + prefix;
  return std::make_unique<HttpStore>(base, uri, o, true, bucket_url, prefix.empty() ? "" : prefix + "/");
}

}  // namespace

std::unique_ptr<ObjectStore> open_store(const std::string& uri_in, const StoreOptions& o) {
  for (const char* scheme : {"s3://", "http://", "https://", "file://"})
    if (uri_in.rfind(scheme, 0) == 0 && trim_slashes(uri_in).size() < std::string(scheme).size())
      user_error("{}: no {} after {}", uri_in, scheme == std::string("s3://") ? "bucket" : scheme == std::string("file://") ? "path" : "host", scheme);
  const std::string uri = trim_slashes(uri_in);
  if (uri.rfind("file://", 0) == 0) return make_local_store(uri.substr(7));
  if (uri.rfind("http://", 0) == 0 || uri.rfind("https://", 0) == 0)
    return std::make_unique<HttpStore>(uri, uri, o, false);
  if (uri.rfind("s3://", 0) == 0) {
    // The spec's endpoint and region win; else the AWS CLI's and SDKs' variables.
    StoreOptions so = o;
    if (so.s3_endpoint.empty()) so.s3_endpoint = env_or("AWS_ENDPOINT_URL_S3", env_or("AWS_ENDPOINT_URL", ""));
    if (so.s3_region.empty()) so.s3_region = env_or("AWS_REGION", env_or("AWS_DEFAULT_REGION", "us-east-1"));
    return open_s3(uri, uri_in, so);
  }
  return make_local_store(uri);
}


}  // namespace zt::data
