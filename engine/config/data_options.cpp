// [data] -> data::DataOptions (see data_options.h).
#include "engine/config/data_options.h"

#include "engine/core/byte_size.h"

namespace zt {

data::DataOptions data_options(const RunSpec& spec) {
  const auto& d = spec.data;
  data::DataOptions o;
  o.store.retries = int(d.retries);
  o.store.timeout_s = d.timeout_s;
  o.store.s3_endpoint = d.s3_endpoint;
  o.store.s3_region = d.s3_region;
  o.store.s3_path_style = d.s3_path_style;
  o.store.access_key_id = d.s3_access_key_id;
  o.store.secret_access_key = d.s3_secret_access_key;
  o.store.session_token = d.s3_session_token;
  o.cache_dir = d.cache_dir;
  o.cache_limit = parse_byte_size(d.cache_limit, "[data] cache_limit");
  o.prefetch = int(d.prefetch);
  o.shuffle_block = int(d.shuffle_block);
  o.packing = d.packing;
  return o;
}

}  // namespace zt
