// Where shards come from: a local directory (or file://), an HTTP(S) server (ranged GETs), or an
// S3-compatible object store (s3://bucket/prefix, AWS Signature V4 signed by libcurl). Remote
// reads retry transient failures (HTTP 5xx and 429, connection resets, timeouts, truncated
// bodies) with exponential backoff and jitter; 403 and 404 fail at once. Errors name the object
// and the last error, never a credential.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zt::data {

struct StoreOptions {
  int retries = 8;              // attempts after the first, for transient failures
  double timeout_s = 60;        // per request
  double backoff_s = 0.2;       // first retry delay; doubles each time, with +-50% jitter
  std::string s3_endpoint;      // e.g. http://127.0.0.1:9000; empty: AWS_ENDPOINT_URL_S3,
                                // AWS_ENDPOINT_URL, else AWS for the region
  std::string s3_region;         // empty: AWS_REGION, AWS_DEFAULT_REGION, else us-east-1
  bool s3_path_style = false;   // http://endpoint/bucket/key instead of http://bucket.endpoint/key
  std::string access_key_id, secret_access_key, session_token;  // default: AWS_* environment
  uint64_t part_bytes = uint64_t(64) << 20;  // uploads larger than this go in parts (S3 multipart)
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  // The URI of `name` under this store's prefix, for messages (never holds credentials).
  virtual std::string describe(const std::string& name) const = 0;
  // True for local directories: files are read in place, without a cache.
  virtual bool is_local() const { return false; }
  virtual std::string local_path(const std::string& name) const { return {}; }
  // The whole object. UserError for a missing object / denied access (404, 403), RuntimeFailure
  // after the retries for transient failures.
  virtual std::string get(const std::string& name) = 0;
  // Streams the object into `path` (created or truncated); returns the bytes written.
  virtual uint64_t download(const std::string& name, const std::string& path) = 0;
  // The object's size in bytes (HTTP: a HEAD request's Content-Length), or -1 when the server does
  // not say. UserError for a missing object.
  virtual int64_t size(const std::string& name) = 0;

  // Writing (checkpoints). The stores that support it override these; the rest say they cannot.
  // Uploads file `path` as `name` (S3: in parts of StoreOptions::part_bytes when larger), with
  // the same retries as reads.
  virtual void put(const std::string& name, const std::string& path);
  // The names under `prefix` (relative to this store's prefix), in lexicographic order.
  virtual std::vector<std::string> list(const std::string& prefix);
  virtual void remove(const std::string& name);
};

// "dir", "file:///dir", "http(s)://host/prefix", "s3://bucket/prefix".
std::unique_ptr<ObjectStore> open_store(const std::string& uri, const StoreOptions& options);

}  // namespace zt::data
